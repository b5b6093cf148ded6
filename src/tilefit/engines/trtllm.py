"""TensorRT-LLM as tilefit models it: its CUTLASS MoE backend (the grouped-GEMM kernels FlashInfer's
CUTLASS MoE vendors), the backend rules and remedies (data/*.toml rows with engine = "trtllm"), and
its finalize-fusion option. It has no Triton fused-MoE config files: its autotuner picks CUTLASS
tactics at warmup (TableEngine's Triton-file methods say so). Read from create_moe.py at commit
9c6caaa and the MoeConfig docs 1.3.0rc27/1.4.0rc4.
"""

from __future__ import annotations

from collections.abc import Mapping

from tilefit.engines.table import TableEngine
from tilefit.engines.types import FinalizeState
from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch

# The LLM API option (YAML) that turns the FC2 + finalize fusion off, as `settings` spells it.
DISABLE_FINALIZE = "moe_config.disable_finalize_fusion"
_TRUE = ("1", "true", "yes", "on")


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

    def fused_finalize(self, *, version: str | None = None, environ: Mapping[str, str] | None = None,
                       settings: Mapping[str, str] | None = None) -> FinalizeState:
        """On unless the LLM API options set moe_config.disable_finalize_fusion."""
        value = (settings or {}).get(DISABLE_FINALIZE, "false")
        on = value.strip().lower() not in _TRUE
        return FinalizeState(self.name, on, f"MoeConfig.disable_finalize_fusion is {str(not on).lower()}",
                             (self.facts.sources["trtllm_moeconfig"],))


ENGINE = Trtllm()
