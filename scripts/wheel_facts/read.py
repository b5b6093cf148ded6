"""Small helpers the readers share: read a file of an extracted wheel, find text in it."""

from __future__ import annotations

import re
from pathlib import Path

ABSENT = "absent"


def text(root: Path, *candidates: str) -> str:
    """The first of `candidates` (paths relative to the extracted wheel) that exists, or ''."""
    for rel in candidates:
        p = root / rel
        if p.is_file():
            return p.read_text(errors="replace")
    return ""


def grep_tree(root: Path, sub: str, needle: str, suffix: str = ".py") -> list[Path]:
    """Files under root/sub whose text contains `needle` (plain substring)."""
    base = root / sub
    if not base.is_dir():
        return []
    return [p for p in sorted(base.rglob("*" + suffix)) if needle in p.read_text(errors="replace")]


def block_after(source: str, start: str, length: int = 1500) -> str:
    """`length` characters of `source` from the first `start` (or '' when absent)."""
    i = source.find(start)
    return source[i:i + length] if i >= 0 else ""


def env_default(source: str, name: str) -> str | None:
    """The default of an environment switch declared as `NAME = EnvBool(True)` (sglang's
    environ.py) or `os.getenv("NAME", "0")` (vLLM's envs.py); None when the name is absent."""
    m = re.search(rf"\b{name}\s*(?::\s*\w+\s*)?=\s*Env\w+\(\s*([^)]*)\)", source)
    if m:
        return m.group(1).strip().strip("\"'") or "None"
    m = re.search(rf"getenv\(\s*[\"']{name}[\"']\s*,\s*([^)]*)\)", source)
    if m:
        return m.group(1).strip().strip("\"'")
    return None if name not in source else "declared"


def block_fp8_tiles(kernel: str, clamped: bool) -> str:
    """How a fused-MoE Triton kernel (its source `kernel`) runs tiles under 128x128 block scales:
    the weight scale indexed per column (`offs_bn // group_n`) and the K scale once per step
    (`k_start // group_k`) run BLOCK_SIZE_N 32/64 and BLOCK_SIZE_K 64 as tilefit's kernel does;
    a 256-wide K step either is clamped to the block (`clamped`) or reads one group's scales."""
    if "offs_ks = k_start // group_k" not in kernel or "offs_bn // group_n" not in kernel:
        return ABSENT
    wide = "runs as 128" if clamped else "one scale per step (wrong)"
    return f"BLOCK_SIZE_N 32/64, BLOCK_SIZE_K 64: as tuned; BLOCK_SIZE_K 256: {wide}"


def swap_ab(source: str, fn: str, arch_check: str) -> str:
    """The fp8 swap-AB condition of a fused-MoE launcher, if `fn` in `source` reads as
    `<arch_check> and BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64`."""
    body = block_after(source, f"def {fn}(", 400)
    if arch_check in body and "BLOCK_SIZE_M < 64" in body and "BLOCK_SIZE_N >= 64" in body:
        return "sm90, BLOCK_SIZE_M < 64, BLOCK_SIZE_N >= 64"
    return ABSENT
