"""The fused-MoE kernel's config (the six keys vLLM and SGLang store) and the grids tuners sweep.

A config is a frozen value; `as_dict()` gives exactly the engines' JSON keys. The grid is the one
vLLM's benchmarks/kernels/benchmark_moe.py and SGLang's tuning_fused_moe_triton.py enumerate, for
every dtype. Two fp8 dtypes, as everywhere in tilefit (tilefit/dtypes.py): "fp8" is e4m3 with
per-tensor scales, "fp8-block" is e4m3 with 128x128 block scales. The engines' tuners cut their
fp8-block grid further (vLLM's to N, K multiples of 128, SGLang's to K dividing 128); which of
tilefit's picks each engine's kernel runs as tuned is the engine's rule (tilefit.engines).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from tilefit.errors import UsageError
from tilefit.numeric import shown

# The sweep both engines' tuners run (benchmark_moe.py get_configs_compute_bound, vllm 0.11.0-0.33.0).
GRID: dict[str, tuple[int, ...]] = {
    "BLOCK_SIZE_M": (16, 32, 64, 128, 256),
    "BLOCK_SIZE_N": (32, 64, 128, 256),
    "BLOCK_SIZE_K": (64, 128, 256),
    "GROUP_SIZE_M": (1, 16, 32, 64),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}
KEYS: tuple[str, ...] = tuple(GRID)

# DeepSeek/GLM FP8 checkpoints: weight_block_size [128, 128]; activations quantised per token and
# per group of 128 along K.
FP8_BLOCK = 128

DTYPES = ("bf16", "fp16", "fp8", "fp8-block")
_DTYPE_ALIASES = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16",
                  "half": "fp16", "fp8": "fp8", "fp8-block": "fp8-block"}
# Spellings that name e4m3 without saying how it is scaled: the engines' "fp8_w8a8" is both (their
# file names add block_shape for the block-scaled kernel), so tilefit asks instead of guessing.
_AMBIGUOUS_FP8 = ("fp8_w8a8", "e4m3", "float8_e4m3fn", "fp8e4m3", "fp8_e4m3")


def canonical_dtype(dtype: str) -> str:
    """'bfloat16' -> 'bf16', ...; unknown or ambiguous spellings are a UsageError listing the known ones."""
    key = str(dtype).strip().lower()
    if key in _AMBIGUOUS_FP8:
        raise UsageError(f"dtype {dtype!r} does not say how the fp8 weights are scaled; use fp8 "
                         f"(per-tensor scales) or fp8-block (128x128 block scales)")
    if key not in _DTYPE_ALIASES:
        raise UsageError(f"unknown dtype {dtype!r} for triton-moe; use one of {', '.join(DTYPES)}")
    return _DTYPE_ALIASES[key]


@dataclass(frozen=True, slots=True, order=True)
class MoEConfig:
    """One fused-MoE launch config. Field order matches the CLI spelling BM,BN,BK,GM,warps,stages."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int

    def as_dict(self) -> dict[str, int]:
        """The engines' JSON keys, in their order."""
        return dict(zip(KEYS, self.values()))

    def values(self) -> tuple[int, ...]:
        return (self.block_m, self.block_n, self.block_k, self.group_m, self.num_warps,
                self.num_stages)

    def label(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k} gm{self.group_m} "
                f"w{self.num_warps} s{self.num_stages}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MoEConfig:
        """From the engines' JSON keys (extra keys are ignored, missing ones are an error)."""
        missing = [k for k in KEYS if k not in d]
        if missing:
            raise UsageError(f"triton-moe config lacks {', '.join(missing)}; it needs {', '.join(KEYS)}")
        return cls(*(int(d[k]) for k in KEYS))


def swap_ab_tile(config: MoEConfig) -> bool:
    """The tiles vLLM (>= 0.25) and SGLang compute as B^T A^T for fp8 on sm90: BLOCK_SIZE_M < 64
    and BLOCK_SIZE_N >= 64 (vllm fused_moe/utils.py enable_swap_ab, 0.25.0-0.33.0; sglang
    fused_moe_triton_kernels.py should_enable_swap_ab, 0.5.10-0.5.23)."""
    return config.block_m < 64 and config.block_n >= 64


def scale_aligned_k(block_k: int) -> bool:
    """Whether a BLOCK_SIZE_K steps through K in whole 128-wide scale groups (a multiple of 128:
    one dot per group) or within one group (a divisor of 128), as the block-scaled K loop needs.
    Every power of two is one or the other, so the whole grid passes."""
    return block_k % FP8_BLOCK == 0 or FP8_BLOCK % block_k == 0


def grid_axes(dtype: str) -> dict[str, tuple[int, ...]]:
    """The grid's values per key for `dtype`: the same grid for every dtype. fp8-block included:
    the kernel reads the weight scale per column (any BLOCK_SIZE_N) and the K loop picks the scale
    group from the K offset (any scale-aligned BLOCK_SIZE_K)."""
    canonical_dtype(dtype)
    return dict(GRID)


def in_grid(config: MoEConfig, dtype: str) -> bool:
    """Whether every value of `config` is on `dtype`'s grid."""
    axes = grid_axes(dtype)
    return all(v in axes[key] for key, v in zip(KEYS, config.values()))


def grid_configs(dtype: str, grid: str = "full") -> list[MoEConfig]:
    """The tuners' grid for `dtype` (1920 configs, fp8-block included).

    grid="full" is every config; grid="distinct" keeps GROUP_SIZE_M=1 only, one config per
    distinct shared-memory footprint (GROUP_SIZE_M only reorders blocks; see smem.py).
    """
    axes = grid_axes(dtype)
    if grid == "distinct":
        axes["GROUP_SIZE_M"] = (1,)
    elif grid != "full":
        raise UsageError(f"unknown grid {grid!r} for triton-moe; use 'full' or 'distinct'")
    return [MoEConfig(*vals) for vals in itertools.product(*axes.values())]


def parse_config(text: str, dtype: str = "bf16") -> MoEConfig:
    """'64,128,128,16,4,3' (BM,BN,BK,GM,warps,stages) -> MoEConfig; every value must be in the grid."""
    dtype = canonical_dtype(dtype)
    parts = [p.strip() for p in str(text).replace("x", ",").split(",") if p.strip()]
    if len(parts) != len(KEYS):
        raise UsageError(f"config {shown(str(text))} needs {len(KEYS)} comma-separated integers "
                         f"BM,BN,BK,GM,warps,stages (e.g. 64,128,128,16,4,3)")
    if not all(p.isdecimal() and len(p) <= 6 for p in parts):  # digits counted before int()
        raise UsageError(f"config {shown(str(text))}: every field must be an integer of the grid "
                         f"(BM,BN,BK,GM,warps,stages)")
    vals = [int(p) for p in parts]
    axes = grid_axes(dtype)
    for key, v in zip(KEYS, vals):
        if key != "num_stages" and (v <= 0 or v & (v - 1)):
            raise UsageError(f"config {shown(str(text))}: {key}={v} is not a power of two")
        allowed = axes[key]
        if v not in allowed:
            raise UsageError(f"config {shown(str(text))}: {key}={v} is outside the {dtype} grid "
                             f"({', '.join(map(str, allowed))})")
    return MoEConfig(*vals)
