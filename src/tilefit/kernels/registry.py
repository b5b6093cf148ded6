"""Family name -> the module that implements it, imported only when asked for.

Adding a family: write `tilefit/kernels/<module>/__init__.py` exposing `FAMILY`, add one line here.
"""

from __future__ import annotations

import importlib
from typing import Any

from tilefit.errors import unknown_name

# name -> (module path, one-line description)
FAMILIES: dict[str, tuple[str, str]] = {
    "triton-moe": ("tilefit.kernels.triton_moe", "tilefit's Triton fused-MoE grouped GEMM"),
    "flashinfer-cutlass": ("tilefit.kernels.flashinfer_cutlass",
                           "FlashInfer / TensorRT-LLM CUTLASS MoE grouped GEMM tactics"),
}


def get_family(name: str) -> Any:
    """The `FAMILY` object of a kernel family; unknown names get suggestions."""
    if name not in FAMILIES:
        raise unknown_name("kernel family", name, FAMILIES, "tilefit fit --help")
    return importlib.import_module(FAMILIES[name][0]).FAMILY
