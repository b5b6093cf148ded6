"""What the serving engines (sglang, vLLM, TensorRT-LLM) do with MoE kernels, as typed data.

One module per engine (sglang.py, vllm.py, trtllm.py) behind the protocol in base.py, found by
name with `get_engine`; their data-backed facts in data/*.toml (table.py reads them); what vLLM
and SGLang share about their Triton fused-MoE kernel in triton_moe.py. Nothing here imports
torch, triton or an engine.
"""

from tilefit.engines.base import Engine
from tilefit.engines.registry import engine_names, get_engine
from tilefit.engines.triton_moe import DefaultConfig
from tilefit.engines.types import (
    BackendChoice, ConfigLookup, Fatality, FinalizeState, Remedy, Source, VersionRange)

__all__ = [
    "BackendChoice", "ConfigLookup", "DefaultConfig", "Engine", "Fatality", "FinalizeState",
    "Remedy", "Source", "VersionRange", "engine_names", "get_engine",
]
