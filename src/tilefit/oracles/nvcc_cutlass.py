"""nvcc + CUTLASS headers as ground truth for FlashInfer's CUTLASS MoE shared memory.

Flow: tactics -> one host-only C++ program per arch (cutlass_probe.cu.in, the launcher's exact kernel
types) -> nvcc -> run -> JSON lines (stages, epilogue/mainloop/kernel struct sizes). Headers come from
the installed `flashinfer-python` wheel (its pinned CUTLASS and TensorRT-LLM's cutlass_extensions), found
at run time; results are cached on disk by a hash of the program, the compiler and the headers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from tilefit._io import write_text_atomic
from tilefit.errors import MissingDependency, UsageError
from tilefit.settings import settings

INSTALL_HINT = ("install the headers outside your project: `python3 -m venv /tmp/cutlass-venv && "
                "/tmp/cutlass-venv/bin/pip install --no-deps flashinfer-python nvidia-cutlass`, then "
                "point TILEFIT_FLASHINFER_DATA at its site-packages/flashinfer/data")
EXTENSIONS = "csrc/nv_internal/tensorrt_llm/cutlass_extensions/include"

# arch -> (cutlass ArchTag, probe Kind, nvcc -arch)
ARCHS = {
    "sm90": ("cutlass::arch::Sm90", "tf::kSm90", "sm_90a"),
    "sm100": ("cutlass::arch::Sm100", "tf::kSm100", "sm_100a"),
    "sm103": ("cutlass::arch::Sm100", "tf::kSm100", "sm_100a"),
    "sm103-native": ("cutlass::arch::Sm103", "tf::kSm103", "sm_103a"),  # SM103 NVFP4's own kernels
    "sm120": ("cutlass::arch::Sm120", "tf::kSm120", "sm_120a"),
    "sm121": ("cutlass::arch::Sm120", "tf::kSm120", "sm_120a"),
}
# dtype -> (activation type, weight type, block scaled, MX scale factors)
DTYPES = {
    "nvfp4": ("cutlass::float_e2m1_t", "cutlass::float_e2m1_t", True, False),
    "mxfp8-mxfp4": ("cutlass::float_e4m3_t", "cutlass::float_e2m1_t", True, True),
    "fp8": ("cutlass::float_e4m3_t", "cutlass::float_e4m3_t", False, False),
    "bf16": ("cutlass::bfloat16_t", "cutlass::bfloat16_t", False, False),
}
OUTPUT_TYPE = "cutlass::bfloat16_t"  # MoE output dtype of the serving engines (bf16)


@dataclass(frozen=True, slots=True)
class Toolchain:
    """Where the compiler and headers are, and what versions they are."""

    nvcc: str
    nvcc_version: str
    data_dir: Path  # flashinfer/data: cutlass/include and csrc/... live here
    cutlass_version: str
    flashinfer_version: str
    fingerprint: str  # sha256 over the headers that decide the sizes (stands in for a commit)

    @property
    def includes(self) -> list[str]:
        return [str(self.data_dir / "cutlass" / "include"), str(self.data_dir / EXTENSIONS)]

    def describe(self) -> str:
        return (f"nvcc {self.nvcc_version} + CUTLASS {self.cutlass_version} "
                f"(FlashInfer {self.flashinfer_version} pin, headers {self.fingerprint[:12]})")


def _flashinfer_data_dir(explicit: str | os.PathLike[str] | None) -> Path:
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    if settings().flashinfer_data is not None:
        candidates.append(settings().flashinfer_data)
    spec = importlib.util.find_spec("flashinfer")  # locates the package without importing it
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "data" for p in spec.submodule_search_locations]
    for c in candidates:
        if (c / "cutlass" / "include" / "cutlass" / "version.h").is_file() and (c / EXTENSIONS).is_dir():
            return c
    where = ", ".join(str(c) for c in candidates) or "nowhere (flashinfer not installed)"
    raise MissingDependency(f"FlashInfer's CUTLASS headers not found (looked in {where}); {INSTALL_HINT}")


def _version_h(data_dir: Path) -> str:
    text = (data_dir / "cutlass" / "include" / "cutlass" / "version.h").read_text()
    parts = [re.search(rf"#define CUTLASS_{k} (\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) if m else "?" for m in parts)


def _flashinfer_version(data_dir: Path) -> str:
    for name in ("_build_meta.py", "version.py"):
        f = data_dir.parent / name
        if f.is_file():
            m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", f.read_text())
            if m:
                return m.group(1)
    return "unknown"


def _fingerprint(data_dir: Path) -> str:
    h = hashlib.sha256()
    roots = [data_dir / "cutlass" / "include" / "cutlass" / d for d in ("gemm", "epilogue", "pipeline")]
    roots.append(data_dir / EXTENSIONS / "cutlass_extensions" / "epilogue")
    for root in roots:
        for f in sorted(root.rglob("*")):
            if f.is_file():
                h.update(str(f.relative_to(data_dir)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


def toolchain(flashinfer_data: str | os.PathLike[str] | None = None) -> Toolchain:
    """Find nvcc and the headers; MissingDependency (exit 2) says how to install what is absent."""
    nvcc = shutil.which("nvcc") or next(
        (str(p) for p in (settings().cuda_home / "bin" / "nvcc",)
         if p.is_file()), None)
    if nvcc is None:
        raise MissingDependency("nvcc not found on PATH or in $CUDA_HOME/bin; install the CUDA "
                                "toolkit (12.8 or later for sm_120a) and put nvcc on PATH")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    data_dir = _flashinfer_data_dir(flashinfer_data)
    return Toolchain(nvcc, m.group(1) if m else "unknown", data_dir, _version_h(data_dir),
                     _flashinfer_version(data_dir), _fingerprint(data_dir))


def probe_line(tactic: Any, label: str) -> str:
    """The C++ statement that reports one tactic's kernel types."""
    if tactic.schedule != "tma-ws":
        raise UsageError(f"the nvcc oracle covers TMA warp-specialized tactics only, not {tactic.label()}")
    arch_tag, kind, _ = ARCHS[build_arch(tactic)]
    act, weight, block_scaled, mx = DTYPES[tactic.dtype]
    m, n, k = tactic.tile
    cm, cn, _ = tactic.cluster
    b = _cpp_bool
    return (f"  tf::report<tf::Tactic<{arch_tag}, {kind}, {act}, {weight}, {OUTPUT_TYPE}, "
            f"{b(block_scaled)}, {b(mx)}, {m}, {n}, {k}, {cm}, {cn}, {b(tactic.fusion == 'finalize')}, "
            f"{b(tactic.swap_ab)}, {b(getattr(tactic, 'epilogue', 'tma') == 'tma')}, "
            f"{b(tactic.dynamic_cluster is not None)}>>(\"{label}\");")


def build_arch(tactic: Any) -> str:
    """The ARCHS key (kernel arch tag and nvcc -arch) of a tactic's kernels."""
    return "sm103-native" if getattr(tactic, "native", False) else tactic.arch


def _cpp_bool(value: bool) -> str:
    return "true" if value else "false"


def _program(lines: list[str]) -> str:
    template = resources.files("tilefit.oracles").joinpath("cutlass_probe.cu.in").read_text()
    return template.replace("@TACTICS@", "\n".join(lines))


def cache_dir() -> Path:
    return settings().cache_dir / "cutlass"


def _compile_and_run(tc: Toolchain, arch: str, lines: list[str], timeout: float) -> list[dict[str, Any]]:
    """One program: compile, run, parse. Cached by program text, nvcc version and header hash."""
    source = _program(lines)
    key = hashlib.sha256("\0".join([source, tc.nvcc_version, tc.fingerprint, ARCHS[arch][2]]).encode())
    cached = cache_dir() / f"{key.hexdigest()[:32]}.json"
    if cached.is_file():
        return json.loads(cached.read_text())["rows"]
    with tempfile.TemporaryDirectory(prefix="tilefit-cutlass-") as tmp:
        src, exe = Path(tmp) / "probe.cu", Path(tmp) / "probe"
        src.write_text(source)
        cmd = [tc.nvcc, "-std=c++17", f"-arch={ARCHS[arch][2]}", "-x", "cu", "-w",
               "--expt-relaxed-constexpr", *(f"-I{i}" for i in tc.includes), "-o", str(exe), str(src)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"nvcc timed out after {timeout:.0f} s") from exc
        if res.returncode != 0:
            errors = [ln for ln in res.stderr.splitlines() if "error" in ln][:3]
            raise RuntimeError("nvcc failed: " + " | ".join(e[:300] for e in errors))
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True)
    rows = [json.loads(ln) for ln in run.stdout.splitlines() if ln.startswith("{")]
    write_text_atomic(cached, json.dumps({"toolchain": tc.describe(), "rows": rows}))
    return rows


def nvcc_job_count(requested: int | None = None) -> int:
    """Parallel nvcc programs: `requested`, else TILEFIT_NVCC_JOBS, else one per core; never more
    than the cores (each nvcc of a CUTLASS kernel holds gigabytes, extra ones only add memory)."""
    cores = os.cpu_count() or 1
    return max(1, min(requested or settings().nvcc_jobs or cores, cores))


def measure(tactics: list[Any], flashinfer_data: str | os.PathLike[str] | None = None, *,
            jobs: int | None = None, timeout: float = 1800.0,
            tc: Toolchain | None = None) -> tuple[Toolchain, dict[Any, dict[str, Any]]]:
    """Compile `tactics` (batched per arch, split over `jobs` programs) and return per-tactic rows.

    A row has stages, epilogue, mainloop and kernel struct sizes, and `shared_storage`; a tactic whose
    batch does not compile is retried alone and, failing again, gets {"error": message}. `tc`: the
    toolchain already found for `flashinfer_data` (found here when not given).
    """
    tc = tc or toolchain(flashinfer_data)
    jobs = nvcc_job_count(jobs)
    unique = list(dict.fromkeys(kernel_identity(t) for t in tactics))
    by_arch: dict[str, list[Any]] = {}
    for t in unique:
        by_arch.setdefault(build_arch(t), []).append(t)
    batches = []
    for arch, ts in by_arch.items():
        size = max(1, -(-len(ts) // max(1, jobs // len(by_arch) or 1)))
        batches += [(arch, ts[i:i + size]) for i in range(0, len(ts), size)]

    def run_batch(batch: tuple[str, list[Any]]) -> dict[Any, dict[str, Any]]:
        arch, ts = batch
        labels = {f"t{i}": t for i, t in enumerate(ts)}
        try:
            rows = _compile_and_run(tc, arch, [probe_line(t, lab) for lab, t in labels.items()], timeout)
            return {labels[r["label"]]: r for r in rows if "label" in r}
        except RuntimeError as exc:
            if len(ts) == 1:
                return {ts[0]: {"error": str(exc)}}
            out: dict[Any, dict[str, Any]] = {}
            for t in ts:
                out.update(run_batch((arch, [t])))
            return out

    results: dict[Any, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=min(jobs, len(batches)) or 1) as pool:
        for part in pool.map(run_batch, batches):
            results.update(part)
    return tc, {t: results[kernel_identity(t)] for t in tactics}


def kernel_identity(t: Any) -> Any:
    """Tactics that instantiate the same kernel types (gemm1 and gemm2 without fusion do; every
    runtime cluster shape is the same DYNAMIC_CGA kernel)."""
    dynamic = None if getattr(t, "dynamic_cluster", None) is None else (1, 1, 1)
    return replace(t, gemm=None, flashinfer=None, tactic_id=None, dynamic_cluster=dynamic)
