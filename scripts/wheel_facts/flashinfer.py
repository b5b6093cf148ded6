"""Facts read from an extracted flashinfer-python wheel: its autotuner (Python) and the
TensorRT-LLM MoE sources it ships under flashinfer/data/csrc."""

from __future__ import annotations

import re
from pathlib import Path

from wheel_facts.read import ABSENT, text

CSRC = "flashinfer/data/csrc/"
TRTLLM = CSRC + "nv_internal/tensorrt_llm/kernels/cutlass_kernels/"
BINDING = CSRC + "fused_moe/cutlass_backend/flashinfer_cutlass_fused_moe_binding.cu"


def facts(root: Path) -> dict[str, str]:
    tuner = _autotuner(root)
    return {
        "flashinfer: FLASHINFER_TACTICS_BLOCKLIST": (
            "read" if "FLASHINFER_TACTICS_BLOCKLIST" in tuner else ABSENT),
        "flashinfer: gemm2 list follows use_fused_finalize": _finalize_switch(root),
        "flashinfer: FINALIZE tactics on": _finalize_archs(root),
        "flashinfer: gemm2 list order": _order(root),
        "flashinfer: 'Skipped N unsupported tactic(s)' line": (
            "Skipped N unsupported tactic(s)" if "unsupported tactic(s)" in tuner else ABSENT),
    }


def _autotuner(root: Path) -> str:
    return text(root, "flashinfer/autotuner/autotuner.py", "flashinfer/autotuner.py")


def _finalize_switch(root: Path) -> str:
    """Whether the op passes the caller's use_fused_finalize to the runner before it lists the
    tactics (then FINALIZE copies are left out when it is off); before that they are always listed."""
    src = text(root, BINDING)
    if not src:
        return "no switch (FINALIZE copies always listed)"
    set_at = src.find("use_fused_finalize_ = mUseFusedFinalize")
    listed_at = src.find("getTactics(kernels::MoeGemmId::GEMM_2)")
    if set_at >= 0 and 0 <= listed_at and set_at < listed_at:
        return "yes (off: FINALIZE copies left out)"
    return "no switch (FINALIZE copies always listed)"


def _finalize_archs(root: Path) -> str:
    src = text(root, TRTLLM + "include/moe_kernels.h")
    m = re.search(r"bool mayHaveFinalizeFused\(\) const \{(.*?)\}", src, re.S)
    if not m:
        return ABSENT
    body = m.group(1)
    if "getSM() == 90" in body:
        return "SM90 only"
    if "getSM() >= 90" in body:
        return "SM90 and later"
    return "other: " + " ".join(body.split())[:60]


def _order(root: Path) -> str:
    """How getTmaWarpSpecializedConfigs grows gemm2's list: FINALIZE copies of the base tiles and
    swap-AB copies of everything, in the order the source appends them."""
    src = text(root, TRTLLM + "moe_gemm/moe_gemm_template_dispatch.h")
    fin = src.find("EpilogueFusionType::FINALIZE;")
    swap = src.find("swap_ab = true")
    parts = sorted((i, name) for i, name in ((fin, "FINALIZE copies"), (swap, "swap-AB copies"))
                   if i >= 0)
    return ", ".join(["base"] + [name for _, name in parts])
