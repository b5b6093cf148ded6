"""Engine name -> the module that models it, imported only when asked for.

Adding an engine: write `tilefit/engines/<module>.py` exposing `ENGINE` (an object that answers
engines.base.Engine, usually a TableEngine subclass), put its facts in engines/data/ (rows with
engine = "<name>"), and add one line here. An unknown name is an error listing the known ones:
no engine ever borrows another's behaviour.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from tilefit.engines.base import Engine
from tilefit.engines.types import NO_FUSION, SharedFusion
from tilefit.errors import UsageError

# name -> module path
ENGINES: dict[str, str] = {
    "sglang": "tilefit.engines.sglang",
    "vllm": "tilefit.engines.vllm",
    "trtllm": "tilefit.engines.trtllm",
}
# Other spellings people use for the same engine.
ALIASES = {"tensorrt-llm": "trtllm", "trt-llm": "trtllm", "tensorrt_llm": "trtllm"}


def engine_names() -> tuple[str, ...]:
    return tuple(ENGINES)


def get_engine(name: str) -> Engine:
    """The engine called `name` (case and the usual TensorRT-LLM spellings tolerated)."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in ENGINES:
        raise UsageError(f"unknown engine {name!r}; use one of {', '.join(ENGINES)}")
    engine = importlib.import_module(ENGINES[key]).ENGINE
    assert isinstance(engine, Engine), f"{ENGINES[key]}.ENGINE does not answer the Engine protocol"
    return engine


def with_a2a(flags: Mapping[str, str] | None, a2a: str | None) -> dict[str, str] | None:
    """The launch flags with tilefit's own --a2a-backend as sglang's --moe-a2a-backend where the
    flags name none; None when neither says anything (the engine's defaults)."""
    if a2a and a2a != "none":
        return {"moe_a2a_backend": a2a, **dict(flags or {})}
    return dict(flags) if flags is not None else None


def shared_fusion_of(engine: Engine, model: Any, layout: Any, arch: Any, *, version: str | None = None,
                     flags: Mapping[str, str] | None = None, a2a: str | None = None,
                     runner: str | None = None) -> SharedFusion:
    """The shared experts `engine` runs inside its fused MoE for this deployment, with `runner`
    (the MoE backend, BackendChoice.engine_backend) or else the one its own backend rules pick; a
    combination those rules do not model fuses nothing (engines/sglang_shared.py). `a2a`: the
    all-to-all backend where the launch flags do not name it."""
    given = with_a2a(flags, a2a) or {}
    if runner is None:
        try:
            runner = engine.backend(model.weight_dtype, arch, layout=layout, version=version,
                                    flags=dict(flags) if flags else None,
                                    architecture=model.hf_architecture).engine_backend
        except UsageError:
            return NO_FUSION
    return engine.shared_fusion(model, layout, arch, runner, version=version, flags=given)
