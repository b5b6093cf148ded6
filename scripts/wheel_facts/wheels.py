"""Wheels -> a cache of the few source files the fact readers read, one folder per version.

A vLLM wheel is a few hundred MB of compiled kernels; the readers need its Python sources only, so
each wheel is opened as a zip, the wanted members are written under CACHE/<package>/<version>/ and
the wheel may then be deleted. `download` uses pip's ordinary `pip download --no-deps`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGES = ("sglang", "vllm", "flashinfer-python")
_WHEEL_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[0-9][^-]*)-.*\.whl$")
# FlashInfer's C++ sources that hold the MoE tactic lists (the rest of csrc is not read).
_FI_CSRC = re.compile(r"(cutlass_heuristic\.cpp|moe_gemm_template_dispatch[^/]*\.h|"
                      r"cutlass_fused_moe_kernels\.cuh|moe_kernels\.h|flashinfer_cutlass_fused_moe[^/]*\.cu)$")


def package_of(wheel: Path) -> tuple[str, str]:
    """'vllm-0.9.0-cp38-abi3-....whl' -> ('vllm', '0.9.0')."""
    m = _WHEEL_RE.match(wheel.name)
    if not m:
        raise ValueError(f"not a wheel file name: {wheel.name}")
    name = m["name"].lower().replace("_", "-")
    return name, m["version"]


def _wanted(package: str, member: str) -> bool:
    if member.endswith("/"):
        return False
    if member.endswith(".dist-info/METADATA"):  # Requires-Dist: the FlashInfer an engine pins
        return True
    if package == "flashinfer-python":
        return (member.startswith("flashinfer/") and member.endswith(".py")
                and "/data/" not in member) or bool(_FI_CSRC.search(member))
    top = package.split("-")[0] + "/"
    return member.startswith(top) and member.endswith(".py")


def extract(wheel: Path, cache: Path) -> Path:
    """Write the wanted members of `wheel` under cache/<package>/<version>/; return that folder."""
    package, version = package_of(wheel)
    dest = cache / package / version
    done = dest / ".complete"
    if done.exists():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".x-"))
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            if _wanted(package, member):
                target = tmp / member
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(member))
    (tmp / ".complete").write_text(wheel.name + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(dest)  # atomic within one file system: a half-extracted folder is never seen
    return dest


def download(package: str, version: str, cache: Path, keep_wheel: bool = False) -> Path | None:
    """pip download --no-deps package==version, extract, delete the wheel. None if not on the index."""
    dest = cache / package / version
    if (dest / ".complete").exists():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        run = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                              "--only-binary", ":all:", f"{package}=={version}", "-d", tmp],
                             capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if run.returncode != 0 or not wheels:
            return None
        out = extract(wheels[0], cache)
        if keep_wheel:
            shutil.copy2(wheels[0], cache / wheels[0].name)
        return out


def versions_cached(cache: Path, package: str) -> list[str]:
    root = cache / package
    if not root.is_dir():
        return []
    return sorted((d.name for d in root.iterdir() if (d / ".complete").exists()), key=version_key)


def version_key(v: str) -> tuple:
    """'0.5.10.post1' -> a key that sorts releases in order (0.5.9 < 0.5.10 < 0.5.10.post1)."""
    parts = re.findall(r"\d+|[a-z]+", v)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)
