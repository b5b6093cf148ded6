"""Element widths of the weight/activation dtypes tilefit names, in one table.

"fp8" is e4m3 with per-tensor scales and "fp8-block" is e4m3 with 128x128 block scales; both
store one byte per element (the scales live outside the tiles). nvfp4 and mxfp4 pack two
elements per byte. Kernel families and the tuner's perf model read their widths from here.
"""

from __future__ import annotations

BITS: dict[str, int] = {"bf16": 16, "fp16": 16, "fp8": 8, "fp8-block": 8, "nvfp4": 4, "mxfp4": 4}
# The tensor-core path of a whole-byte dtype, as the GPU catalog keys its peak rates: both fp8s are
# e4m3 dots (the scales are applied outside the MMA).
_MMA: dict[str, str] = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8-block": "fp8"}


def elem_bytes(dtypes: tuple[str, ...]) -> dict[str, int]:
    """Bytes per element for each of `dtypes` (all whole-byte dtypes of BITS)."""
    return {d: BITS[d] // 8 for d in dtypes}


def mma_dtype(dtype: str) -> str:
    """The catalog's peak-rate key for `dtype`'s tensor-core dots ('fp8-block' -> 'fp8')."""
    return _MMA.get(dtype, dtype)
