"""Facts read from an extracted vLLM wheel (vllm/...), one normalised value per fact name."""

from __future__ import annotations

import re
from pathlib import Path

from wheel_facts.pins import pin
from wheel_facts.read import ABSENT, block_after, block_fp8_tiles, grep_tree, swap_ab, text

MOE = "vllm/model_executor/layers/fused_moe/"


def facts(root: Path) -> dict[str, str]:
    envs = text(root, "vllm/envs.py")
    return {
        "vllm: bf16 MoE on SM120, auto": _bf16(root),
        "vllm: NVFP4 MoE on SM120, auto": _nvfp4(root),
        "vllm: VLLM_TUNED_CONFIG_FOLDER": "present" if "VLLM_TUNED_CONFIG_FOLDER" in envs else ABSENT,
        "vllm: VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS": (
            "present" if "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS" in envs else ABSENT),
        "vllm: --moe-backend": _moe_backend_flag(root),
        "vllm: fused finalize passed to FlashInfer": _finalize(root),
        "vllm: pinned flashinfer-python": pin(root) or ABSENT,
        "vllm: triton_version key of a tuned file": _version_key(root),
        "vllm: block-fp8 tiles of the Triton fused-MoE kernel": _block_fp8(root),
        "vllm: fp8 swap-AB path of the Triton fused-MoE kernel": swap_ab(
            text(root, MOE + "utils.py"), "enable_swap_ab", "is_device_capability(90)"),
        "vllm: default-config warning": (
            "present" if grep_tree(root, MOE, "Using default MoE config. Performance might be "
                                             "sub-optimal") else ABSENT),
    }


def _priority(src: str, first: str, second: str) -> bool | None:
    """In the first `AVAILABLE_BACKENDS = [...]` (or `_AVAILABLE_BACKENDS`) list of `src`,
    whether backend `first` comes before `second`; None when there is no such list."""
    lists = [re.findall(r"\.(\w+)", m.group(1))
             for m in re.finditer(r"AVAILABLE_BACKENDS\s*=\s*\[(.*?)\]", src, re.S)]
    if not lists:
        return None
    items = next((x for x in lists if first in x), None)  # the CUDA list, not ROCm's or XPU's
    if items is None:
        return False
    return second not in items or items.index(first) < items.index(second)


def _bf16(root: Path) -> str:
    oracle = text(root, MOE + "oracle/unquantized.py")
    if oracle and _priority(oracle, "FLASHINFER_CUTLASS", "TRITON"):
        dp = "dp_size > 1" in oracle
        return "FLASHINFER_CUTLASS" + (" (TRITON with dp > 1)" if dp else "")
    gated = oracle or text(root, MOE + "layer.py", MOE + "unquantized_fused_moe_method.py")
    if "envs.VLLM_USE_FLASHINFER_MOE_FP16" in gated or grep_tree(
            root, MOE, "envs.VLLM_USE_FLASHINFER_MOE_FP16"):
        return "TRITON unless VLLM_USE_FLASHINFER_MOE_FP16=1 with EP"
    return "TRITON"


def _nvfp4(root: Path) -> str:
    oracle = text(root, MOE + "oracle/nvfp4.py")
    if oracle and _priority(oracle, "FLASHINFER_CUTLASS", "VLLM_CUTLASS"):
        # The TRTLLM and CuteDSL entries ahead of it are SM100-family only.
        return "FLASHINFER_CUTLASS"
    if oracle or grep_tree(root, "vllm/model_executor/layers/quantization/",
                           "VLLM_USE_FLASHINFER_MOE_FP4"):
        return "VLLM_CUTLASS unless VLLM_USE_FLASHINFER_MOE_FP4=1"
    return "VLLM_CUTLASS"


def _moe_backend_flag(root: Path) -> str:
    src = text(root, "vllm/engine/arg_utils.py")
    return "present" if re.search(r"moe_backend\b", src) and "--moe-backend" in src or \
        re.search(r"\bmoe_backend:\s", src) else ABSENT


def _finalize(root: Path) -> str:
    src = text(root, MOE + "experts/flashinfer_cutlass_moe.py", MOE + "flashinfer_cutlass_moe.py")
    if not src:
        return ABSENT
    return "passed" if "use_fused_finalize" in src else "not passed (FlashInfer default: on)"


def _version_key(root: Path) -> str:
    """get_moe_configs on a tuned file's "triton_version" key: popped, or int() like a batch key."""
    src = block_after(text(root, MOE + "fused_moe.py"), "def get_moe_configs", 4000)
    if 'pop("triton_version"' in src:
        return "popped"
    return "int() like a batch key (a file carrying it fails)" if "int(key)" in src else ABSENT


_CLAMP = re.compile(r"BLOCK_SIZE_K\s*=\s*min\(\s*BLOCK_SIZE_K\s*,\s*min\(\s*block_shape\[0\]\s*,"
                    r"\s*block_shape\[1\]\s*\)\s*\)")


def _block_fp8(root: Path) -> str:
    """fused_moe_kernel's scale indexing, and invoke_fused_moe_kernel's BLOCK_SIZE_K clamp."""
    src = text(root, MOE + "fused_moe.py")
    return block_fp8_tiles(src, bool(_CLAMP.search(src)))
