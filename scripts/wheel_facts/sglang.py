"""Facts read from an extracted sglang wheel (python/sglang/srt/...), one value per fact name.

Each value is a short normalised string so the table can compare it with what tilefit's data
files say for the same version.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from wheel_facts.pins import pin
from wheel_facts.read import ABSENT, block_fp8_tiles, env_default, grep_tree, swap_ab, text

SRT = "sglang/srt/"
FF_ENV = "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"
CONFIG_MODULE = "fused_moe_triton_config.py"
CONFIG_ROOTS = {"layers/moe/fused_moe_triton": "fused_moe_triton",
                "layers/moe/moe_runner/triton_utils": "moe_runner/triton_utils"}


def facts(root: Path) -> dict[str, str]:
    return {
        "sglang: NVFP4 MoE on SM120, --moe-runner-backend auto": _sm120_nvfp4(root),
        "sglang: fused-finalize switch default": _fused_finalize(root),
        "sglang: tuned-config package folder": _config_root(root),
        "sglang: Triton-version folder fallback": _fallback(root),
        "sglang: SGLANG_MOE_CONFIG_DIR read": _config_env(root),
        "sglang: tuned-file folder under the config dir": _config_layout(root),
        "sglang: ready line": _has(root, "The server is fired up and ready to roll!"),
        "sglang: init progress line": _init_line(root),
        "sglang: decode CUDA-graph capture line": _capture_line(root),
        "sglang: --disable-flashinfer-autotune": _has(root, "disable_flashinfer_autotune",
                                                       "present"),
        "sglang: pinned flashinfer-python": pin(root) or ABSENT,
        "sglang: block-fp8 tiles of the Triton fused-MoE kernel": _block_fp8(root),
        "sglang: fp8 swap-AB path of the Triton fused-MoE kernel": swap_ab(
            text(root, *_KERNEL), "should_enable_swap_ab", "is_sm90_supported()"),
    }


def _sources(root: Path) -> str:
    """server_args.py plus the arg_groups/ modules that took its post-init rules over (0.5.15+)."""
    out = [text(root, SRT + "server_args.py")]
    groups = root / SRT / "arg_groups"
    if groups.is_dir():
        out += [p.read_text(errors="replace") for p in sorted(groups.glob("*.py"))]
    return "\n".join(out)


def _sm120_nvfp4(root: Path) -> str:
    src = _sources(root)
    for m in re.finditer(r'moe_runner_backend\s*=\s*"flashinfer_cutlass"', src):
        head = src[max(0, m.start() - 400):m.start()]
        if "modelopt_fp4" in head and re.search(r"sm120|is_sm120", head) and '== "auto"' in head:
            return "flashinfer_cutlass when --quantization modelopt_fp4 is given"
    return ABSENT


def _fused_finalize(root: Path) -> str:
    default = env_default(text(root, SRT + "environ.py"), FF_ENV)
    if default is None:
        return "no switch (FlashInfer default: on)"
    return {"True": "on", "False": "off"}.get(default, default)


def _config_root(root: Path) -> str:
    found = [name for rel, name in CONFIG_ROOTS.items() if (root / SRT / rel / CONFIG_MODULE).is_file()]
    return ", ".join(found) or ABSENT


def _config_source(root: Path) -> str:
    return text(root, *(SRT + rel + "/" + CONFIG_MODULE for rel in CONFIG_ROOTS))


def _fallback(root: Path) -> str:
    src = _config_source(root)
    m = re.search(r"supported_triton_versions\s*=\s*\[([^\]]*)\]", src)
    if m:
        return "fixed list " + ",".join(re.findall(r"[\d.]+", m.group(1)))
    if "os.listdir(configs_root)" in src:
        return "triton_* folders on disk, newest first"
    return ABSENT


def _config_env(root: Path) -> str:
    src = _config_source(root)
    return "replaces the package folder" if '"SGLANG_MOE_CONFIG_DIR", os.path.dirname' in src \
        else ("read" if "SGLANG_MOE_CONFIG_DIR" in src else ABSENT)


def _config_layout(root: Path) -> str:
    """Where get_moe_configs opens a tuned file, below $SGLANG_MOE_CONFIG_DIR (or the package)."""
    src = _config_source(root)
    if re.search(r'os\.path\.join\(\s*config_dir,\s*"configs",\s*version_dir', src):
        return "<dir>/configs/triton_X_Y_Z/"
    return ABSENT


@lru_cache(maxsize=4)
def _runtime(root: Path) -> str:
    """Every module under srt/model_executor and srt/entrypoints (log lines move between files)."""
    return "\n".join(p.read_text(errors="replace") for sub in ("model_executor", "entrypoints", "distributed",
                      "managers", "utils") for p in sorted((root / SRT / sub).rglob("*.py")))


def _has(root: Path, needle: str, value: str | None = None) -> str:
    return (value or needle) if needle in _runtime(root) or needle in _sources(root) else ABSENT


def _init_line(root: Path) -> str:
    src = _runtime(root)
    for line in ("Init parallel begin.", "Init torch distributed begin."):
        if line in src:
            return line
    return ABSENT


def _capture_line(root: Path) -> str:
    src = _runtime(root)
    if re.search(r'f"Capture \{capture_name\} \{graph_backend\[', src) and \
            'capture_name = f"{role} decode"' in src:
        return "Capture {role} decode CUDA graph begin."
    if re.search(r'f"Capture \{graph_backend\[self\.device\]\} begin\.', src):
        return "Capture cuda graph begin."
    return ABSENT


# Where fused_moe_kernel lives: 0.5.16-0.5.23, 0.5.11-0.5.15, 0.5.10, and 0.4.x.
_KERNEL = ("sglang/kernels/ops/moe/fused_moe_triton_kernels.py",
           SRT + "layers/moe/moe_runner/triton_utils/fused_moe_triton_kernels.py",
           SRT + "layers/moe/fused_moe_triton/fused_moe_triton_kernels.py",
           SRT + "layers/moe/fused_moe_triton/fused_moe.py")


def _block_fp8(root: Path) -> str:
    """fused_moe_kernel's scale indexing; a BLOCK_SIZE_K clamp anywhere in the package."""
    return block_fp8_tiles(text(root, *_KERNEL), bool(grep_tree(root, "sglang", "BLOCK_SIZE_K = min(")))
