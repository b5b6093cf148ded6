"""`tilefit plan`: the per-GPU grouped GEMMs a model gets under a TP/EP layout."""

from __future__ import annotations

import argparse
from typing import Any

from tilefit.cli.args import add_json_arg, int_list, positive_int
from tilefit.cli.launch_args import add_launch_args, deployment, launch_lines, model_of
from tilefit.cli.memory_args import add_memory_args
from tilefit.cli.output import human_bytes, print_json, table
from tilefit.layout.data import plan_data

DEFAULT_BATCHES = (1, 64, 1024)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="per-GPU expert GEMMs of a model under a TP/EP layout",
                       description="Per-GPU grouped GEMMs of one MoE layer under a TP/EP layout, "
                                   "weight bytes, and token assignments per batch size.")
    p.add_argument("--model", metavar="M",
                   help="preset name (see `tilefit models`), a config.json file/directory or a Hugging Face "
                        "id (default: the launch command's model)")
    p.add_argument("--gpus", type=positive_int, metavar="N", help="GPUs you have: said when the layout needs more")
    p.add_argument("--gpu", metavar="NAME",
                   help="GPU name (see `tilefit gpus`); defaults to the local GPU when one is present")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor parallelism inside each expert")
    p.add_argument("--ep", type=positive_int, default=1, help="expert parallelism (experts split over GPUs)")
    p.add_argument("--dp", type=positive_int, default=1, help="attention data parallelism: shared experts are sharded over (tp*ep)/dp GPUs "
                        "(replicated when dp = tp*ep)")
    p.add_argument("--batch", type=int_list, default=DEFAULT_BATCHES, metavar="B,B,...",
                   help="tokens entering the MoE layer (default: %(default)s)")
    p.add_argument("--memory", action="store_true",
                   help="add the per-GPU device-memory plan (weights by kind, KV pool, the rest, free); needs --gpu")
    add_memory_args(p, engine=True)
    add_json_arg(p)
    add_launch_args(p)
    p.set_defaults(func=run)


def render(d: dict[str, Any]) -> str:
    m, lay = d["model"], d["layout"]
    head = (f"{m['name']}: H={m['hidden_size']} I={m['expert_width']} E={m['num_experts']} "
            f"top-{m['top_k']} {m['weight_dtype']}, {m['moe_layers']} of {m['num_layers']} layers MoE"
            + (f", shared expert width {m['shared_expert_width']}" if m["shared_expert_width"] else ""))
    where = f" on {d['gpu']['name']} ({d['gpu']['arch']})" if d["gpu"] else ""
    lines = [head, f"layout {lay['label']} ({lay['gpus']} GPU{'s' if lay['gpus'] > 1 else ''} for the MoE layers){where}: "
                   f"{d['local_experts']} local experts per GPU", ""]
    if d.get("padded_from"):
        width = d["gemms"][1]["k"]
        lines.insert(2, f"per-GPU expert width {d['padded_from']} padded to {width}, as the engines pad "
                        f"{m['weight_dtype']} experts (vLLM oracle/mxfp4.py, sglang quantization/mxfp4.py)")
    if d.get("shared_experts_fused"):
        lines.insert(2, f"shared expert inside the fused MoE: {d['shared_experts_fused']}; it takes "
                        f"every token, one row per token more than the routed rows below")
    rows = [(g["name"], g["local_experts"], g["n"], g["k"], human_bytes(g["weight_bytes"]))
            for g in d["gemms"]]
    lines.append(table(["gemm", "groups", "N", "K", "weights/GPU"], rows, align="lrrrr"))
    total = (f"expert weights per GPU: {human_bytes(d['weight_bytes_per_layer'])} per layer, "
             f"{human_bytes(d['weight_bytes_all_moe_layers'])} for all {m['moe_layers']} MoE layers")
    if d["gpu"]:
        share = d["gpu"]["memory_share"]
        total += f" ({share:.0%} of {d['gpu']['memory_bytes'] / 2**30:,.1f} GiB)"
        if share > 1:
            total += "\nthe expert weights alone exceed GPU memory: use a quantized variant or more GPUs"
    lines += ["", total, ""]
    rows = [(b["batch"], f"{b['assignments_per_gpu_mean']:.1f}", b["assignments_per_gpu_p99"],
             f"{b['tokens_per_expert_mean']:.2f}", f"{b['tokens_per_expert_max_mean']:.1f}",
             b["tokens_per_expert_p99"], f"{b['active_experts_per_gpu_mean']:.1f}")
            for b in d["batches"]]
    lines.append(table(["batch", "rows/GPU mean", "busiest GPU p99", "rows/expert mean",
                        "busiest expert mean", "busiest expert p99", "active experts/GPU"], rows,
                       align="rrrrrrr"))
    lines.append(f"routing: {d['routing']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from tilefit.errors import UsageError

    # A launch command, or --engine, gives the layout as the engine builds it; without either,
    # --tp/--ep/--dp are tilefit's TP x EP layout. The memory plan takes that layout (tilefit's terms).
    spec = deployment(args) if (args.launch or args.engine) else None
    if spec is None:
        if not args.model:
            raise UsageError("give --model (a preset, config.json or Hugging Face id) or a launch command "
                             "after `--`")
        model, tp, ep, dp, head = args.model, args.tp, args.ep, args.dp, []
    else:
        lay = spec.layout
        model, tp, ep, dp = model_of(args, spec) or spec.model, lay.tp, lay.ep, lay.dp
        head = launch_lines(spec, args.gpus) + [""]
        if args.launch:
            _settings_to_memory_args(args, spec)
    fusion = _fusion(args, spec, model, tp, ep, dp)
    d = plan_data(model, args.gpu, tp, ep, dp, args.batch, fusion.experts, fusion.why)
    if spec is not None:
        d["launch"] = spec.as_dict()
    memory = _memory_plan(args, d, model, tp, ep, dp) if args.memory else None
    if args.json:
        if memory is not None:
            from tilefit.memory.render import as_dict

            d["memory"] = as_dict(memory)
        print_json(d)
    else:
        print("\n".join(head + [render(d)]))
        if memory is not None:
            from tilefit.cli.memory_view import render_memory

            print("\n" + render_memory(memory))
    return 1 if memory is not None and memory.problems else 0


def _settings_to_memory_args(args: argparse.Namespace, spec: Any) -> None:
    """The launch command's engine and memory settings, where --memory's own flags were not given."""
    from tilefit.cli.memory_args import ENGINES
    from tilefit.memory.kv import KV_DTYPES

    st = spec.settings
    if spec.engine in ENGINES:
        args.engine = spec.engine
    for name, value in (("mem_fraction", st.mem_fraction), ("context_length", st.context_length),
                        ("max_running_requests", st.max_running_requests),
                        ("chunked_prefill", st.chunked_prefill_size)):
        if getattr(args, name, None) is None and value is not None:
            setattr(args, name, value)
    if getattr(args, "kv_dtype", "auto") == "auto" and st.kv_cache_dtype in KV_DTYPES:
        args.kv_dtype = st.kv_cache_dtype


def _memory_plan(args: argparse.Namespace, d: dict[str, Any], model: str, tp: int, ep: int, dp: int):
    from tilefit.cli.memory_args import memory_request
    from tilefit.errors import UsageError
    from tilefit.memory import plan_memory

    if d["gpu"] is None:
        raise UsageError("--memory needs a GPU: pass --gpu NAME (see `tilefit gpus`)")
    return plan_memory(memory_request(args, model, d["gpu"]["key"], args.engine or "sglang", tp, ep, dp))


def _fusion(args: argparse.Namespace, spec: Any, model: str, tp: int, ep: int, dp: int) -> Any:
    """The shared experts the deployment's engine runs inside its fused MoE (sglang's shared-expert
    fusion), on a GPU that is named or present; none without an engine or a GPU."""
    from tilefit.engines.registry import get_engine, shared_fusion_of
    from tilefit.engines.types import NO_FUSION
    from tilefit.hw.catalog import resolve_target
    from tilefit.layout.plan import Layout
    from tilefit.models import load_model

    gpu, _ = resolve_target(args.gpu, None, required=False)
    if spec is None or gpu is None:
        return NO_FUSION
    return shared_fusion_of(get_engine(spec.engine), load_model(model), Layout(tp=tp, ep=ep, dp=dp),
                            gpu.arch, version=getattr(args, "engine_version", None), flags=spec.flags(),
                            a2a=getattr(args, "a2a_backend", None))
