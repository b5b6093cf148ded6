"""Element widths of the weight/activation dtypes tilefit names, in one table.

"fp8" is e4m3 with per-tensor scales and "fp8-block" is e4m3 with 128x128 block scales; both
store one byte per element (the scales live outside the tiles). nvfp4 and mxfp4 pack two
elements per byte. Kernel families and the tuner's perf model read their widths from here.
"""

from __future__ import annotations

BITS: dict[str, int] = {"bf16": 16, "fp16": 16, "fp8": 8, "fp8-block": 8, "nvfp4": 4, "mxfp4": 4}


def elem_bytes(dtypes: tuple[str, ...]) -> dict[str, int]:
    """Bytes per element for each of `dtypes` (all whole-byte dtypes of BITS)."""
    return {d: BITS[d] // 8 for d in dtypes}
