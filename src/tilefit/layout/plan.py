"""Per-GPU expert GEMMs of one MoE layer under a TP/EP layout.

Shapes (H = hidden, I = expert width, E = experts, T_e = tokens routed to expert e):
  gemm1 (gate+up fused): [T_e, H] x [H, 2*I/tp]   n = 2*I/tp, k = H
  gemm2 (down):          [T_e, I/tp] x [I/tp, H]  n = H,      k = I/tp
`tp` shards every expert's width, `ep` splits the expert set: a layout uses tp * ep GPUs for the
MoE layers and each GPU holds E/ep experts. Attention DP does not change the routed expert GEMMs;
shared experts run like the attention MLP, sharded over the attention TP group ((tp*ep)/dp GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilefit.errors import UsageError
from tilefit.models.types import MoEModel

MAX_PARALLEL = 4096
# Per-rank expert widths the engines pad up to, by weight format, where a TP shard leaves a width
# the format's scale blocks do not divide. MXFP4: vLLM 0.33.0 (fused_moe/oracle/mxfp4.py
# mxfp4_round_up_hidden_size_and_intermediate_size) rounds to 128 for its Marlin, TRT-LLM, CUTLASS
# and FlashInfer CUTLASS backends, 64 otherwise; sglang 0.5.23 (quantization/mxfp4.py) to 128 for
# Marlin and FlashInfer, 64 for triton_kernels. gpt-oss (2880) gets 768 at TP4 and 384 at TP8 from
# either. Widths the scale block divides are left as they are, although the 128-aligned backends
# also pad those (gpt-oss TP1 2880 -> 2944, TP2 1440 -> 1536); other formats are refused with the
# divisors that work.
PAD_WIDTH_TO = {"mxfp4": 128}


@dataclass(frozen=True, slots=True)
class Layout:
    tp: int = 1
    ep: int = 1
    dp: int = 1  # attention data parallelism: shards shared experts over gpus/dp instead of gpus

    def __post_init__(self) -> None:
        for name in ("tp", "ep", "dp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_PARALLEL:
                raise UsageError(f"--{name} must be an integer in 1..{MAX_PARALLEL}, got {v!r}")
        if self.gpus % self.dp:
            raise UsageError(f"--dp {self.dp} must divide the {self.gpus} GPUs of tp {self.tp} x ep {self.ep}")

    @property
    def attention_tp(self) -> int:
        """GPUs that shard one attention (and shared-expert) replica."""
        return self.gpus // self.dp

    @property
    def gpus(self) -> int:
        """GPUs the MoE layers span."""
        return self.tp * self.ep

    def label(self) -> str:
        if self.tp > 1 and self.ep > 1:
            return f"TP{self.tp}xEP{self.ep}"
        if self.ep > 1:
            return f"EP{self.ep}"
        return f"TP{self.tp}"


@dataclass(frozen=True, slots=True)
class GemmShape:
    """One grouped GEMM on one GPU: `groups` matrices [n, k] (weights), multiplied by [T_g, k]."""

    name: str  # "gemm1" | "gemm2" | "shared.gemm1" | "shared.gemm2"
    n: int
    k: int
    groups: int  # local experts (1 for the shared expert's dense GEMM)
    weight_bytes: int  # all groups, scales included


@dataclass(frozen=True, slots=True)
class LayerPlan:
    model: MoEModel
    layout: Layout
    local_experts: int
    gemms: tuple[GemmShape, ...]  # routed first, then shared
    padded_from: int | None = None  # the per-rank width before the engine's padding, if padded
    fused_shared: int = 0  # shared experts the engine runs inside the fused MoE (in local_experts)

    @property
    def routed(self) -> tuple[GemmShape, ...]:
        return tuple(g for g in self.gemms if not g.name.startswith("shared"))

    @property
    def weight_bytes_per_layer(self) -> int:
        return sum(g.weight_bytes for g in self.gemms)

    @property
    def weight_bytes_all_layers(self) -> int:
        return self.weight_bytes_per_layer * self.model.moe_layers

    def memory_share(self, memory_bytes: int) -> float:
        """Expert weights of all MoE layers as a share of one GPU's memory (a lower bound on use)."""
        return self.weight_bytes_all_layers / memory_bytes


def plan_layer(model: MoEModel, layout: Layout, fused_shared: int = 0) -> LayerPlan:
    """The GEMMs of one MoE layer on one GPU; errors say which divisibility fails and what divides.
    `fused_shared`: shared experts the engine appends to the fused MoE on every rank (sglang's
    shared-expert fusion, Engine.shared_fusion): they join the routed groups, with the routed width
    split over TP, instead of running as a dense MLP."""
    h, i, e = model.hidden_size, model.expert_width, model.num_experts
    if i % layout.tp:
        raise UsageError(f"--tp {layout.tp} does not divide {model.name}'s expert width {i}; "
                         f"choose tp from {_divisors(i)}")
    if e % layout.ep:
        raise UsageError(f"--ep {layout.ep} does not divide {model.name}'s {e} experts; "
                         f"choose ep from {_divisors(e)}")
    w = model.weights
    i_tp = i // layout.tp
    padded_from = None
    if w.k_multiple > 1 and i_tp % w.k_multiple:
        pad = PAD_WIDTH_TO.get(w.name)
        if pad is None:
            raise UsageError(f"--tp {layout.tp} leaves an expert width of {i_tp}, not a multiple of the "
                             f"{w.name} scale block {w.k_multiple}; use a smaller tp")
        padded_from, i_tp = i_tp, -(-i_tp // pad) * pad
    local = e // layout.ep + fused_shared
    gemms = [
        GemmShape("gemm1", 2 * i_tp, h, local, local * w.matrix_bytes(2 * i_tp, h)),
        GemmShape("gemm2", h, i_tp, local, local * w.matrix_bytes(h, i_tp)),
    ]
    if model.shared_expert_width and not fused_shared:
        # Shared experts run as a dense MLP on every token, sharded over the attention TP group.
        s, shards = model.shared_expert_width, layout.attention_tp
        if s % shards:
            raise UsageError(f"{shards}-way attention TP does not divide the shared expert width {s}; "
                             f"use --dp to replicate it")
        s_tp = s // shards
        if w.k_multiple > 1 and s_tp % w.k_multiple:
            raise UsageError(f"{shards}-way attention TP leaves a shared expert width of {s_tp}, not a "
                             f"multiple of the {w.name} scale block {w.k_multiple}; use --dp to replicate it")
        gemms += [
            GemmShape("shared.gemm1", 2 * s_tp, h, 1, w.matrix_bytes(2 * s_tp, h)),
            GemmShape("shared.gemm2", h, s_tp, 1, w.matrix_bytes(h, s_tp)),
        ]
    return LayerPlan(model, layout, local, tuple(gemms), padded_from, fused_shared)


def _divisors(n: int) -> str:
    ds = [d for d in (1, 2, 4, 8, 16, 32, 64) if n % d == 0]
    return ", ".join(map(str, ds))
