"""Benchmark of `tilefit tune` on a GPU: GLM-5's per-GPU shapes (EP8 and TP8; another catalog model
with --model, e.g. qwen3-235b-a22b-fp8 or deepseek-v3 for issue 17's fp8 shapes), gemm1 and gemm2, our
kernel, the 18 standard batch sizes.

Per layout, in fresh folders under --work: (a) the fast strategy over every batch size, with the
finalists re-timed in quiet and the GPU's copy and MMA rates measured first (its journal's working
time is the tuning cost); then (b) the exhaustive sweep at the checked batch sizes, whose finalists
(its best few) are re-timed together with (a)'s picks, given to it: "pick / exhaustive best" is a
ratio of two medians of the same interleaved rounds. Every layout's (a) runs before any (b), so a
command cut short still has every fast tuning. Then, in this process, torch._grouped_mm on the
same (expert-sorted) rows, timed the way the row was (CUDA-graph replays over rotated weight copies
up to --graph-max-batch, do_bench events above). Results go to --out-dir, one JSON per layout.

  python benchmarks/bench_tune.py --layouts ep8,tp8 --out-dir benchmarks/results --tag v3
  python benchmarks/bench_tune.py --summarize benchmarks/results/tune_glm5_*_v3.json
`--target fake` runs the same flow on a CPU with the fake target (a dry run of the script).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tilefit.tune.targets.registry import STANDARD_BATCHES as STANDARD
from tilefit.tune.run import JOURNAL as JOURNAL_NAME
from tune_results import (layer_shape, paired_over, rebuild, recorded_best, refloor,  # benchmarks/
                          result_stem, summarize, sweep_journal)

CHECKED = (1, 64, 1024, 4096)
CHECK_ROUNDS = 5  # the check's rounds (every one for every config): as in session 4, whatever the run's
GROUPED_MM_AT = (1, 16, 64, 256, 1024, 4096)


def grouped_mm_us(shape: Any, batch: int, graph_max_batch: int, seed: int = 0) -> float | str:
    """torch._grouped_mm on the same routing, rows already sorted by expert (gather excluded),
    timed like the tuned kernel's row: graph replays over the same rotated weight copies up to
    `graph_max_batch`, do_bench events above."""
    import torch
    from triton.testing import do_bench

    from tilefit.tune.targets.gpu_timing import replay_us
    from tilefit.tune.targets.draws import routing
    from tilefit.tune.targets.tilefit_moe import GRAPH_LAUNCHES, MIN_REPLAYS, TilefitMoETarget

    ids = routing(shape, batch, seed)[0].reshape(-1).long()
    counts = torch.bincount(ids[ids >= 0], minlength=shape.experts)
    n, k = shape.nk
    rows = int(counts.sum())
    a = torch.randn(max(rows, 1), k, dtype=torch.bfloat16, device="cuda")[:rows]
    offs = torch.cumsum(counts, 0).to(torch.int32).cuda()
    weights = [b for b, _ in TilefitMoETarget(gpu="h200", seed=seed).rotated_weights(shape)]
    fns = [lambda b=b: torch._grouped_mm(a, b.transpose(1, 2), offs=offs, out_dtype=torch.bfloat16)
           for b in weights]
    try:
        if batch <= graph_max_batch:
            return replay_us(fns, 30.0, MIN_REPLAYS, GRAPH_LAUNCHES)
        fns[0]()
        return 1000.0 * do_bench(fns[0], warmup=10, rep=50, return_mode="median")
    except Exception as e:  # record why, keep the benchmark going
        return f"{type(e).__name__}: {e}"[:300]
    finally:
        del weights, fns
        torch.cuda.empty_cache()


def _request(args: argparse.Namespace, layer: Any, out: Path, retime_ms: tuple[float, float] | None = None,
             **kw: Any) -> Any:
    from tilefit.tune.run import TuneRequest
    from tilefit.tune.targets.base import TargetSpec
    from tilefit.tune.pools import default_compile_workers

    if args.target == "fake":
        spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", gpu=args.gpu, grid=args.grid)
        devices: tuple[int | None, ...] = (None,)
    else:
        import torch

        # The check's budget (retime_ms) times graphs and events alike, as session 4 did.
        warmup_ms, rep_ms = retime_ms or (args.warmup_ms, args.rep_ms)
        graph_ms = warmup_ms + rep_ms if retime_ms else args.graph_ms
        spec = TargetSpec.of("tilefit.tune.targets.tilefit_moe:TilefitMoETarget", gpu=args.gpu,
                             warmup_ms=warmup_ms, rep_ms=rep_ms, graph_ms=graph_ms,
                             probe_warmup_ms=args.probe_warmup_ms, probe_rep_ms=args.probe_rep_ms,
                             probe_launches=args.probe_launches, graph_max_batch=args.graph_max_batch,
                             probe_graph_ms=args.probe_graph_ms, scales=args.scales,
                             swap_ab=args.swap_ab)
        devices = tuple(range(torch.cuda.device_count()))[: args.gpus or None]
    return TuneRequest(spec, (layer,), kw.pop("batches"), out, args.gpu, args.device_name,
                       compile_workers=args.compile_workers or default_compile_workers(),
                       devices=devices, resume=args.resume, interleave=args.interleave, **kw)


def _log(tag: str) -> Any:
    def log(event: str, d: dict[str, Any]) -> None:
        if event == "row":
            print(f"  [{tag}] {d['job']} b{d['batch']}: {d['config']} {d['time_us'] or 0:.2f} us "
                  f"({d['timing']}), {d['trials']} trials, search {d['search_s']:.1f} s, "
                  f"re-time {d['retime_s']:.1f} s", file=sys.stderr, flush=True)
        elif event in ("note", "warning"):
            print(f"  [{tag}] {event}: {d['message']}", file=sys.stderr, flush=True)
    return log


def fast_run(args: argparse.Namespace, layout: str) -> Any:
    from tilefit.tune.run import tune

    if args.cold_cache:  # compiles count in full, as in the sweep they are compared with
        os.environ["TRITON_CACHE_DIR"] = str((Path(args.work) / layout / "triton-cache").resolve())
    layer = layer_shape(layout, args.dtype, args.model)
    req = _request(args, layer, Path(args.work) / layout / "fast", batches=tuple(args.batches),
                   strategy="fast", measure_ceilings=args.target != "fake",
                   side_by_side=not args.in_turns, split_at=args.split_at,
                   provenance={"model": args.model, "layout": layout.upper()},
                   trace=Path(args.work) / layout / "fast-trace.jsonl" if args.trace else None)
    print(f"[{layout}] fast strategy, {len(args.batches)} batch sizes", file=sys.stderr, flush=True)
    return tune(req, _log(f"{layout} fast"))


def sweep_run(args: argparse.Namespace, layout: str, fast: Any) -> Any:
    from tilefit.tune.run import tune

    layer = layer_shape(layout, args.dtype, args.model)
    given = tuple((r.job, r.batch, r.config) for r in fast.rows
                  if r.batch in args.checked and r.config is not None)
    req = _request(args, layer, Path(args.work) / layout / "exhaustive",
                   batches=tuple(args.checked), strategy="exhaustive", given=given)
    print(f"[{layout}] exhaustive at {args.checked}", file=sys.stderr, flush=True)
    return tune(req, _log(f"{layout} sweep"))


def check_run(args: argparse.Namespace, layout: str, fast: Any) -> tuple[Any, dict[Any, list[Any]]]:
    """The fast run's picks at the checked batch sizes re-timed, every round, together with the
    recorded sweep's best configs (--against); no new sweep."""
    from tilefit.tune.run import tune

    layer = layer_shape(layout, args.dtype, args.model)
    best = recorded_best(sweep_journal(args.against, args.model, layout, args.dtype),
                         tuple(args.checked))
    given = tuple((r.job, r.batch, r.config) for r in fast.rows
                  if r.batch in args.checked and r.config is not None)
    given += tuple((job, b, c) for (job, b), cs in best.items() for c in cs)
    req = _request(args, layer, Path(args.work) / layout / "check",
                   (args.check_warmup_ms, args.check_rep_ms), batches=tuple(args.checked),
                   strategy="fast", trials=1, rounds=CHECK_ROUNDS, drop=0.0, given=given)
    print(f"[{layout}] picks re-timed with the recorded sweep's best at {args.checked}",
          file=sys.stderr, flush=True)
    return tune(req, _log(f"{layout} check")), best


def result(args: argparse.Namespace, layout: str, fast: Any, sweep: Any | None,
           recorded: dict[Any, list[Any]] | None = None) -> dict[str, Any]:
    from tilefit.tune.journal import active_seconds

    layer = layer_shape(layout, args.dtype, args.model)
    work = Path(args.work) / layout
    by_check = {(r.job, r.batch): r for r in (sweep.rows if sweep else [])}
    rows = []
    for r in fast.rows:
        row = r.as_dict()
        check = by_check.get((r.job, r.batch))
        if check is not None and r.config is not None:
            mine = next((f for f in check.finalists if f.config == r.config), None)
            if recorded is None:
                best = check.best_of("exhaustive")
            else:  # the recorded sweep's best few, re-timed in the same rounds as the pick
                swept = set(recorded.get((r.job, r.batch), ()))
                best = min((f for f in check.finalists if f.config in swept),
                           key=lambda f: f.rank_key, default=None)
            row["exhaustive_best_config"] = best.config.label() if best else None
            row["exhaustive_best_us"] = best.median_us if best else None
            row["pick_in_sweep_us"] = mine.median_us if mine else None
            row["pick_over_exhaustive"] = (mine.median_us / best.median_us
                                           if mine and best and best.median_us > 0 else None)
            if recorded is not None and mine is not None:  # every config ran every round
                row["pick_over_exhaustive_paired"] = paired_over(
                    list(mine.rounds_us), [list(f.rounds_us) for f in check.finalists
                                           if f.config in swept])
        if (args.grouped_mm and args.target != "fake" and args.dtype == "bf16"
                and r.batch in GROUPED_MM_AT):
            gm = grouped_mm_us(layer.with_gemm(r.job), r.batch, args.graph_max_batch)
            row["grouped_mm_us"] = gm
            row["speedup_over_grouped_mm"] = (gm / r.time_us if isinstance(gm, float)
                                              and r.time_us else None)
        rows.append(row)
    out: dict[str, Any] = {
        "model": args.model, "layout": layout, "dtype": args.dtype, "target": args.target,
        "device_name": args.device_name,
        "shape": layer.as_dict(), "compile_workers": args.compile_workers or os.cpu_count(),
        "ceilings": fast.ceilings.as_dict() if fast.ceilings else None,
        "fast_wall_s": fast.wall_s, "fast_s": active_seconds(work / "fast" / JOURNAL_NAME),
        "fast_compiles": _compiles(work / "fast" / JOURNAL_NAME),
        "model_bugs": [b.as_dict() for b in fast.model_bugs + (sweep.model_bugs if sweep else [])],
        "worker_restarts": fast.worker_restarts + (sweep.worker_restarts if sweep else 0),
        "gpu_own_compiles": fast.gpu_own_compiles,
        "checked": list(args.checked) if sweep else [], "rows": rows,
        "timing": "finalists re-timed in quiet, median of the rounds; batches <= "
                  f"{args.graph_max_batch}: CUDA-graph replays over weight copies touching 4x the "
                  "L2 size per pass; larger: do_bench (CUDA events per launch, L2 cleared)",
        "versions": _versions(), "block_scales": args.scales, "swap_ab": args.swap_ab,
    }
    if sweep is not None and recorded is not None:
        out["checked_against"] = "the recorded sweep's best 4 configs per row (" + args.against + ")"
    elif sweep is not None:
        path = work / "exhaustive" / JOURNAL_NAME
        per_batch = _seconds_by_batch(path)
        later = [v for b, v in per_batch.items() if b is not None and b != args.checked[0]]
        extra = len(set(args.batches) - set(args.checked))
        ex_s = active_seconds(path)
        out.update({
            "exhaustive_s": ex_s, "exhaustive_wall_s": sweep.wall_s,
            "exhaustive_compiles": _compiles(path),
            "exhaustive_s_by_batch": {str(b): v for b, v in per_batch.items()},
            # Compiles happen once (with the first checked batch); each further batch size
            # costs what a later checked batch cost.
            "exhaustive_extrapolated_s": ex_s + extra * (sum(later) / len(later) if later else 0.0),
        })
        out["fast_over_exhaustive_time"] = out["fast_s"] / out["exhaustive_extrapolated_s"]
    return out


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for pkg in ("torch", "triton"):
        try:
            found[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return found


def _seconds_by_batch(path: Path, max_gap_s: float = 120.0) -> dict[int | None, float]:
    """Journal working time per batch size (None: compiles): each gap between consecutive lines
    goes to the later line's batch."""
    from tilefit.tune.journal import read_entries
    from tilefit.tune.targets.base import MOE_SPACE

    out: dict[int | None, float] = {}
    previous = None
    for e in read_entries(path, MOE_SPACE.from_dict):
        if e.t is None:
            continue
        if previous is not None and 0 <= e.t - previous <= max_gap_s:
            out[e.batch] = out.get(e.batch, 0.0) + e.t - previous
        previous = e.t
    return out


def _compiles(path: Path) -> int:
    from tilefit.tune.journal import read_entries
    from tilefit.tune.targets.base import MOE_SPACE

    return sum(1 for e in read_entries(path, MOE_SPACE.from_dict) if e.batch is None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="glm-5",
                   help="catalog model whose per-GPU expert GEMMs to tune (default: %(default)s)")
    p.add_argument("--layouts", default="ep8,tp8")
    p.add_argument("--dtype", default=None, choices=("bf16", "fp8-block"),
                   help="default: what the model's weights are tuned as (tilefit tune's rule)")
    p.add_argument("--target", default="tilefit", choices=("tilefit", "fake"))
    p.add_argument("--grid", default="full", help="fake target only: full or distinct")
    p.add_argument("--gpu", default="h200", help="catalog GPU key (perf model, SMEM limits)")
    p.add_argument("--gpus", type=int, default=None, help="use at most this many local GPUs")
    p.add_argument("--device-name", default="NVIDIA H200")
    p.add_argument("--batches", type=lambda t: tuple(int(x) for x in t.split(",")), default=STANDARD)
    p.add_argument("--checked", type=lambda t: tuple(int(x) for x in t.split(",")), default=CHECKED)
    p.add_argument("--no-sweep", action="store_true", help="fast runs only")
    p.add_argument("--against", metavar="DIR",
                   help="no sweep: re-time the picks with the best configs of the recorded sweep "
                        "journals in DIR (LAYOUT_DTYPE_exhaustive.jsonl.gz; MODEL_LAYOUT_... for "
                        "a model other than GLM-5)")
    p.add_argument("--no-grouped-mm", dest="grouped_mm", action="store_false",
                   help="leave torch._grouped_mm out (repeat runs: it does not change)")
    p.add_argument("--cold-cache", action="store_true",
                   help="a fresh Triton cache for each fast run, so its compiles count in full")
    p.add_argument("--compile-workers", type=int, default=None)
    p.add_argument("--in-turns", action="store_true",
                   help="the fast run searches gemm1, then gemm2 (default: side by side)")
    # The fast run's budgets: `tilefit tune`'s own (the target's defaults), so the benchmark times
    # what the command runs; the check (--against) keeps session 4's 5+25 ms for both timings,
    # so the pick's quality is judged as before.
    from tilefit.tune.targets import tilefit_moe as moe
    p.add_argument("--warmup-ms", type=float, default=moe.WARMUP_MS)
    p.add_argument("--rep-ms", type=float, default=moe.REP_MS)
    p.add_argument("--graph-ms", type=float, default=moe.GRAPH_MS)
    p.add_argument("--check-warmup-ms", type=float, default=5.0)
    p.add_argument("--check-rep-ms", type=float, default=25.0)
    p.add_argument("--probe-warmup-ms", type=float, default=moe.PROBE_WARMUP_MS,
                   help="search timings (fast and exhaustive alike); finalists use --warmup-ms/--rep-ms")
    p.add_argument("--probe-rep-ms", type=float, default=moe.PROBE_REP_MS)
    p.add_argument("--probe-graph-ms", type=float, default=moe.PROBE_GRAPH_MS,
                   help="a search timing's graph replay budget")
    p.add_argument("--probe-launches", type=int, default=moe.PROBE_GRAPH_LAUNCHES,
                   help="launches in a search timing's CUDA graph (the finalists' graphs keep 24)")
    p.add_argument("--no-interleave", dest="interleave", action="store_false",
                   help="re-timing rounds (the fast run's and the check's) time their finalists "
                        "one after the other, not in turns launch by launch (TuneRequest.interleave)")
    p.add_argument("--trace", action="store_true",
                   help="the fast run's pools write a JSON line per request to WORK/LAYOUT/"
                        "fast-trace.jsonl (wait and run time of every compile and GPU request)")
    p.add_argument("--split-at", type=int, default=1024,
                   help="the fast run searches the batch sizes from here up as a segment of their "
                        "own, beside the smaller ones (0: one segment, as before session 6)")
    p.add_argument("--graph-max-batch", type=int, default=moe.GRAPH_MAX_BATCH)
    p.add_argument("--scales", default="column", choices=("column", "row"),
                   help="fp8-block weight scales per column (vLLM's kernel) or per row where a "
                        "tile's columns share one (SGLang's)")
    p.add_argument("--swap-ab", action="store_true",
                   help="fp8 tiles with BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64 computed as B^T A^T "
                        "(vLLM >= 0.25 and SGLang on sm90)")
    p.add_argument("--work", default=".cache/bench_tune")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--out-dir", default="benchmarks/results")
    p.add_argument("--tag", default="v3")
    p.add_argument("--summarize", nargs="+", metavar="JSON")
    p.add_argument("--refloor", nargs="+", metavar="JSON")
    p.add_argument("--rebuild", metavar="WORK", help="write the result file of a finished run from "
                   "its --work folder (with --layouts, --dtype, --against, --tag); no GPU")
    args = p.parse_args()
    if args.dtype is None:
        from tilefit.models import load_model
        from tilefit.tune.targets.base import tune_dtype

        try:
            args.dtype = tune_dtype(None, load_model(args.model).weights.name, args.model)
        except Exception as e:  # noqa: BLE001 - an unknown model, weights with no kernel here
            p.error(f"--model {args.model}: {e}")
        if args.dtype not in ("bf16", "fp8-block"):
            p.error(f"--model {args.model} is tuned as {args.dtype}; give --dtype bf16 or fp8-block")
    if args.rebuild:
        if not args.against:
            p.error("--rebuild needs --against DIR: the recorded sweeps the run's check was "
                    "judged against")
        for layout in args.layouts.split(","):
            try:
                data = rebuild(args.rebuild, layout, args.dtype, args.against, args.tag,
                               args.model)
            except FileNotFoundError as e:  # one line, not a traceback: a wrong folder is a usage error
                p.error(f"--rebuild: {e.filename} not found (WORK is a bench_tune --work folder, "
                        f"with {layout}/fast/tune_summary.json; --against holds the sweeps' journals)")
            print(_write(args, layout, data))
        return
    if args.refloor:
        for path in args.refloor:
            refloor(path)
        return
    if args.summarize:
        print(summarize(args.summarize))
        return
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    for layout in layouts:  # a layout the model cannot take fails here, before any GPU work
        try:
            layer_shape(layout, args.dtype, args.model)
        except Exception as e:  # noqa: BLE001 - UsageError, ValueError, an unknown model
            p.error(f"--model {args.model} --layouts {layout}: {e}")
        sweep = sweep_journal(args.against, args.model, layout, args.dtype) if args.against else None
        if sweep is not None and not sweep.is_file():  # found out after the fast run otherwise
            p.error(f"--against {args.against}: no recorded sweep {sweep.name} for {args.model} "
                    f"{layout} {args.dtype} (leave out --against to sweep in this run)")
    fast = {}
    paths = []
    for layout in layouts:
        fast[layout] = fast_run(args, layout)
        paths.append(_write(args, layout, result(args, layout, fast[layout], None)))
    if args.against:
        for layout in layouts:
            check, recorded = check_run(args, layout, fast[layout])
            _write(args, layout, result(args, layout, fast[layout], check, recorded))
    elif not args.no_sweep:
        for layout in layouts:
            sweep = sweep_run(args, layout, fast[layout])
            _write(args, layout, result(args, layout, fast[layout], sweep))
    print(summarize([str(p) for p in paths]))


def _write(args: argparse.Namespace, layout: str, data: dict[str, Any]) -> Path:
    out = Path(args.out_dir) / f"{result_stem(args.model, layout, args.dtype, args.tag)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, out)
    return out


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"bench_tune: {time.time() - t0:.1f} s", file=sys.stderr)
