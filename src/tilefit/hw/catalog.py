"""Typed views of archs.toml and gpus.toml, with name lookup and local-GPU detection.

Data flows one way: the TOML files are read once (cached), turned into frozen `Arch` and `GPU`
values, and looked up by canonical key, alias or the name the driver reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from tilefit._toml import load_package_toml
from tilefit.errors import UsageError, unknown_name


@dataclass(frozen=True, slots=True)
class Arch:
    """Limits of one compute capability. Shared memory in bytes."""

    name: str  # "sm120"
    cc: tuple[int, int]
    family: str
    smem_per_sm: int
    smem_per_block_optin: int  # what a kernel may request with cudaFuncSetAttribute
    regs_per_sm: int
    max_threads_per_sm: int
    smem_alloc_unit: int
    sources: tuple[str, ...] = field(compare=False)

    @property
    def cc_int(self) -> int:
        """Compute capability as Triton's GPUTarget wants it: 12.0 -> 120."""
        return self.cc[0] * 10 + self.cc[1]

    def fits(self, smem_bytes: int) -> bool:
        """A block needing `smem_bytes` of shared memory can launch (<= the opt-in limit)."""
        return smem_bytes <= self.smem_per_block_optin


@dataclass(frozen=True, slots=True)
class GPU:
    """One GPU model. Bandwidth in GB/s, peaks in dense TFLOP/s per dtype."""

    key: str  # "rtx-pro-6000"
    name: str  # the name the driver reports
    aliases: tuple[str, ...]
    arch: Arch
    sm_count: int
    memory_gb: float
    mem_bandwidth_gbps: float
    tflops: tuple[tuple[str, float], ...]
    nvlink_gbps: float  # per direction; 0 when the part has no NVLink
    pcie_gen: int
    sources: tuple[tuple[str, str], ...] = field(compare=False)
    memory_mib: int = 0  # total memory as the driver reports it (nvidia-smi memory.total); 0: unknown

    @property
    def memory_bytes(self) -> int:
        """Device memory in bytes as the driver reports it (what engines size their pools from).

        A '32 GB' RTX 5090 reports 32,607 MiB and a '141 GB' H200 143,771 MiB: the vendor's GB is
        neither exact GB nor GiB, so the driver's figure is kept; without one, the vendor's
        figure is read as decimal GB.
        """
        return self.memory_mib * 2**20 if self.memory_mib else int(self.memory_gb * 10**9)

    def as_dict(self) -> dict[str, object]:
        """The GPU as output (JSON and reports): every command writes it through here."""
        return {"key": self.key, "name": self.name, "arch": self.arch.name, "sm_count": self.sm_count,
                "memory_gb": self.memory_gb, "smem_limit_bytes": self.arch.smem_per_block_optin}

    def peak_tflops(self, dtype: str) -> float | None:
        """Dense tensor-core peak for `dtype`, or None where the part has no such path."""
        return dict(self.tflops).get(dtype)


def _norm(name: str) -> str:
    """Lower-case, spaces/underscores to single spaces: driver names and CLI names compare equal."""
    return re.sub(r"[\s_]+", " ", name.strip().lower())


@lru_cache(maxsize=1)
def _arch_table() -> tuple[dict[str, Arch], dict[str, str]]:
    raw = load_package_toml("tilefit.hw", "archs.toml")
    sources: dict[str, str] = raw["sources"]
    archs = {}
    for name, a in raw["arch"].items():
        archs[name] = Arch(
            name=name,
            cc=(int(a["cc"][0]), int(a["cc"][1])),
            family=a["family"],
            smem_per_sm=int(a["smem_per_sm"]),
            smem_per_block_optin=int(a["smem_per_block_optin"]),
            regs_per_sm=int(a["regs_per_sm"]),
            max_threads_per_sm=int(a["max_threads_per_sm"]),
            smem_alloc_unit=int(a["smem_alloc_unit"]),
            sources=tuple(sources[s] for s in a["source"]),
        )
    return archs, sources


def _gpu_from(key: str, g: dict[str, Any], sources: dict[str, str]) -> GPU:
    archs, _ = _arch_table()
    src = g["source"]
    return GPU(
        key=key,
        name=g["name"],
        aliases=tuple(g.get("aliases", ())),
        arch=archs[g["arch"]],
        sm_count=int(g["sm_count"]),
        memory_gb=float(g["memory_gb"]),
        mem_bandwidth_gbps=float(g["mem_bandwidth_gbps"]),
        tflops=tuple(sorted((k, float(v)) for k, v in g["tflops"].items())),
        nvlink_gbps=float(g["interconnect"]["nvlink_gbps"]),
        pcie_gen=int(g["interconnect"]["pcie_gen"]),
        sources=tuple(sorted((fig, sources[s]) for fig, s in src.items())),
        memory_mib=int(g.get("memory_mib", 0)),
    )


@lru_cache(maxsize=1)
def _gpu_table() -> tuple[dict[str, GPU], dict[str, str]]:
    raw = load_package_toml("tilefit.hw", "gpus.toml")
    gpus = {key: _gpu_from(key, g, raw["sources"]) for key, g in raw["gpu"].items()}
    index: dict[str, str] = {}
    for key, gpu in gpus.items():
        for spelling in (key, gpu.name, *gpu.aliases):
            index[_norm(spelling)] = key
    return gpus, index


def all_archs() -> list[Arch]:
    return sorted(_arch_table()[0].values(), key=lambda a: a.cc)


def all_gpus() -> list[GPU]:
    return sorted(_gpu_table()[0].values(), key=lambda g: (g.arch.cc, g.key))


_ARCH_RE = re.compile(r"^(?:sm_?|compute_?)?(\d{2,3})a?$")


def get_arch(name: str) -> Arch:
    """Look up an arch by 'sm120', 'sm_120a', '120', '12.0'."""
    archs, _ = _arch_table()
    s = name.strip().lower()
    if re.fullmatch(r"\d+\.\d", s):
        s = s.replace(".", "")
    m = _ARCH_RE.match(s)
    if m and f"sm{m.group(1)}" in archs:
        return archs[f"sm{m.group(1)}"]
    raise unknown_name("arch", name, archs, "tilefit gpus")


def arch_for_cc(major: int, minor: int) -> Arch | None:
    for arch in _arch_table()[0].values():
        if arch.cc == (major, minor):
            return arch
    return None


def get_gpu(name: str) -> GPU:
    """Look up a GPU by key, alias or driver name; driver names with extra suffixes match by prefix."""
    gpus, index = _gpu_table()
    n = _norm(name)
    if n in index:
        return gpus[index[n]]
    # No prefix matching: "NVIDIA H100 PCIe" or "NVIDIA H200 NVL" are other products (SM count,
    # bandwidth) than the SXM entries whose names they start with. Driver names are aliases.
    raise unknown_name("GPU", name, gpus, "tilefit gpus")


def detect_local_gpu() -> GPU | None:
    """The catalog entry for GPU 0 of this machine, via NVML (or torch if already imported), else None.

    Never imports torch itself: loading torch costs seconds and `plan` must stay fast.
    """
    name = _nvml_name()
    if name is None:
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            name = torch.cuda.get_device_name(0)
    if name is None:
        return None
    try:
        return get_gpu(name)
    except UsageError:
        return None


def _nvml_name() -> str | None:
    try:
        import pynvml  # nvidia-ml-py, in the [gpu] extra
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() == 0:
                return None
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            return name.decode() if isinstance(name, bytes) else str(name)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no device: treat as no local GPU
        return None


def resolve_target(gpu: str | None = None, arch: str | None = None, *, required: bool = True,
                   detect_local: bool = True) -> tuple[GPU | None, Arch | None]:
    """The (GPU, Arch) a command works against: --gpu, else --arch, else (with `detect_local`)
    the local GPU. With `required`, no target at all is a usage error naming both flags.
    """
    if gpu and arch:
        g = get_gpu(gpu)
        a = get_arch(arch)
        if g.arch != a:
            raise UsageError(f"--gpu {gpu} is {g.arch.name}, not {a.name}; give one of --gpu or --arch")
        return g, a
    if gpu:
        g = get_gpu(gpu)
        return g, g.arch
    if arch:
        return None, get_arch(arch)
    local = detect_local_gpu() if detect_local else None
    if local is not None:
        return local, local.arch
    if required:
        raise UsageError("no GPU given and none found on this machine; pass --gpu NAME or --arch smXX "
                         "(see `tilefit gpus`)")
    return None, None
