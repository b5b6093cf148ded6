"""TensorRT-LLM as tilefit models it: its CUTLASS MoE backend (the grouped-GEMM kernels FlashInfer's
CUTLASS MoE vendors), the backend rules and remedies (data/*.toml rows with engine = "trtllm"), and
its finalize-fusion option. It has no Triton fused-MoE config files: its autotuner picks CUTLASS
tactics at warmup. Read from create_moe.py at commit 9c6caaa and the MoeConfig docs 1.3.0rc27/1.4.0rc4.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from tilefit.engines.table import TableEngine
from tilefit.engines.triton_moe import DefaultConfig
from tilefit.engines.types import ConfigLookup, FinalizeState
from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch

# The LLM API option (YAML) that turns the FC2 + finalize fusion off, as `settings` spells it.
DISABLE_FINALIZE = "moe_config.disable_finalize_fusion"
_TRUE = ("1", "true", "yes", "on")
_NO_TRITON = ("TensorRT-LLM has no Triton fused-MoE config files; its CUTLASS MoE picks tactics "
              "with its autotuner")


class Trtllm(TableEngine):
    name, title, newest, tuned_config_env = "trtllm", "TensorRT-LLM", "1.4.0rc4", None
    # trtllm-serve answers through uvicorn; a C++ exception that escapes aborts the process.
    ready_lines = ("Application startup complete.",)
    fatal_lines = ("terminate called after throwing an instance of",)
    select = {"flashinfer-cutlass": ("CUTLASS", "moe_config: {backend: CUTLASS} in the LLM API options")}
    forced_sources = {"flashinfer-cutlass": ("trtllm_create_moe", "trtllm_moeconfig")}

    def forced_family(self, family: str, dtype: str, arch: Arch) -> tuple[str, tuple[str, ...]]:
        if family == "triton-moe":
            raise UsageError("TensorRT-LLM has no vLLM-style Triton fused-MoE (its TRITON MoE "
                             "backend is the triton_kernels MXFP4 path); use --backend "
                             "flashinfer-cutlass or auto")
        return TableEngine.forced_family(self, family, dtype, arch)

    def default_configs(self, batches: Iterable[int], *, E: int, weight_dtype: str,
                        arch: Arch | str, version: str | None = None) -> dict[int, DefaultConfig]:
        raise UsageError("TensorRT-LLM has no Triton fused-MoE default config; its MoE runs "
                         "CUTLASS tactics chosen by its autotuner")

    def find_tuned_config(self, *, E: int, N: int, device_name: str, weight_dtype: str,
                          triton_version: str | None = None,
                          config_dir: str | os.PathLike[str] | None = None,
                          environ: Mapping[str, str] | None = None, version: str | None = None,
                          down: bool = False) -> ConfigLookup:
        raise UsageError(_NO_TRITON)

    def write_tuned_configs(self, out_dir: str | os.PathLike[str], *, E: int, N: int,
                            device_name: str, weight_dtype: str, gemm1: Mapping[int, Mapping[str, int]],
                            gemm2: Mapping[int, Mapping[str, int]] | None,
                            triton_version: str | None) -> list[Path]:
        raise UsageError(_NO_TRITON)

    def fused_finalize(self, *, version: str | None = None, environ: Mapping[str, str] | None = None,
                       settings: Mapping[str, str] | None = None) -> FinalizeState:
        """On unless the LLM API options set moe_config.disable_finalize_fusion."""
        value = (settings or {}).get(DISABLE_FINALIZE, "false")
        on = value.strip().lower() not in _TRUE
        return FinalizeState(self.name, on, f"MoeConfig.disable_finalize_fusion is {str(not on).lower()}",
                             (self.facts.sources["trtllm_moeconfig"],))


ENGINE = Trtllm()
