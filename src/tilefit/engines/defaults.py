"""The Triton fused-MoE config vLLM and SGLang launch when no tuned config file matches.

Each engine's `get_default_config` was read in several published wheels; the branches below
reproduce what each version range returns (CUDA only, not ROCm, not batch-invariant/
deterministic modes). Keys the engine leaves out fall back to Triton's launch defaults
(num_warps=4, num_stages=3: triton/backends/nvidia/compiler.py CUDAOptions, triton 3.6.0).
M is the number of tokens in the batch, E the local experts, N the per-rank width I/tp.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tilefit.engines.types import NEWEST, Source, check_arch, check_engine, engine_dtype, parse_version
from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch

KEYS: tuple[str, ...] = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M",
                         "num_warps", "num_stages")
TRITON_LAUNCH_DEFAULTS = {"num_warps": 4, "num_stages": 3}
_TRITON_DEFAULTS_SRC = Source("triton-lang/triton", "python/triton/backends/nvidia/compiler.py "
                              "(CUDAOptions num_warps=4, num_stages=3)", "3.6.0 (installed wheel)")
# SGLang switches its per-tensor fp8 default when the device's opt-in shared memory per block
# is below this (fused_moe_triton_config.py _LOW_SMEM_FP8_DEFAULT_CUTOFF_BYTES = 128 * 1024).
SGLANG_LOW_SMEM_CUTOFF = 128 * 1024

_VLLM_PATH = "vllm/model_executor/layers/fused_moe/fused_moe.py (get_default_config)"
_SGL_OLD = ("python/sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py "
            "(get_default_config)")
_SGL_NEW = ("python/sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py "
            "(get_default_config)")
SRC = {
    "vllm-legacy": Source("vllm-project/vllm", _VLLM_PATH, "0.11.0 and 0.16.0 wheels",
                          "same branches since 2025; no num_warps/num_stages except block fp8"),
    "vllm-0.17": Source("vllm-project/vllm", _VLLM_PATH, "0.17.0 and 0.21.0 wheels; 0.22.0-0.24.0 "
                        "keep it (absent in 0.16.0)",
                        "PR #34846 batch-aware defaults, merged 2026-02-18"),
    "vllm-0.25": Source("vllm-project/vllm", _VLLM_PATH, "0.25.0, 0.29.0, 0.31.0, 0.33.0 wheels "
                        "(absent in 0.24.0)", "block fp8: BLOCK_SIZE_N 64 and 4 stages at M <= 8"),
    "sglang-legacy": Source("sgl-project/sglang", _SGL_OLD, "0.5.10 wheel; commits 083d601, "
                            "c050f40", "fp8 per-tensor 128x256x128 / 8 warps / 4 stages"),
    "sglang-0.5.15": Source("sgl-project/sglang", _SGL_NEW, "0.5.15-0.5.23 wheels (absent in "
                            "0.5.10)", "low-smem fp8 default below 128 KiB opt-in smem"),
}


@dataclass(frozen=True, slots=True)
class DefaultConfig:
    """An engine's default config for one batch size: all six keys, which ones the engine set
    itself (the rest are Triton's launch defaults), the branch taken and its source."""

    engine: str
    version_range: str
    config: dict[str, int] = field(hash=False)
    from_engine: tuple[str, ...]
    branch: str
    sources: tuple[Source, ...] = field(compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "version_range": self.version_range,
                "config": dict(self.config), "from_engine": list(self.from_engine),
                "branch": self.branch, "sources": [str(s) for s in self.sources]}

    def as_moe_config(self) -> Any:
        """The triton-moe family's config value (imports the family lazily)."""
        return to_moe_config(self.config)


def to_moe_config(d: dict[str, int]) -> Any:
    """{BLOCK_SIZE_M, ...} -> tilefit.kernels.triton_moe.config.MoEConfig."""
    from tilefit.kernels.triton_moe.config import MoEConfig

    return MoEConfig.from_dict(d)


def _vllm(M: int, E: int, dtype: str | None, bs: tuple[int, int] | None, v: tuple[int, ...]
          ) -> tuple[dict[str, int], str, str]:
    if v < (0, 17):
        if dtype == "fp8_w8a8" and bs:
            return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": bs[0], "BLOCK_SIZE_K": bs[1],
                     "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3},
                    "block fp8", "vllm-legacy")
        if M <= E:
            return ({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64,
                     "GROUP_SIZE_M": 1}, "M <= E", "vllm-legacy")
        return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                "M > E", "vllm-legacy")
    if dtype == "fp8_w8a8" and bs:
        block_n, stages, key = bs[0], 3, "vllm-0.17"
        if v >= (0, 25):
            key = "vllm-0.25"
            if M <= 8 and bs[0] % 64 == 0:
                block_n, stages = 64, (4 if M <= 4 else 3)
        return ({"BLOCK_SIZE_M": 16 if M <= 64 else 64, "BLOCK_SIZE_N": block_n,
                 "BLOCK_SIZE_K": bs[1], "GROUP_SIZE_M": 1 if M <= 16 else 32,
                 "num_warps": 4, "num_stages": stages}, "block fp8", key)
    block_m = 16 if M <= 32 else 32 if M <= 96 else 64 if M <= 512 else 128
    cfg = {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": 64 if M <= 64 else 128,
           "BLOCK_SIZE_K": 128 if dtype == "fp8_w8a8" or M <= 64 else 64,
           "GROUP_SIZE_M": 16 if M // max(E, 1) > 128 else 1,
           "num_warps": 4 if M <= 128 else 8, "num_stages": 4 if M <= 32 else 3}
    return cfg, "bf16/fp16 or per-tensor fp8 (batch-aware)", (
        "vllm-0.25" if v >= (0, 25) else "vllm-0.17")


def _sglang(M: int, E: int, dtype: str | None, bs: tuple[int, int] | None, v: tuple[int, ...],
            arch: Arch) -> tuple[dict[str, int], str, str]:
    key = "sglang-0.5.15" if v >= (0, 5, 15) else "sglang-legacy"
    if dtype == "fp8_w8a8" and bs:
        return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": bs[0], "BLOCK_SIZE_K": bs[1],
                 "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}, "block fp8", key)
    if dtype == "fp8_w8a8":
        if key == "sglang-0.5.15" and arch.smem_per_block_optin < SGLANG_LOW_SMEM_CUTOFF:
            if M > E:
                return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 256,
                         "GROUP_SIZE_M": 64, "num_warps": 4, "num_stages": 2},
                        "per-tensor fp8, low-smem device, M > E", key)
            return ({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 256,
                     "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4},
                    "per-tensor fp8, low-smem device, M <= E", key)
        if M <= E:
            return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128,
                     "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4},
                    "per-tensor fp8, M <= E", key)
        return ({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128,
                 "GROUP_SIZE_M": 32, "num_warps": 8, "num_stages": 4},
                "per-tensor fp8, M > E", key)
    if M <= E:
        return ({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1},
                "M <= E", key)
    return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
            "M > E", key)


def engine_default_config(engine: str, *, M: int, E: int, weight_dtype: str,
                          arch: Arch | str, engine_version: str | None = None) -> DefaultConfig:
    """What `engine`'s get_default_config returns for batch `M` with `E` local experts.

    `engine_version` None means the newest version read (vllm 0.33.0, sglang 0.5.23). N, K
    and top-k do not enter any branch of the versions read, so they are not parameters.
    """
    engine = check_engine(engine)
    if engine == "trtllm":
        raise UsageError("TensorRT-LLM has no Triton fused-MoE default config; its MoE runs "
                         "CUTLASS tactics chosen by its autotuner")
    if M < 1 or E < 1:
        raise UsageError(f"batch M and experts E must be >= 1, got M={M}, E={E}")
    a = check_arch(arch)
    dtype, bs = engine_dtype(weight_dtype)
    v = parse_version(engine_version or NEWEST[engine])
    if engine == "vllm":
        raw, branch, key = _vllm(M, E, dtype, bs, v)
    else:
        raw, branch, key = _sglang(M, E, dtype, bs, v, a)
    from_engine = tuple(k for k in KEYS if k in raw)
    config = {k: int(raw[k]) if k in raw else TRITON_LAUNCH_DEFAULTS[k] for k in KEYS}
    sources = (SRC[key],) if len(from_engine) == len(KEYS) else (SRC[key], _TRITON_DEFAULTS_SRC)
    return DefaultConfig(engine=engine, version_range=_RANGES[key], config=config,
                         from_engine=from_engine, branch=branch, sources=sources)


_RANGES = {"vllm-legacy": "vllm < 0.17.0", "vllm-0.17": "vllm >= 0.17.0, < 0.25.0",
           "vllm-0.25": "vllm >= 0.25.0", "sglang-legacy": "sglang < 0.5.15",
           "sglang-0.5.15": "sglang >= 0.5.15"}


def engine_default_configs(engine: str, batches: Iterable[int], *, E: int, weight_dtype: str,
                           arch: Arch | str, engine_version: str | None = None
                           ) -> dict[int, DefaultConfig]:
    """engine_default_config for each batch size, keyed by batch."""
    return {int(m): engine_default_config(engine, M=int(m), E=E, weight_dtype=weight_dtype,
                                          arch=arch, engine_version=engine_version)
            for m in batches}
