"""`tilefit compare`: TP vs EP (and mixes) for a deployment, predicted per MoE layer and per model."""

from __future__ import annotations

import argparse
from typing import Any

from tilefit.cli.args import add_json_arg, int_list, positive_int
from tilefit.cli.launch_args import add_launch_args, launch_spec
from tilefit.cli.output import print_json, table
from tilefit.compare import CompareRequest, compare_data

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
    p.add_argument("--ep-comm", choices=("allreduce", "alltoall"), default=None,
                   help="EP communication: every rank gets every token and the output is "
                        "all-reduced, or all-to-all dispatch/combine (default: as the engine "
                        "resolves it from the launch command: sglang's --moe-a2a-backend, vLLM's "
                        "--all2all-backend with --data-parallel-size > 1; else all-reduce)")
    p.add_argument("--measure", action="store_true",
                   help="also measure each layout on the local GPUs (one process per GPU, NCCL); with "
                        "fewer GPUs than a layout needs, the busiest GPU's GEMMs are measured alone")
    p.add_argument("--reps", type=positive_int, default=20, help="timed repetitions per point (--measure)")
    # CPU stand-in for tests: float32 torch reference GEMMs and gloo collectives.
    p.add_argument("--measure-backend", choices=("triton", "torch"), default="triton", help=argparse.SUPPRESS)
    add_json_arg(p)
    add_launch_args(p, layout_flags=False)
    p.set_defaults(func=run)


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


def request(args: argparse.Namespace, spec: Any) -> CompareRequest:
    """compare's flags (and the launch command after `--`, parsed) as the library's request."""
    return CompareRequest(gpu=args.gpu, batches=tuple(args.batch), model=args.model, gpus=args.gpus,
                          layouts=args.layouts, interconnect=args.interconnect, ep_comm=args.ep_comm,
                          engine=args.engine, engine_version=args.engine_version, launch=spec,
                          measure=args.measure, reps=args.reps, measure_backend=args.measure_backend)


def run(args: argparse.Namespace) -> int:
    from tilefit.cli.launch_args import launch_lines

    spec = launch_spec(args)
    d = compare_data(request(args, spec))
    head = launch_lines(spec, None) + [""] if spec else []
    print_json(d) if args.json else print("\n".join(head + [render(d)]))
    return 0
