"""`tilefit tune`: tune the fused-MoE kernel a server will run, on the local GPU, and write the
engine's config files. Progress on stderr (a live bar on a terminal: cli/progress.py), the summary
table or JSON on stdout. `--target fake` and `--replay FILE` (not in --help) run the whole pipeline on a CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tilefit.cli.args import add_json_arg, int_list, non_negative_int, positive_float, positive_int
from tilefit.cli.launch_args import add_launch_args, launch_spec, model_of
from tilefit.cli.memory_args import engine_version
from tilefit.cli.tune_engines import block_scales, shared_fusion, swap_ab
from tilefit.errors import UsageError
# A module attribute, so that tests can replace it.
from tilefit.tune.device import local_gpus as _local_gpus
from tilefit.tune.finalists import FINALISTS, ROUNDS
from tilefit.tune.graph_limit import DEFAULT as GRAPH_DEFAULT
from tilefit.tune.targets.registry import (
    CPU_TARGETS, ENGINE_TARGETS, PUBLIC_TARGETS, STANDARD_BATCHES, target_factory)


def _engines(text: str) -> tuple[str, ...]:
    from tilefit.tune.emit import parse_engines

    try:
        return parse_engines(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _indices(text: str) -> tuple[int, ...]:
    """'0,1' -> (0, 1): GPU indices (zero allowed, no duplicates kept)."""
    out: list[int] = []
    for t in (x.strip() for x in text.split(",") if x.strip()):
        if not t.isdigit():
            raise argparse.ArgumentTypeError(f"expected GPU indices like 0,1, got {text!r}")
        if int(t) not in out:
            out.append(int(t))
    if not out:
        raise argparse.ArgumentTypeError("expected GPU indices like 0,1")
    return tuple(out)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune the fused-MoE kernel on the local GPU and write config files",
                       description="Tune a fused-MoE Triton kernel for a model's per-GPU GEMMs on the "
                                   "local GPU: crash-proof workers, shared-memory prefilter, a fast "
                                   "search, and the engines' config files.")
    p.add_argument("--model", metavar="M",
                   help="preset name (see `tilefit models`), a config.json file/directory or a Hugging "
                        "Face id (default: the launch command's model)")
    p.add_argument("--tp", type=positive_int, help="tensor parallelism inside each expert (default: 1, "
                                                   "or the launch command's layout)")
    p.add_argument("--ep", type=positive_int, help="expert parallelism (default: 1, or the launch "
                                                   "command's layout)")
    p.add_argument("--target", default="tilefit", metavar="|".join(PUBLIC_TARGETS),
                   help="which kernel to tune: tilefit's own, or the one vLLM / SGLang will run "
                        "(default: %(default)s)")
    p.add_argument("--dtype", metavar="bf16|fp16|fp8-block",
                   help="kernel data type (default: from the model's weights; fp8-block = 128x128 "
                        "block scales; per-tensor fp8 has no tunable kernel and is refused)")
    p.add_argument("--batches", type=int_list, default=STANDARD_BATCHES, metavar="B,B,...",
                   help="batch sizes (default: the 18 sizes the engines' tuners use)")
    p.add_argument("--strategy", default="fast", metavar="fast|exhaustive",
                   help="search strategy (default: %(default)s)")
    p.add_argument("--strategy-option", action="append", metavar="NAME=VALUE",
                   help="a strategy option, repeatable (unknown names list the known ones)")
    p.add_argument("--budget", type=positive_float, metavar="MINUTES",
                   help="wall-time budget for the whole run")
    p.add_argument("--trials", type=positive_int, metavar="N", help="at most N configs per search")
    p.add_argument("--out", default="tilefit-tune", metavar="DIR",
                   help="folder for config files, the journal and the summary (default: %(default)s)")
    p.add_argument("--resume", action="store_true", help="continue the journal in --out")
    p.add_argument("--compile-workers", type=positive_int, metavar="N",
                   help="compiler processes (default: one per CPU core)")
    p.add_argument("--gpus", type=_indices, metavar="I,I,...", help="GPU indices to time on, one worker each (default: all)")
    p.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                   help="run compiles and timing on a Ray cluster: one actor per GPU of the cluster "
                        "(`auto`, the default: the cluster this host belongs to; needs "
                        "pip install 'tilefit[ray]')")
    p.add_argument("--exhaustive-at", type=int_list, default=(), metavar="B,B,...",
                   help="also sweep the whole space at these batch sizes, to check the strategy "
                        "(the sweep's best few are re-timed with the search's)")
    p.add_argument("--emit", type=_engines, metavar="vllm,sglang",
                   help="also write these engines' config files from the tuning of tilefit's "
                        "kernel (same six keys), for a box where the engine is not installed; "
                        "provenance goes in a sidecar file beside each (an fp8-block pick with "
                        "BLOCK_SIZE_K 256, which neither engine runs as tuned, is replaced there "
                        "by the fastest re-timed finalist the engine does run, with a warning)")
    p.add_argument("--graph-max-batch", type=non_negative_int, metavar="B",
                   help="batch sizes up to B (the engine's CUDA-graph batch limit: vLLM's "
                        "max_cudagraph_capture_size, SGLang's --cuda-graph-max-bs) are timed as "
                        "CUDA-graph replays, larger ones with CUDA events (default: the launch "
                        "command's engine on this GPU, else the largest of the --emit engines' "
                        f"defaults, else {GRAPH_DEFAULT})")
    p.add_argument("--engine-version", type=engine_version, metavar="V",
                   help="the engine release whose CUDA-graph default to follow (default: the newest "
                        "tilefit has read)")
    p.add_argument("--finalists", type=positive_int, default=FINALISTS, metavar="N",
                   help="best configs of each search re-timed in quiet, with the engine default "
                        "(default: %(default)s)")
    p.add_argument("--rounds", type=non_negative_int, default=ROUNDS, metavar="R",
                   help="interleaved re-timing rounds; the median decides (0: pick by the search's "
                        "own timings; default: %(default)s)")
    p.add_argument("--no-interleave", dest="interleave", action="store_false",
                   help="time a re-timing round's finalists one after the other (default: in "
                        "turns, launch by launch or replay by replay, so a change of the GPU's "
                        "clock meets them all alike)")
    p.add_argument("--compile-timeout", type=positive_float, default=300.0, metavar="S",
                   help="seconds before a compile is killed (default: %(default)s)")
    p.add_argument("--run-timeout", type=positive_float, default=120.0, metavar="S",
                   help="seconds before a timing run is killed (default: %(default)s)")
    p.add_argument("--mem-bandwidth", type=positive_float, metavar="GB/S",
                   help="the GPU's memory bandwidth, for a GPU not in tilefit's catalog (default: "
                        "estimated from the memory clock and bus width the device reports)")
    p.add_argument("--peak-tflops", type=positive_float, metavar="TFLOPS",
                   help="the GPU's dense tensor-core TFLOP/s for the tuned dtype, for a GPU not in "
                        "tilefit's catalog (default: a catalogued GPU of its arch scaled by SM count)")
    p.add_argument("--trace", metavar="FILE",
                   help="append a JSON line per compile and GPU request to FILE: when it was asked, "
                        "how long it waited for a worker and how long it ran, and each pause of the "
                        "compile workers (where a run's time goes; local workers, not --ray)")
    p.add_argument("--gpu", help=argparse.SUPPRESS)  # catalog GPU for fake/replay runs
    p.add_argument("--replay", metavar="FILE", help=argparse.SUPPRESS)
    add_json_arg(p)
    add_launch_args(p, layout_flags=False)
    p.set_defaults(func=run)


def build_request(args: argparse.Namespace) -> Any:
    from tilefit.hw.catalog import get_gpu
    from tilefit.layout import Layout, plan_layer
    from tilefit.models import load_model
    from tilefit.tune.device import resolve_device
    from tilefit.tune.run import TuneRequest
    from tilefit.tune.strategies import get_strategy, make_options, parse_option_text
    from tilefit.tune.targets.base import TargetSpec, TuneShape, tune_dtype
    from tilefit.tune.pools import default_compile_workers

    target = "replay" if args.replay else args.target
    if target == "replay" and not args.replay:
        raise UsageError("--target replay needs --replay FILE (a tilefit tune journal to replay)")
    factory = target_factory(target)
    if target in ENGINE_TARGETS:
        from tilefit.tune.targets.engines import require_engine

        require_engine(target, target)
    if args.ray is not None and args.trace:  # before Ray is imported: whether or not it is there
        raise UsageError("--trace records tilefit's local worker pools; a --ray run's requests run "
                         "on the cluster's workers: leave out --trace or --ray")
    ray = _ray_options(args, target)
    cores = default_compile_workers()
    if ray is None and args.compile_workers and args.compile_workers > cores:
        raise UsageError(f"--compile-workers {args.compile_workers:,} is more than the {cores} CPU core(s) "
                         f"this process may use (each worker is a compiling process); leave it out "
                         f"for one per core")
    options = parse_option_text(args.strategy_option)
    make_options(get_strategy(args.strategy), options)  # reject bad options before any work
    spec = _launch(args, target)
    model_name = model_of(args, spec)
    if not model_name:
        raise UsageError("give --model (a preset, config.json or Hugging Face id) or the engine's "
                         "launch command after `--`")
    model = load_model(model_name)
    layout = Layout(tp=spec.layout.tp, ep=spec.layout.ep) if spec is not None else \
        Layout(tp=args.tp or 1, ep=args.ep or 1)
    emit = args.emit or (() if spec is None or target != "tilefit" else (spec.engine,))
    if target == "sglang" and layout.ep > 1:
        raise UsageError("--target sglang tunes without expert parallelism for now; use --ep 1, "
                         "or --target tilefit")
    plan = plan_layer(model, layout)
    weights = model.weights.name
    dtype = tune_dtype(args.dtype, weights, model.name)
    if target in ENGINE_TARGETS and dtype == "fp8-block" and not args.dtype:
        raise UsageError(f"--target {target} tunes bf16/fp16 for now; {model.name} stores fp8-block "
                         f"weights: pass --dtype bf16, or use --target tilefit for fp8-block")
    _check_quantization(spec, weights, model.name, args.dtype)
    shape = TuneShape.of_layer(model, plan, dtype)
    figures = None
    if target in CPU_TARGETS:
        gpu = get_gpu(args.gpu or "h200")
        devices: tuple[int | None, ...] = (None,)
        device_name = gpu.name
    else:
        found, device_name = _local_gpus()
        if ray is not None and not found:  # a head node without a GPU of its own
            from tilefit.tune.ray_executor import cluster_gpu_name

            device_name = cluster_gpu_name(ray.address)
            if device_name is None:
                raise UsageError(f"--ray {ray.address}: the Ray cluster has no GPU to tune on; "
                                 f"start its nodes with GPUs visible")
            found = [0]
        if not found:
            raise UsageError("tilefit tune needs a local NVIDIA GPU and found none; run it on the "
                             "machine that will serve the model (`tilefit plan` and `tilefit fit` "
                             "work without one)")
        devices = tuple(args.gpus) if args.gpus else tuple(found)
        bad = [d for d in devices if d not in found]
        if bad:
            raise UsageError(f"--gpus {','.join(map(str, bad))}: this machine has GPUs "
                             f"{','.join(map(str, found))}")
        figures = resolve_device(device_name, dtype, devices[0] or 0,
                                 bandwidth_gbps=args.mem_bandwidth, peak_tflops=args.peak_tflops)
        gpu = figures.gpu
    fusion = shared_fusion((target,) if target in ENGINE_TARGETS else emit,
                           model, layout, gpu.arch, args.engine_version,
                           spec.flags() if spec is not None else {}, own_kernel=target in ENGINE_TARGETS)
    if fusion.experts:  # the engines run the shared expert inside the fused MoE: that GEMM is tuned
        plan = plan_layer(model, layout, fusion.experts)
        shape = TuneShape.of_layer(model, plan, dtype)
    kwargs: dict[str, Any] = {"gpu": gpu.key}
    graph = None
    if target == "tilefit":
        graph = _graph_limit(args, spec, model_name, gpu, layout, emit)
        kwargs["graph_max_batch"] = graph.batch
        kwargs["scales"] = block_scales(dtype, emit, args.engine_version)
        kwargs["engines"] = emit  # search only what the engines written for run as tuned
        kwargs["swap_ab"] = swap_ab(dtype, emit, gpu.arch, args.engine_version)
    if args.emit and target not in ("tilefit", *CPU_TARGETS):
        raise UsageError(f"--emit writes engine files from a tuning of tilefit's kernel; with "
                         f"--target {target} the engine's own files are written already")
    if figures is not None and not figures.from_catalog:
        kwargs["arch"] = gpu.arch.name  # the target's SMEM limits; no catalog entry to look up
    if target == "replay":
        try:
            found_file = Path(args.replay).is_file()
        except OSError as e:  # a name over 255 characters, a folder without search permission
            raise UsageError(f"--replay {args.replay}: {e.strerror or e}") from None
        if not found_file:
            raise UsageError(f"--replay {args.replay}: no such file (give a tilefit tune journal)")
        kwargs = {"path": str(Path(args.replay).resolve())}
    return TuneRequest(
        TargetSpec.of(factory, **kwargs), (shape,), tuple(args.batches),
        Path(args.out), gpu.key, device_name, strategy=args.strategy, options=options,
        budget_minutes=args.budget, trials=args.trials, resume=args.resume,
        compile_workers=args.compile_workers or default_compile_workers(), devices=devices,
        compile_timeout_s=args.compile_timeout, run_timeout_s=args.run_timeout,
        exhaustive_at=tuple(args.exhaustive_at), ray=ray, figures=figures,
        finalists=args.finalists, rounds=args.rounds, interleave=args.interleave,
        measure_ceilings=target not in CPU_TARGETS and ray is None, emit=emit,
        engine_version=args.engine_version,
        provenance={"model": model.name, "layout": layout.label()}
        | ({"graph_limit": graph.as_dict()} if graph is not None else {})
        | ({"block_scales": kwargs["scales"]} if "scales" in kwargs and dtype == "fp8-block" else {})
        | ({"swap_ab": True} if kwargs.get("swap_ab") else {})
        | ({"shared_experts_fused": fusion.why} if fusion.experts else {})
        | _searched(factory, kwargs, shape, emit),
        trace=Path(args.trace) if args.trace else None)


def _launch(args: argparse.Namespace, target: str) -> Any:
    """The launch command after `--` (None without one), checked against tune's own flags."""
    from tilefit.tune.emit import ENGINES

    spec = launch_spec(args)
    if spec is None:
        return None
    if spec.engine not in ENGINES:
        raise UsageError(f"tilefit tune writes vLLM's and SGLang's fused-MoE config files; a {spec.engine} "
                         f"launch command has none to write: give --model, --tp and --ep instead")
    if target in ENGINE_TARGETS and target != spec.engine:
        raise UsageError(f"--target {target} but the launch command starts {spec.engine}")
    given = [f"--{n}" for n in ("tp", "ep") if getattr(args, n) is not None]
    if given:
        raise UsageError(f"{' and '.join(given)} and a launch command: the command gives the layout "
                         f"({spec.headline()}); drop {' and '.join(given)}")
    return spec


def _check_quantization(spec: Any, weights: str, model: str, typed: str | None) -> None:
    """A launch command that quantizes unquantized weights at load runs another kernel variant,
    whose config files a tuning of the stored dtype does not write: refused unless --dtype says
    what to tune. (vLLM 0.33.0 quantization/fp8.py: --quantization fp8 on a checkpoint without
    weight_block_size quantizes per tensor, and the fused-MoE tuner's files are dtype=fp8_w8a8.)"""
    q = spec.settings.quantization if spec is not None else None
    if q and weights in ("bf16", "fp16") and not typed:
        raise UsageError(f"the launch command quantizes {model}'s {weights} weights at load "
                         f"(--quantization {q}): the engine then runs its quantized MoE kernel and "
                         f"reads other config files than the {weights} ones tune would write; give "
                         f"the quantized checkpoint the engine should load, or --dtype to tune anyway")


def _graph_limit(args: argparse.Namespace, spec: Any, model_name: str, gpu: Any, layout: Any,
                 emit: tuple[str, ...]) -> Any:
    """Up to which batch tilefit's kernel is timed as graph replays (tune/graph_limit.py)."""
    from tilefit.models.architecture import load_architecture
    from tilefit.tune import graph_limit

    if args.graph_max_batch is not None:
        return graph_limit.explicit(args.graph_max_batch)
    if spec is None and not emit:
        return graph_limit.default()
    arch = load_architecture(model_name)
    if spec is not None:
        return graph_limit.from_launch(spec, arch, gpu, args.engine_version)
    return graph_limit.from_engines(emit, arch, gpu, layout.gpus, layout.ep, args.engine_version)


def _searched(factory: Any, kwargs: dict[str, Any], shape: Any, emit: tuple[str, ...]) -> dict[str, str]:
    """{"searched": a line} when the engines written for leave configs of tilefit's grid out
    (the target searches only what they run as tuned), else {}."""
    if "engines" not in kwargs or not emit:
        return {}
    from tilefit.engines import get_engine
    from tilefit.tune.targets.base import TargetSpec

    target = TargetSpec.of(factory, **kwargs).build()
    grid = len(target.family.configs(target.arch, shape.dtype))
    kept = len(target.space(shape))
    if kept == grid:
        return {}
    titles = " and ".join(get_engine(e).title for e in emit)
    verb = "run" if len(emit) > 1 else "runs"
    return {"searched": f"searched {kept:,} of the {grid:,} configs: the ones {titles} {verb} as tuned"}


def _ray_options(args: argparse.Namespace, target: str) -> Any:
    """RayOptions for --ray (Ray must import: else exit 2 naming the extra), or None."""
    if args.ray is None:
        return None
    from tilefit.tune.ray_executor import RayOptions, import_ray

    import_ray()
    if args.gpus:
        raise UsageError("--gpus picks local GPUs; with --ray every GPU of the cluster gets a "
                         "benchmark actor: drop one of the two")
    if target in CPU_TARGETS:  # nothing to time on a GPU: one actor, like the local run
        return RayOptions(args.ray, compile_tasks=args.compile_workers, bench_actors=1,
                          actor_gpus=0)
    return RayOptions(args.ray, compile_tasks=args.compile_workers)


def run(args: argparse.Namespace) -> int:
    from tilefit.cli.output import print_json
    from tilefit.cli.tune_view import render
    from tilefit.tune.run import tune

    req, graph = build_request(args), None
    if "graph_limit" in req.provenance:
        from tilefit.tune.graph_limit import GraphLimit

        graph = GraphLimit(**req.provenance["graph_limit"])
    if req.figures is not None:
        for line in req.figures.lines():
            print(f"tilefit: note: {line}", file=sys.stderr, flush=True)
    from tilefit.cli.progress import TuneProgress

    progress = TuneProgress(budget_minutes=args.budget)
    try:
        report = tune(req, progress)
    finally:
        progress.close()
    scales, searched = req.provenance.get("block_scales"), req.provenance.get("searched")
    swapped, fused = bool(req.provenance.get("swap_ab")), req.provenance.get("shared_experts_fused")
    if args.json:
        print_json(report.as_dict() | {"graph_limit": graph.as_dict() if graph else None,
                                       "block_scales": scales, "searched": searched,
                                       "swap_ab": swapped, "shared_experts_fused": fused})
    else:
        print(render(report, graph, scales, searched, swapped, fused))
    if report.model_bugs or any(r.config is None for r in report.rows):
        return 1
    return 0
