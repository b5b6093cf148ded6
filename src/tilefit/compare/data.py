"""`compare`'s data: TP vs EP (and mixes) for a deployment, predicted per MoE layer and per model,
and measured on local GPUs when asked. The CLI builds a CompareRequest from its flags and prints."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tilefit.compare.layouts import parse_layouts
from tilefit.engines.types import NO_ZERO_ROWS, EpComm
from tilefit.errors import UsageError
from tilefit.launch import LaunchSpec


@dataclass(frozen=True)
class CompareRequest:
    """What compare weighs. `model` and `gpus` may come from `launch` (the engine's launch command);
    `engine`/`engine_version` pick the kernel model (the engine's backend rule; None: Triton tiles)."""

    gpu: str
    batches: tuple[int, ...]
    model: str | None = None
    gpus: int | None = None
    layouts: str | None = None
    interconnect: str | None = None
    ep_comm: str | None = None  # "allreduce" | "alltoall"; None: as the engine resolves it (Engine.ep_comm)
    engine: str | None = None
    engine_version: str | None = None
    launch: LaunchSpec | None = None
    measure: bool = False
    reps: int = 20
    measure_backend: str = "triton"


def compare_data(req: CompareRequest) -> dict[str, Any]:
    """TP vs EP (and mixes) for one deployment: per batch and layout, the predicted MoE-layer time on
    the busiest GPU, the winner among the layouts whose expert weights fit, and measurements if asked."""
    from tilefit.hw.catalog import get_gpu
    from tilefit.layout import Layout, plan_layer
    from tilefit.models import load_model
    from tilefit.perf.interconnect import default_interconnect, get_interconnect
    from tilefit.perf.moe_layer import Assumptions, compute_dtype, layer_time

    spec = req.launch
    if not (req.model or spec):
        raise UsageError("give --model (a preset, config.json or Hugging Face id) or a launch command after `--`")
    model, gpu = load_model(req.model or spec.model), get_gpu(req.gpu)  # type: ignore[union-attr]
    gpus = req.gpus or (spec.layout.gpus if spec else None)
    if gpus is None:
        raise UsageError("give --gpus N (the GPUs the MoE layers span) or a launch command after `--`")
    link = get_interconnect(req.interconnect) if req.interconnect else default_interconnect(gpu)
    layouts = parse_layouts(req.layouts, gpus)
    if spec and not req.layouts and (spec.layout.tp, spec.layout.ep) not in layouts \
            and spec.layout.gpus == gpus:
        layouts.insert(0, (spec.layout.tp, spec.layout.ep))  # the command's own layout first
    flags = spec.flags() if spec and spec.argv else None  # None: the engine's defaults
    engine_name, engine, choice = _engine_choice(req, spec, model, gpu, layouts, flags)
    kernel, kernel_note = _kernel_model(req, engine_name, choice, model, gpu)
    comm = _ep_comm(req, spec, engine, gpus, flags)
    req = replace(req, ep_comm=comm.mode)
    zero = (engine.ep_zero_rows(model, choice.engine_backend, version=req.engine_version, flags=flags)
            if engine is not None and not isinstance(choice, UsageError) else NO_ZERO_ROWS)
    assumptions = Assumptions(ep_comm=comm.mode, ep_comm_why=comm.why, kernel=kernel,
                              zero_gemms=zero.gemms, zero_why=zero.why)
    plans = []
    for tp, ep in layouts:
        try:
            plans.append(plan_layer(model, Layout(tp=tp, ep=ep), _fused(req, spec, model, gpu, tp, ep)))
        except UsageError as e:
            name = "x".join(f"{k.upper()}{v}" for k, v in (("tp", tp), ("ep", ep)) if v > 1) or "TP1"
            raise UsageError(f"layout {name} for {gpus} GPUs: {e}; "
                             f"pass --layouts with layouts that fit the model") from None
    measured = _measure(model, plans, req, zero.gemms) if req.measure else {}
    rows = []
    shares = [p.memory_share(gpu.memory_bytes) for p in plans]
    for b in req.batches:
        times = [layer_time(p, gpu, b, link, assumptions) for p in plans]
        # Only a layout whose expert weights fit in GPU memory can win.
        fitting = [t for share, t in zip(shares, times) if share <= 1]
        best = min(fitting, key=lambda t: t.total_us) if fitting else None
        batch_rows = []
        for p, t, share in zip(plans, times, shares):
            row = {**t.as_dict(), "model_ms": t.total_us * model.moe_layers / 1e3, "winner": t is best,
                   "slowdown_vs_winner": t.total_us / best.total_us if best else None,
                   "weights_memory_share": share}
            m = measured.get((p.layout.label(), b))
            if m is not None:
                row["measured"] = _measured_fields(m, t, p.layout, req.ep_comm)
            batch_rows.append(row)
        _measured_winner(batch_rows)
        rows += batch_rows
    return {
        "model": model.name, "gpu": gpu.key, "gpu_name": gpu.name, "gpus": gpus,
        "kernel": {"family": kernel.family, "token_tiles": list(kernel.token_tiles), "tile_n": kernel.tile_n,
                   "mma_efficiency": kernel.mma_efficiency, "why": kernel_note},
        "launch": spec.as_dict() if spec else None,
        "weight_dtype": model.weight_dtype, "compute_dtype": compute_dtype(gpu, model.weight_dtype),
        "moe_layers": model.moe_layers,
        "interconnect": {"key": link.key, "description": link.description, "bandwidth_gbps": link.bandwidth_gbps,
                         "latency_us": link.latency_us, "source": link.source},
        "assumptions": assumptions.lines() + [kernel_note],
        "source": "predicted and measured" if measured else "predicted (no measurement)",
        "rows": rows,
    }


def _fused(req: CompareRequest, spec: Any, model: Any, gpu: Any, tp: int, ep: int) -> int:
    """Shared experts the engine runs inside its fused MoE under this layout (none without one)."""
    from tilefit.engines import get_engine
    from tilefit.engines.registry import shared_fusion_of
    from tilefit.layout import Layout

    engine_name = spec.engine if spec else req.engine
    if not engine_name:
        return 0
    return shared_fusion_of(get_engine(engine_name), model, Layout(tp=tp, ep=ep), gpu.arch,
                            version=req.engine_version, flags=spec.flags() if spec else None).experts


def _ep_comm(req: CompareRequest, spec: LaunchSpec | None, engine: Any, gpus: int,
             flags: dict[str, str] | None) -> EpComm:
    """How EP layouts move tokens: --ep-comm as given; else as the engine resolves it from the
    launch command's flags and environment (its data-parallel ranks among them) or its defaults;
    else replicated tokens and an all-reduce, said so."""
    if req.ep_comm:
        return EpComm(req.ep_comm, f"--ep-comm {req.ep_comm}")
    if engine is None:
        return EpComm("allreduce", "no --engine or launch command says otherwise (--ep-comm alltoall "
                                   "for dispatch)")
    from tilefit.layout import Layout

    # the engine's answer for an EP layout over these GPUs, with the command's attention ranks
    lay = Layout(tp=1, ep=max(gpus, 2), dp=spec.layout.dp if spec else 1)
    return engine.ep_comm(lay, version=req.engine_version, flags=flags,
                          environ=spec.environ if spec else None)


def _engine_choice(req: CompareRequest, spec: Any, model: Any, gpu: Any, layouts: list[tuple[int, int]],
                   flags: dict[str, str] | None) -> tuple[str | None, Any, Any]:
    """(engine name, engine, the MoE backend its rules pick for this model on this GPU under the
    first layout, as check reads it, or the UsageError saying why none); (None, None, None)
    without --engine or a launch command."""
    from tilefit.engines import get_engine
    from tilefit.layout import Layout

    engine_name = spec.engine if spec else req.engine
    if not engine_name:
        return None, None, None
    engine = get_engine(engine_name)
    tp, ep = layouts[0]
    try:
        return engine_name, engine, engine.backend(
            model.weight_dtype, gpu.arch, layout=Layout(tp=tp, ep=ep), version=req.engine_version,
            environ=spec.environ if spec else {}, flags=flags, architecture=model.hf_architecture)
    except UsageError as e:
        return engine_name, engine, e


def _kernel_model(req: CompareRequest, engine_name: str | None, choice: Any, model: Any, gpu: Any
                  ) -> tuple[Any, str]:
    """The kernel the engine runs for this model on this GPU (`choice`, _engine_choice's):
    FlashInfer's CUTLASS MoE -> the token tiles of the catalogued tactics that launch on this arch
    (swap-AB tactics put tokens along N, so small batches get N-sized tiles); Triton otherwise."""
    from tilefit.engines.pins import flashinfer_pin
    from tilefit.kernels.registry import get_family
    from tilefit.perf.moe_layer import TRITON_MOE, KernelModel

    if not engine_name:
        return TRITON_MOE, "Triton fused-MoE tiles: no --engine or launch command, so the engine's kernel choice is not applied"
    if isinstance(choice, UsageError):
        return TRITON_MOE, f"Triton fused-MoE tiles assumed: {choice}"
    if choice.family != "flashinfer-cutlass":
        return TRITON_MOE, f"{engine_name} runs {choice.engine_backend} (Triton fused-MoE): {choice.rule}"
    family = get_family("flashinfer-cutlass")
    flashinfer = flashinfer_pin(engine_name, req.engine_version)
    if choice.family_dtype not in family.dtypes(gpu.arch):
        return TRITON_MOE, (f"{engine_name} runs {choice.engine_backend}, whose {choice.family_dtype} tactics on "
                            f"{gpu.arch.name} tilefit has not catalogued: Triton tiles assumed")
    tactics = [t for t in family.configs(gpu.arch, choice.family_dtype, flashinfer=flashinfer)
               if family.verdict(t, gpu.arch, choice.family_dtype, flashinfer=flashinfer).fits]
    token = sorted({t.tile[1] if t.swap_ab else t.tile[0] for t in tactics})
    cols = sorted({t.tile[0] if t.swap_ab else t.tile[1] for t in tactics})
    tile_n = 128 if 128 in cols else cols[len(cols) // 2]
    kernel = KernelModel("flashinfer-cutlass", tuple(token), tile_n, 0.75,
                         f"the {len(tactics)} FlashInfer {flashinfer or 'latest catalogued'} tactics that launch "
                         f"on {gpu.arch.name}; efficiency assumed as for Triton, not measured")
    return kernel, (f"{engine_name} runs {choice.engine_backend} (FlashInfer's CUTLASS MoE) for "
                    f"{model.weight_dtype} on {gpu.arch.name}, so its CUTLASS tiles are modelled: {choice.rule}")


def _measured_fields(m: Any, t: Any, layout: Any, ep_comm: str) -> dict[str, Any]:
    """A measurement next to its prediction; the errors are predicted / measured - 1."""
    comm = m.comm_us(ep_comm if layout.ep > 1 else "allreduce")
    total = m.gemm_us + (comm or 0.0) if comm is not None or layout.gpus == 1 else None
    return {"gemm_us": m.gemm_us, "layer_us": m.layer_us, "comm_us": comm, "total_us": total,
            "allreduce_us": m.allreduce_us, "alltoall_us": m.alltoall_us, "ranks": m.ranks,
            "gemm_error": t.gemm_us / m.gemm_us - 1,
            "comm_error": t.comm_us / comm - 1 if comm else None,
            "total_error": t.total_us / total - 1 if total else None}


def _measured_winner(rows: list[dict[str, Any]]) -> None:
    """Mark the measured winner of one batch size, when every layout has a measured total."""
    totals = [(r.get("measured") or {}).get("total_us") for r in rows]
    if len(rows) < 2 or any(v is None for v in totals):
        return
    fastest = min(range(len(rows)), key=lambda i: totals[i])
    for i, r in enumerate(rows):
        r["measured"]["winner"] = i == fastest


def _measure(model: Any, plans: list, req: CompareRequest, zero_gemms: tuple[str, ...]) -> dict:
    """Measured rows per (layout, batch); `zero_gemms`: the GEMMs whose other-rank rows the engine
    zero-fills under EP with replicated tokens (timed too, as the prediction counts them)."""
    from tilefit.perf.measure import MeasureSpec, measure

    available = _local_gpus() if req.measure_backend == "triton" else 64
    out = {}
    for p in plans:
        lay = p.layout
        spec = MeasureSpec(hidden=model.hidden_size, width=model.expert_width, experts=model.num_experts,
                           top_k=model.top_k, tp=lay.tp, ep=lay.ep, batches=tuple(req.batches),
                           reps=req.reps, backend=req.measure_backend,
                           zero_rows=zero_gemms if lay.ep > 1 and req.ep_comm == "allreduce" else ())
        ranks = lay.gpus if available >= lay.gpus else 1
        for row in measure(spec, ranks=ranks):
            out[(lay.label(), row.batch)] = row
    return out


def _local_gpus() -> int:
    try:
        import torch
    except ImportError:
        from tilefit.errors import MissingDependency

        raise MissingDependency("--measure needs torch and a CUDA GPU: pip install 'tilefit[gpu]'") from None
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n == 0:
        raise UsageError("--measure needs a local CUDA GPU; none found (drop --measure for the prediction)")
    return n
