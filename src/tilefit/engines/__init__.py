"""What the serving engines (sglang, vLLM, TensorRT-LLM) do with MoE kernels, as typed data.

backends: which kernel family runs; defaults: the Triton config an engine uses when no tuned file
exists; lookup: where an engine finds tuned config files; remedies: what is fatal, and the fixes.
Nothing here imports torch, triton or an engine.
"""

from tilefit.engines.backends import resolve_backend
from tilefit.engines.defaults import (
    DefaultConfig, engine_default_config, engine_default_configs, to_moe_config)
from tilefit.engines.lookup import engine_package_dir, find_tuned_config, installed_triton_version
from tilefit.engines.remedies import fatality, fused_finalize, remedies
from tilefit.engines.types import (
    BackendChoice, ConfigLookup, Fatality, FinalizeState, Remedy, Source, VersionRange)

__all__ = [
    "BackendChoice", "ConfigLookup", "DefaultConfig", "Fatality", "FinalizeState", "Remedy",
    "Source", "VersionRange", "engine_default_config", "engine_default_configs",
    "engine_package_dir", "fatality", "find_tuned_config", "fused_finalize",
    "installed_triton_version", "remedies", "resolve_backend", "to_moe_config",
]
