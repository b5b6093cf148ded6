"""What `tilefit tune` follows of the engines whose files it writes: how they run tilefit's kernel
(fp8-block weight scales, the sm90 swap-AB path) and which GEMM they run (SGLang's shared-expert
fusion adds the shared expert to the fused MoE). Each answer is the engines' own (Engine methods,
which name the wheels they were read from)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilefit.engines import get_engine
from tilefit.engines.types import NO_FUSION, SharedFusion
from tilefit.errors import UsageError


def swap_ab(dtype: str, emit: tuple[str, ...], arch: Any, engine_version: str | None) -> bool:
    """Whether tilefit's kernel computes the narrow-row fp8 tiles swapped while tuning: when every
    engine written for does on this arch (vLLM >= 0.25 and SGLang, fp8 on sm90)."""
    return bool(emit) and all(get_engine(e).swap_ab_path(dtype, arch, engine_version) for e in emit)


def block_scales(dtype: str, emit: tuple[str, ...], engine_version: str | None) -> str:
    """How tilefit's kernel applies fp8-block weight scales while tuning: as the engines whose
    files are written do ("row" when all of them apply one per row where a tile's columns share
    it, SGLang's kernel), else per column (vLLM's kernel, and tilefit's own default)."""
    if dtype != "fp8-block" or not emit:
        return "column"
    forms = {get_engine(e).block_scales(engine_version) for e in emit}
    return "row" if forms == {"row"} else "column"


def shared_fusion(engines: tuple[str, ...], model: Any, layout: Any, arch: Any,
                  engine_version: str | None, flags: Mapping[str, str], *,
                  own_kernel: bool) -> SharedFusion:
    """The shared experts the engines written for run inside the fused MoE (the tuned GEMM then
    has them as experts, every token routed to each, and the files are named with that E). The
    engines must agree: with and without the fused expert they are different GEMMs in files of
    different names. `own_kernel`: the run times the engine's own kernel (--target sglang),
    whose inputs tilefit does not build with the shared expert."""
    if not engines:
        return NO_FUSION
    fusions = {e: get_engine(e).shared_fusion(model, layout, arch, "triton", version=engine_version,
                                              flags=flags) for e in engines}
    if len({f.experts for f in fusions.values()}) > 1:
        fused = [e for e, f in fusions.items() if f.experts]
        plain = [e for e, f in fusions.items() if not f.experts]
        local = model.num_experts // layout.ep
        extra = max(f.experts for f in fusions.values())
        raise UsageError(f"{' and '.join(fused)} {'run' if len(fused) > 1 else 'runs'} {model.name}'s "
                         f"shared expert inside the fused MoE (E={local + extra}), {' and '.join(plain)} "
                         f"{'do' if len(plain) > 1 else 'does'} not (E={local}): different GEMMs in "
                         f"differently named files; tune them in two runs (--emit {','.join(fused)}, "
                         f"then --emit {','.join(plain)})")
    fusion = next(iter(fusions.values()))
    if fusion.experts and own_kernel:
        raise UsageError(f"{fusion.why}; tuning the engine's own kernel with the shared expert is not "
                         f"supported: use --target tilefit --emit {engines[0]}, which times that GEMM")
    return fusion

