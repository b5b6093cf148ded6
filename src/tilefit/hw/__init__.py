"""GPU and architecture catalog: the hardware limits every fit and plan is judged against."""

from tilefit.hw.catalog import GPU, Arch, all_archs, all_gpus, get_arch, get_gpu, resolve_target

__all__ = ["GPU", "Arch", "all_archs", "all_gpus", "get_arch", "get_gpu", "resolve_target"]
