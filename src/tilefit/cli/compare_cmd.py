"""`tilefit compare`: TP vs EP (and mixes) for a deployment, predicted per MoE layer and per model."""

from __future__ import annotations

import argparse
import re
from typing import Any

from tilefit.cli.args import add_json_arg, int_list, positive_int
from tilefit.cli.launch_args import add_launch_args, launch_spec
from tilefit.cli.output import print_json, table
from tilefit.errors import UsageError
from tilefit.numeric import MAX_COUNT, bounded_int

DEFAULT_BATCHES = (1, 16, 64, 256, 1024)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="TP vs EP for a deployment: predicted MoE-layer time per batch",
                       description="Predict one MoE layer's time on the busiest GPU for each layout "
                                   "(grouped GEMMs + communication) and name the winner per batch size.")
    from tilefit.engines import engine_names

    p.add_argument("--model", metavar="M", help="preset, config.json path or Hugging Face id "
                                                   "(default: the launch command's model)")
    p.add_argument("--gpu", required=True, metavar="NAME", help="GPU name (see `tilefit gpus`)")
    p.add_argument("--gpus", type=positive_int,
                   help="GPUs the MoE layers span (default: the launch command's layout)")
    p.add_argument("--engine", choices=engine_names(),
                   help="model the MoE kernel this engine runs (its backend rule: FlashInfer CUTLASS "
                        "tiles or Triton tiles); default: Triton tiles")
    p.add_argument("--engine-version", metavar="V", help="engine version for its backend rule")
    p.add_argument("--layouts", metavar="L,L,...",
                   help="layouts such as tp8,ep8,tp2ep4 (default: tpN,epN for --gpus N)")
    p.add_argument("--batch", type=int_list, default=DEFAULT_BATCHES, metavar="B,B,...",
                   help="tokens entering the MoE layer (default: %(default)s)")
    p.add_argument("--interconnect", metavar="NAME",
                   help="nvlink3|nvlink4|nvlink5|pcie4|pcie5 (default: what the GPU usually has)")
    p.add_argument("--ep-comm", choices=("allreduce", "alltoall"), default="allreduce",
                   help="EP communication: all-reduce with attention TP (default), or all-to-all "
                        "dispatch/combine with attention DP")
    p.add_argument("--measure", action="store_true",
                   help="also measure each layout on the local GPUs (one process per GPU, NCCL); with "
                        "fewer GPUs than a layout needs, the busiest GPU's GEMMs are measured alone")
    p.add_argument("--reps", type=positive_int, default=20, help="timed repetitions per point (--measure)")
    # CPU stand-in for tests: float32 torch reference GEMMs and gloo collectives.
    p.add_argument("--measure-backend", choices=("triton", "torch"), default="triton", help=argparse.SUPPRESS)
    add_json_arg(p)
    add_launch_args(p, layout_flags=False)
    p.set_defaults(func=run)


_LAYOUT_RE = re.compile(r"(?:(?:tp|ep)\d+)+")
_PART_RE = re.compile(r"(tp|ep)(\d+)")


def parse_layouts(text: str | None, gpus: int) -> list[tuple[int, int]]:
    """'tp8,ep8,tp2ep4' -> [(8, 1), (1, 8), (2, 4)], each using exactly `gpus` GPUs."""
    if text is not None and not text.strip():
        raise UsageError("--layouts is empty: write tpN, epN or tpNepM (e.g. tp8,ep8,tp2ep4)")
    if not text:
        return [(gpus, 1), (1, gpus)] if gpus > 1 else [(1, 1)]
    out = []
    for item in (t.strip().lower() for t in text.split(",") if t.strip()):
        parts = dict(_PART_RE.findall(item))
        if not _LAYOUT_RE.fullmatch(item) or len(parts) != len(_PART_RE.findall(item)):
            raise UsageError(f"bad layout {item!r}: write tpN, epN or tpNepM (e.g. tp8,ep8,tp2ep4)")
        tp, ep = (bounded_int(parts.get(k, "1"), f"layout {k}", maximum=MAX_COUNT) for k in ("tp", "ep"))
        if tp < 1 or ep < 1:
            raise UsageError(f"bad layout {item!r}: tp and ep are at least 1")
        if tp * ep != gpus:
            raise UsageError(f"layout {item} uses {tp * ep} GPUs, not --gpus {gpus}")
        if (tp, ep) not in out:
            out.append((tp, ep))
    if not out:
        raise UsageError("--layouts is empty: write tpN, epN or tpNepM (e.g. tp8,ep8,tp2ep4)")
    return out


def compare_data(args: argparse.Namespace) -> dict[str, Any]:
    from tilefit.hw.catalog import get_gpu
    from tilefit.layout import Layout, plan_layer
    from tilefit.models import load_model
    from tilefit.perf.interconnect import default_interconnect, get_interconnect
    from tilefit.perf.moe_layer import Assumptions, compute_dtype, layer_time

    spec = launch_spec(args)
    if not (args.model or spec):
        raise UsageError("give --model (a preset, config.json or Hugging Face id) or a launch command after `--`")
    model, gpu = load_model(args.model or spec.model), get_gpu(args.gpu)  # type: ignore[union-attr]
    gpus = args.gpus or (spec.layout.gpus if spec else None)
    if gpus is None:
        raise UsageError("give --gpus N (the GPUs the MoE layers span) or a launch command after `--`")
    link = get_interconnect(args.interconnect) if args.interconnect else default_interconnect(gpu)
    layouts = parse_layouts(args.layouts, gpus)
    if spec and not args.layouts and (spec.layout.tp, spec.layout.ep) not in layouts \
            and spec.layout.gpus == gpus:
        layouts.insert(0, (spec.layout.tp, spec.layout.ep))  # the command's own layout first
    kernel, kernel_note = _kernel_model(args, spec, model, gpu, layouts)
    assumptions = Assumptions(ep_comm=args.ep_comm, kernel=kernel)
    plans = []
    for tp, ep in layouts:
        try:
            plans.append(plan_layer(model, Layout(tp=tp, ep=ep)))
        except UsageError as e:
            name = "x".join(f"{k.upper()}{v}" for k, v in (("tp", tp), ("ep", ep)) if v > 1) or "TP1"
            raise UsageError(f"layout {name} for {gpus} GPUs: {e}; "
                             f"pass --layouts with layouts that fit the model") from None
    measured = _measure(model, plans, args) if args.measure else {}
    rows = []
    shares = [p.memory_share(gpu.memory_bytes) for p in plans]
    for b in args.batch:
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
                row["measured"] = _measured_fields(m, t, p.layout, args.ep_comm)
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


def _kernel_model(args: argparse.Namespace, spec: Any, model: Any, gpu: Any,
                  layouts: list[tuple[int, int]]) -> tuple[Any, str]:
    """The kernel the engine runs for this model on this GPU (its backend rule, as check reads it):
    FlashInfer's CUTLASS MoE -> the token tiles of the catalogued tactics that launch on this arch
    (swap-AB tactics put tokens along N, so small batches get N-sized tiles); Triton otherwise."""
    from tilefit.engines import get_engine
    from tilefit.engines.pins import flashinfer_pin
    from tilefit.kernels.registry import get_family
    from tilefit.layout import Layout
    from tilefit.perf.moe_layer import TRITON_MOE, KernelModel

    engine_name = spec.engine if spec else args.engine
    if not engine_name:
        return TRITON_MOE, "Triton fused-MoE tiles: no --engine or launch command, so the engine's kernel choice is not applied"
    engine = get_engine(engine_name)
    tp, ep = layouts[0]
    try:
        choice = engine.backend(model.weight_dtype, gpu.arch, layout=Layout(tp=tp, ep=ep),
                                version=args.engine_version, environ=spec.environ if spec else {},
                                flags=spec.flags() if spec and spec.argv else None)
    except UsageError as e:
        return TRITON_MOE, f"Triton fused-MoE tiles assumed: {e}"
    if choice.family != "flashinfer-cutlass":
        return TRITON_MOE, f"{engine_name} runs {choice.engine_backend} (Triton fused-MoE): {choice.rule}"
    family = get_family("flashinfer-cutlass")
    flashinfer = flashinfer_pin(engine_name, args.engine_version)
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


def _measure(model: Any, plans: list, args: argparse.Namespace) -> dict:
    from tilefit.perf.measure import MeasureSpec, measure

    available = _local_gpus() if args.measure_backend == "triton" else 64
    out = {}
    for p in plans:
        lay = p.layout
        spec = MeasureSpec(hidden=model.hidden_size, width=model.expert_width, experts=model.num_experts,
                           top_k=model.top_k, tp=lay.tp, ep=lay.ep, batches=tuple(args.batch),
                           reps=args.reps, backend=args.measure_backend)
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


def _versus(row: dict[str, Any]) -> str:
    if row["winner"]:
        return "winner"
    if row["slowdown_vs_winner"] is None:
        return "-"  # no layout fits in memory, so none wins
    return f"+{(row['slowdown_vs_winner'] - 1) * 100:.0f}%"


def render(d: dict[str, Any]) -> str:
    ic = d["interconnect"]
    lines = [f"{d['model']} on {d['gpus']} x {d['gpu_name']} ({d['weight_dtype']} weights, {d['compute_dtype']} "
             f"tensor cores), {ic['key']}: predicted time of one MoE layer on the busiest GPU", ""]
    body = []
    has_measured = any("measured" in r for r in d["rows"])
    for r in d["rows"]:
        cells = [r["batch"], r["layout"], f"{r['gemm_us']:.1f}", f"{r['comm_us']:.1f}", f"{r['total_us']:.1f}",
                 f"{r['model_ms']:.2f}", _versus(r),
                 f"{r['weights_memory_share']:.0%}" + (" (does not fit)" if r["weights_memory_share"] > 1 else "")]
        if has_measured:
            m = r.get("measured") or {}
            comm, total = m.get("comm_us"), m.get("total_us")
            error = m.get("total_error") if total is not None else m.get("gemm_error")
            cells += [f"{m['gemm_us']:.1f}" if m else "-",
                      f"{comm:.1f}" if comm is not None else "not run",
                      f"{total:.1f}" if total is not None else "-",
                      f"{error * 100:+.0f}%" if error is not None else "-",
                      {True: "winner", False: ""}.get(m.get("winner"), "-")]
        body.append(cells)
    headers = ["batch", "layout", "GEMM us", "comm us", "layer us", f"x{d['moe_layers']} layers ms", "vs best",
               "weights/GPU mem"]
    if has_measured:
        headers += ["measured GEMM us", "measured comm us", "measured layer us", "pred. error", "measured"]
    lines.append(table(headers, body, align="rlrrrrll" + ("rrrrl" if has_measured else "")))
    if has_measured:
        lines += ["", "measured: the two grouped GEMM kernels (engine default configs, alignment done "
                      "beforehand) on the busiest GPU and the layout's collective, medians of CUDA-event "
                      "timings; pred. error is predicted / measured - 1 of the layer (of the GEMMs where "
                      "no collective ran)"]
    if all(r["slowdown_vs_winner"] is None for r in d["rows"]):
        lines += ["", "no layout fits the expert weights in GPU memory, so none wins: use more GPUs or a "
                      "quantized checkpoint (`tilefit plan` shows the bytes)"]
    lines += ["", "assumptions (predicted, not measured):"]
    lines += [f"  - {a}" for a in d["assumptions"]]
    lines.append(f"  - {ic['description']}: {ic['bandwidth_gbps']:g} GB/s bus bandwidth, "
                 f"{ic['latency_us']:g} us per collective ({ic['source']})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from tilefit.cli.launch_args import launch_lines

    d = compare_data(args)
    spec = launch_spec(args)
    head = launch_lines(spec, None) + [""] if spec else []
    print_json(d) if args.json else print("\n".join(head + [render(d)]))
    return 0
