"""Value types for MoE models and their weight formats."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """How expert weights are stored: element width and the scale blocks that come with it.

    `scale_block` is (rows, cols) of the weight matrix [N, K] covered by one scale of `scale_bytes`
    (fp8 block: 128x128 fp32; nvfp4: 1x16 ue4m3; mxfp4: 1x32 ue8m0); (0, 0) when unscaled.
    """

    name: str  # "bf16" | "fp16" | "fp8" | "fp8-block" | "nvfp4" | "mxfp4"
    bits: int
    scale_block: tuple[int, int] = (0, 0)
    scale_bytes: int = 0

    def matrix_bytes(self, n: int, k: int) -> int:
        """Bytes of one [n, k] weight matrix, scales included."""
        data = n * k * self.bits // 8
        if self.scale_bytes == 0:
            return data
        bn, bk = self.scale_block
        return data + math.ceil(n / bn) * math.ceil(k / bk) * self.scale_bytes

    @property
    def k_multiple(self) -> int:
        """K (and, for 2-D blocks, N) must be a multiple of this for the format's scale blocks."""
        return self.scale_block[1] if self.scale_bytes else 1


BF16 = WeightFormat("bf16", 16)
FP16 = WeightFormat("fp16", 16)
FP32 = WeightFormat("fp32", 32)
FP8 = WeightFormat("fp8", 8)  # per-tensor scale: negligible bytes
FP8_BLOCK = WeightFormat("fp8-block", 8, (128, 128), 4)
NVFP4 = WeightFormat("nvfp4", 4, (1, 16), 1)
MXFP4 = WeightFormat("mxfp4", 4, (1, 32), 1)


# Model sizes beyond any real model are refused: they are typos or hostile files, and the routing
# statistics cost grows with experts x top-k. The most experts of a public MoE is 2,048 (Switch
# Transformer switch-c-2048); decoder MoEs that engines serve have at most 512 (Qwen3-Next,
# Qwen/Qwen3-Next-80B-A3B-Instruct config.json) and route a token to at most 10 of them there.
MAX_EXPERTS = 2048
MAX_TOP_K = 16


@dataclass(frozen=True, slots=True)
class MoEModel:
    """The parts of a model that decide its expert GEMMs. Widths are per expert, unsharded.

    H = hidden_size, I = expert_width, E = num_experts, k = top_k.
    """

    name: str
    hidden_size: int
    expert_width: int
    num_experts: int
    top_k: int
    num_layers: int
    moe_layers: int
    shared_experts: int  # shared experts per MoE layer (0 if none)
    shared_expert_width: int  # total width of the shared-expert MLP (0 if none)
    weights: WeightFormat
    source: str  # preset name + its public origin, or the path the config was read from
    hf_architecture: str = ""  # config.json's architectures[0], e.g. "DeepseekV3ForCausalLM"

    @property
    def weight_dtype(self) -> str:
        return self.weights.name

    def as_dict(self) -> dict[str, object]:
        """The model as output (JSON and reports): every command writes it through here."""
        return {"name": self.name, "hidden_size": self.hidden_size, "expert_width": self.expert_width,
                "num_experts": self.num_experts, "top_k": self.top_k, "moe_layers": self.moe_layers,
                "num_layers": self.num_layers, "shared_experts": self.shared_experts,
                "shared_expert_width": self.shared_expert_width, "weight_dtype": self.weight_dtype,
                "source": self.source}
