"""The figures the tuner's performance model needs for the local GPU (SM count, memory bandwidth,
peak TFLOP/s, arch): the catalog entry when the driver's name is in tilefit's catalog; otherwise
SM count and compute capability read from the device, and bandwidth and peak given by flags or
estimated, each estimate named (`DeviceFigures.notes`) so the run's output can say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilefit.dtypes import mma_dtype
from tilefit.errors import UsageError
from tilefit.hw.catalog import GPU, Arch, all_gpus, arch_for_cc, get_gpu

BANDWIDTH_FLAG = "--mem-bandwidth"
PEAK_FLAG = "--peak-tflops"


@dataclass(frozen=True, slots=True)
class DeviceFigures:
    """The GPU the perf model uses, and how each figure not from the catalog was obtained."""

    gpu: GPU
    from_catalog: bool
    notes: tuple[tuple[str, str], ...] = ()  # (figure, how it was obtained)

    @property
    def estimated(self) -> tuple[str, ...]:
        return tuple(fig for fig, how in self.notes if how.startswith("estimated"))

    def lines(self) -> list[str]:
        """Human lines for the run's output; none for a catalog GPU."""
        if self.from_catalog:
            return []
        g = self.gpu
        out = [f"{g.name} is not in tilefit's catalog: the performance model uses {g.arch.name}, "
               f"{g.sm_count} SMs, {g.mem_bandwidth_gbps:,.0f} GB/s, "
               + ", ".join(f"{d} {t:,.0f} TFLOP/s" for d, t in g.tflops)]
        out += [f"  {fig}: {how}" for fig, how in self.notes]
        if self.estimated:
            out.append(f"  estimated figures only rank first trials and set the '% of floor' "
                       f"column; pass {BANDWIDTH_FLAG} GB/s and {PEAK_FLAG} TFLOP/s for real ones")
        return out

    def as_dict(self) -> dict[str, Any]:
        g = self.gpu
        return {"name": g.name, "from_catalog": self.from_catalog, "arch": g.arch.name,
                "sm_count": g.sm_count, "mem_bandwidth_gbps": g.mem_bandwidth_gbps,
                "peak_tflops": dict(g.tflops), "estimated": list(self.estimated),
                "notes": dict(self.notes)}


def device_properties(index: int) -> Any:
    """torch's properties of CUDA device `index` (name, major, minor, multi_processor_count, ...)."""
    import torch

    return torch.cuda.get_device_properties(index)


def resolve_device(device_name: str, dtype: str, index: int = 0, *,
                   bandwidth_gbps: float | None = None,
                   peak_tflops: float | None = None) -> DeviceFigures:
    """The perf-model figures for the GPU the driver calls `device_name` (device `index`);
    peaks are keyed by `dtype`'s tensor-core path (fp8-block: the catalog's fp8)."""
    dtype = mma_dtype(dtype)
    try:
        gpu = get_gpu(device_name)
    except UsageError:
        return _from_device(device_name, dtype, index, bandwidth_gbps, peak_tflops)
    notes = []
    if bandwidth_gbps is not None:
        notes.append(("memory bandwidth", f"given by {BANDWIDTH_FLAG}"))
    if peak_tflops is not None:
        notes.append((f"{dtype} peak", f"given by {PEAK_FLAG}"))
    if notes:
        gpu = _with(gpu, gpu.arch, gpu.sm_count, gpu.memory_gb,
                    gpu.mem_bandwidth_gbps if bandwidth_gbps is None else bandwidth_gbps,
                    gpu.tflops if peak_tflops is None else ((dtype, peak_tflops),), notes)
    return DeviceFigures(gpu, True, tuple(notes))


def _from_device(name: str, dtype: str, index: int, bandwidth_gbps: float | None,
                 peak_tflops: float | None) -> DeviceFigures:
    try:
        props = device_properties(index)
    except Exception as e:  # noqa: BLE001 - no torch, no CUDA build, no driver: one line
        raise UsageError(f"{name!r} is not in tilefit's catalog (`tilefit gpus`) and its properties "
                         f"cannot be read through torch ({type(e).__name__}: {e})") from None
    major, minor = int(props.major), int(props.minor)
    arch = arch_for_cc(major, minor)
    if arch is None:
        raise UsageError(f"{name!r} has compute capability {major}.{minor}, for which tilefit has "
                         f"no shared-memory limits; `tilefit gpus` lists the supported archs")
    sms = int(props.multi_processor_count)
    notes = [("arch", f"from the device (compute capability {major}.{minor})"),
             ("SM count", "from the device")]
    ref = _reference(arch, sms)
    if bandwidth_gbps is not None:
        notes.append(("memory bandwidth", f"given by {BANDWIDTH_FLAG}"))
    else:
        bandwidth_gbps, how = _bandwidth_estimate(props, ref, arch)
        notes.append(("memory bandwidth", how))
    if peak_tflops is not None:
        tflops: tuple[tuple[str, float], ...] = ((dtype, float(peak_tflops)),)
        notes.append((f"{dtype} peak", f"given by {PEAK_FLAG}"))
    elif ref is not None and (ref.peak_tflops(dtype) or ref.peak_tflops("bf16")):
        tflops = tuple((d, t * sms / ref.sm_count) for d, t in ref.tflops)
        how = (f"estimated: {ref.name}'s peaks (same arch {arch.name}) scaled by SM count "
               f"{sms}/{ref.sm_count}; clocks not counted")
        notes.append(("peak TFLOP/s", how))
    else:
        raise UsageError(f"{name!r} is not in tilefit's catalog and no catalogued {arch.name} GPU "
                         f"gives a {dtype} peak to scale from; pass {PEAK_FLAG} with its dense "
                         f"{dtype} tensor-core TFLOP/s")
    memory_gb = int(getattr(props, "total_memory", 0)) / 2**30
    gpu = _with(None, arch, sms, memory_gb, float(bandwidth_gbps), tflops, notes, name=name)
    return DeviceFigures(gpu, False, tuple(notes))


def _reference(arch: Arch, sms: int) -> GPU | None:
    """The catalogued GPU of the same arch with the nearest SM count."""
    same = [g for g in all_gpus() if g.arch.name == arch.name]
    return min(same, key=lambda g: (abs(g.sm_count - sms), g.key)) if same else None


def _bandwidth_estimate(props: Any, ref: GPU | None, arch: Arch) -> tuple[float, str]:
    """DRAM bandwidth from the memory clock (kHz) and bus width (bits) the device reports, as
    double data rate (the CUDA samples' figure); else the nearest same-arch catalog GPU's."""
    clock_khz = getattr(props, "memory_clock_rate", None)
    bus_bits = getattr(props, "memory_bus_width", None)
    if clock_khz and bus_bits:
        gbps = 2.0 * float(clock_khz) * 1e3 * float(bus_bits) / 8 / 1e9
        return gbps, (f"estimated: 2 x memory clock {float(clock_khz) / 1e3:,.0f} MHz x bus "
                      f"{int(bus_bits)} bit, as the device reports them")
    if ref is not None:
        return ref.mem_bandwidth_gbps, (f"estimated: {ref.name}'s (same arch {arch.name}, nearest "
                                        f"SM count); this torch reports no memory clock")
    raise UsageError(f"the device reports no memory clock and no catalogued {arch.name} GPU is "
                     f"near it; pass {BANDWIDTH_FLAG} with its memory bandwidth in GB/s")


def _with(base: GPU | None, arch: Arch, sms: int, memory_gb: float, bandwidth: float,
          tflops: tuple[tuple[str, float], ...], notes: list[tuple[str, str]],
          name: str = "") -> GPU:
    """A GPU value for the perf model: `base` with some figures replaced, or a new one."""
    sources = tuple(sorted({**dict(base.sources if base else ()), **dict(notes)}.items()))
    return GPU(key=base.key if base else f"local:{name}", name=base.name if base else name,
               aliases=base.aliases if base else (), arch=arch, sm_count=sms,
               memory_gb=memory_gb, mem_bandwidth_gbps=bandwidth,
               tflops=tuple(sorted(tflops)), nvlink_gbps=base.nvlink_gbps if base else 0.0,
               pcie_gen=base.pcie_gen if base else 0, sources=sources)


def local_gpus() -> tuple[list[int], str | None]:
    """(indices, driver name of the first) of the NVIDIA GPUs this process may use, via NVML
    (which sees every GPU, so CUDA_VISIBLE_DEVICES narrows its list), else torch."""
    import os

    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    try:
        if any(not v.isdigit() for v in visible):
            raise ValueError("GPU UUIDs in CUDA_VISIBLE_DEVICES: let torch resolve them")
        import pynvml

        pynvml.nvmlInit()
        try:
            n = pynvml.nvmlDeviceGetCount()
            if "CUDA_VISIBLE_DEVICES" in os.environ:
                physical = [int(v) for v in visible if v.isdigit() and int(v) < n]
            else:
                physical = list(range(n))
            if not physical:
                return [], None
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(physical[0]))
            return list(range(len(physical))), (name.decode() if isinstance(name, bytes) else name)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no nvml module, no driver: ask torch
        pass
    try:
        import torch
    except ImportError:
        return [], None
    if not torch.cuda.is_available():
        return [], None
    n = torch.cuda.device_count()
    return list(range(n)), torch.cuda.get_device_name(0) if n else None
