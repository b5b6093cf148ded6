"""Benchmark of `tilefit tune` on a GPU: GLM-5 per-GPU shapes (EP8 and TP8), gemm1 and gemm2, our
kernel, the 18 standard batch sizes.

One invocation tunes one layout twice, in two fresh folders: (a) the fast strategy over all batch
sizes (its wall time is the tuning cost), (b) the exhaustive sweep at the checked batch sizes
(default 1, 64, 1024, 4096). The fast pick is judged inside (b): the sweep times the fast pick's
config too, so "within 2%" compares two numbers of the same sweep. Then, in this process: the
roofline floor from MEASURED copy bandwidth and bf16 matmul rate, and torch._grouped_mm on the
same (expert-sorted) rows. Timing: triton.testing.do_bench (CUDA events around each launch, L2
cleared before each, median), so launch overhead is inside every kernel time.

  python benchmarks/bench_tune.py --layout ep8 --out benchmarks/results/tune_glm5_ep8.json
  python benchmarks/bench_tune.py --layout tp8 --out benchmarks/results/tune_glm5_tp8.json
  python benchmarks/bench_tune.py --summarize benchmarks/results/tune_glm5_*.json
Each run journals every measurement: under a per-command time limit, give --work DIR and rerun
with --resume until it completes. Wall times then cover the last piece only; the journals'
line timestamps give each phase's working time across pieces ("*_journal_active_s").
`--target fake` runs the same flow on a CPU with the fake target (a dry run of the script).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tilefit.tune.targets.registry import STANDARD_BATCHES as STANDARD
from tilefit.tune.run import JOURNAL as JOURNAL_NAME

CHECKED = (1, 64, 1024, 4096)
GROUPED_MM_AT = (1, 16, 64, 256, 1024, 4096)


def layer_shape(layout: str, dtype: str) -> Any:
    from tilefit.layout import Layout, plan_layer
    from tilefit.models import load_model
    from tilefit.tune.targets.base import TuneShape

    model = load_model("glm-5")
    lay = Layout(tp=8) if layout == "tp8" else Layout(ep=8)
    plan = plan_layer(model, lay)
    return TuneShape("gemm1", plan.local_experts, model.hidden_size, model.expert_width // lay.tp,
                     model.top_k, dtype, model.num_experts)


def measured_device(gpu_key: str, dtype: str) -> tuple[Any, dict[str, float]]:
    """Device figures for the floor: measured copy bandwidth and bf16 matmul rate on this GPU."""
    import torch
    from triton.testing import do_bench

    from tilefit.hw.catalog import get_gpu
    from tilefit.tune.perfmodel import Device

    base = Device.from_gpu(get_gpu(gpu_key), dtype)
    bw = _copy_bandwidth(torch, do_bench)
    flops = _matmul_rate(torch, do_bench)
    torch.cuda.empty_cache()
    dev = Device(base.name, base.sm_count, bw, flops, base.smem_per_sm, base.max_threads_per_sm,
                 base.regs_per_sm)
    return dev, {"copy_bandwidth_gbps": bw / 1e9, "bf16_matmul_tflops": flops / 1e12}


def _copy_bandwidth(torch: Any, do_bench: Any) -> float:
    """Bytes/s of a 1 GiB device-to-device copy (read + write)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
    return 2 * src.numel() / (ms * 1e-3)


def _matmul_rate(torch: Any, do_bench: Any) -> float:
    """Flop/s of an 8192^3 bf16 matmul."""
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    ms = do_bench(lambda: a @ b, warmup=25, rep=200, return_mode="median")
    return 2 * 8192 ** 3 / (ms * 1e-3)


def grouped_mm_us(shape: Any, batch: int, seed: int = 0) -> float | str:
    """torch._grouped_mm on the same routing, rows already sorted by expert (gather excluded)."""
    import torch
    from triton.testing import do_bench

    from tilefit.tune.targets.tilefit_moe import routing

    ids = routing(shape, batch, seed)[0].reshape(-1).long()
    counts = torch.bincount(ids[ids >= 0], minlength=shape.experts)
    n, k = shape.nk
    rows = int(counts.sum())
    a = torch.randn(max(rows, 1), k, dtype=torch.bfloat16, device="cuda")[:rows]
    b = torch.randn(shape.experts, n, k, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
    offs = torch.cumsum(counts, 0).to(torch.int32).cuda()
    try:
        torch._grouped_mm(a, b, offs=offs, out_dtype=torch.bfloat16)
        ms = do_bench(lambda: torch._grouped_mm(a, b, offs=offs, out_dtype=torch.bfloat16),
                      warmup=10, rep=50, return_mode="median")
    except Exception as e:  # record why, keep the benchmark going
        return f"{type(e).__name__}: {e}"[:300]
    return 1000.0 * ms


def run_layout(args: argparse.Namespace) -> dict[str, Any]:
    from tilefit.tune.journal import active_seconds
    from tilefit.tune.run import TuneRequest, tune
    from tilefit.tune.targets.base import TargetSpec
    from tilefit.tune.workers import default_compile_workers

    layer = layer_shape(args.layout, args.dtype)
    jobs = tuple(args.jobs.split(","))
    if args.target == "fake":
        spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", gpu=args.gpu, jobs=jobs)
        device_name, devices = "fake", (None,)
    else:
        import torch

        gpu = torch.cuda.is_available()
        if not gpu and not args.from_journals:
            sys.exit("bench_tune.py needs a CUDA GPU (or --target fake for a CPU dry run, or "
                     "--from-journals to summarise a finished run's journals)")
        device_name = torch.cuda.get_device_name(0) if gpu else args.device_name
        spec = TargetSpec.of("tilefit.tune.targets.tilefit_moe:TilefitMoETarget", gpu=args.gpu,
                             jobs=jobs, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms)
        devices = tuple(range(torch.cuda.device_count()))[: args.gpus] if gpu else \
            tuple(range(args.gpus or 1))
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix=f"bench_tune_{args.layout}_"))
    if args.from_journals:  # replay a copy: a journal this code cannot replay must stay untouched
        import shutil

        copy = Path(tempfile.mkdtemp(prefix="bench_tune_replay_")) / work.name
        shutil.copytree(work, copy)
        lines = {p: p.read_bytes().count(b"\n") for p in copy.rglob(JOURNAL_NAME)}
        work = copy
    common = dict(gpu=args.gpu, device_name=device_name, resume=args.resume,
                  compile_workers=args.compile_workers or default_compile_workers(),
                  devices=devices, compile_timeout_s=300.0, run_timeout_s=120.0)
    log = (lambda e, d: print(f"  {d['job']} batch {d['batch']}: {d['config']} "
                              f"{d['time_us'] or 0:.2f} us, {d['trials']} trials, "
                              f"{d['search_s']:.1f} s", file=sys.stderr, flush=True)
           if e == "row" else None)
    print(f"[{args.layout}] fast strategy, {len(args.batches)} batch sizes", file=sys.stderr)
    from tilefit.tune.strategies import parse_option_text

    fast = tune(TuneRequest(spec, (layer,), tuple(args.batches), work / "fast", strategy="fast",
                            options=parse_option_text(args.strategy_option), **common), log)
    print(f"[{args.layout}] exhaustive at {args.checked}", file=sys.stderr)
    exhaustive = tune(TuneRequest(spec, (layer,), tuple(args.checked), work / "exhaustive",
                                  strategy="exhaustive", **common), log)
    if args.from_journals:
        grown = [str(p) for p, n in lines.items() if p.read_bytes().count(b"\n") != n]
        if grown:
            sys.exit(f"--from-journals: replaying needed new measurements ({', '.join(grown)}): "
                     f"this code does not retrace that run (strategy options?)")
    ex_rows = {(r.job, r.batch): r for r in exhaustive.rows}
    ex_measured = _journal_times(work / "exhaustive" / JOURNAL_NAME)

    dev, figures = (None, {}) if args.target == "fake" or args.from_journals else \
        measured_device(args.gpu, args.dtype)
    rows = []
    for r in fast.rows:
        shape = layer.with_gemm(r.job)
        row = r.as_dict()
        if dev is not None:
            from tilefit.tune.perfmodel import floor_us

            row["floor_us_measured"] = floor_us(shape, r.batch, dev)
            row["pct_of_floor_measured"] = (100.0 * row["floor_us_measured"] / r.time_us
                                            if r.time_us else None)
            if r.batch in GROUPED_MM_AT:
                gm = grouped_mm_us(shape, r.batch)
                row["grouped_mm_us"] = gm
                row["speedup_over_grouped_mm"] = (gm / r.time_us if isinstance(gm, float)
                                                  and r.time_us else None)
        ex = ex_rows.get((r.job, r.batch))
        if ex is not None and row["config_dict"]:
            same_sweep = ex_measured.get((shape.key(), r.batch, _ck(row["config_dict"])))
            row["exhaustive_best_us"] = ex.time_us
            row["exhaustive_best_config"] = ex.config.label() if ex.config else None
            row["exhaustive_time_of_fast_pick_us"] = same_sweep
            row["fast_over_exhaustive"] = (same_sweep / ex.time_us if same_sweep and ex.time_us
                                           else None)
            row["exhaustive_search_s"] = ex.search_s
            row["exhaustive_trials"] = ex.trials
        rows.append(row)
    ex_s = sum(r.search_s for r in exhaustive.rows)
    checked_jobs = len(exhaustive.rows)
    # Times come from the journals' line stamps (active_seconds), so that a run finished over
    # several --resume pieces reports its working time, not the last piece's wall time.
    fast_s = active_seconds(work / "fast" / JOURNAL_NAME)
    ex_active = active_seconds(work / "exhaustive" / JOURNAL_NAME)
    # Extrapolate the sweep to every batch size: compiles happen once (with the first checked
    # batch), so each further batch size costs what a later checked batch cost.
    per_batch = _seconds_by_batch(work / "exhaustive" / JOURNAL_NAME)
    later = [v for b, v in per_batch.items() if b is not None and b != args.checked[0]]
    extra = len(set(args.batches) - set(args.checked))
    extrapolated = ex_active + extra * (sum(later) / len(later) if later else 0.0)
    return {
        "layout": args.layout, "dtype": args.dtype, "target": args.target,
        "strategy_options": args.strategy_option or [],
        "shape": layer.as_dict(), "device_name": device_name, "devices": list(map(str, devices)),
        "compile_workers": common["compile_workers"], "measured_device": figures,
        "resumed_entries": {"fast": fast.resumed_entries, "exhaustive": exhaustive.resumed_entries},
        "fast_compiles": _compiles(work / "fast" / JOURNAL_NAME),
        "exhaustive_compiles": _compiles(work / "exhaustive" / JOURNAL_NAME),
        "fast_journal_active_s": fast_s,
        "exhaustive_journal_active_s": ex_active,
        "fast_wall_s": fast.wall_s, "fast_search_s": sum(r.search_s for r in fast.rows),
        "exhaustive_wall_s": exhaustive.wall_s, "exhaustive_search_s": ex_s,
        "exhaustive_checked_jobs": checked_jobs,
        "fast_s": fast_s, "exhaustive_s": ex_active,
        "exhaustive_s_by_batch": {str(b): v for b, v in per_batch.items()},
        "exhaustive_extrapolated_all_batches_s": extrapolated,
        "fast_over_exhaustive_time": fast_s / extrapolated if extrapolated else None,
        "smem_failures_in_benchmark_loop": len(fast.model_bugs) + len(exhaustive.model_bugs),
        "model_bugs": [b.as_dict() for b in fast.model_bugs + exhaustive.model_bugs],
        "worker_restarts": fast.worker_restarts + exhaustive.worker_restarts,
        "timing": "triton.testing.do_bench median, CUDA events around each launch (launch "
                  "overhead included), L2 cleared before each launch; alignment outside timing",
        "rows": rows, "work_dir": str(work),
    }


def _seconds_by_batch(path: Path, max_gap_s: float = 120.0) -> dict[int | None, float]:
    """Journal working time per batch size (None: compiles): each gap between consecutive lines
    goes to the later line's batch."""
    from tilefit.tune.journal import read_entries

    out: dict[int | None, float] = {}
    previous = None
    for e in read_entries(path):
        if e.t is None:
            continue
        if previous is not None and 0 <= e.t - previous <= max_gap_s:
            out[e.batch] = out.get(e.batch, 0.0) + e.t - previous
        previous = e.t
    return out


def _ck(config: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(config.items()))


def _journal_times(path: Path) -> dict[Any, float]:
    from tilefit.tune.journal import read_entries
    from tilefit.tune.results import Ok

    return {(e.shape, e.batch, _ck(e.config.as_dict())): e.result.time_us for e in read_entries(path)
            if e.batch is not None and isinstance(e.result, Ok) and not e.shape.startswith("check:")}


def _compiles(path: Path) -> int:
    """Configs the run compiled (one journal line each, batch null)."""
    from tilefit.tune.journal import read_entries

    return sum(1 for e in read_entries(path) if e.batch is None)


def summarize(paths: list[str]) -> str:
    out = []
    for p in paths:
        d = json.loads(Path(p).read_text())
        out.append(f"## GLM-5 {d['layout'].upper()} {d['dtype']} on {d['device_name']} "
                   f"({d['compile_workers']} compile workers, GPUs {','.join(d['devices'])})")
        out.append("")
        f = d.get("measured_device") or {}
        if f:
            out.append(f"Measured: copy {f['copy_bandwidth_gbps']:,.0f} GB/s, bf16 matmul "
                       f"{f['bf16_matmul_tflops']:,.0f} TFLOP/s. {d['timing']}.")
        out.append(f"Fast strategy, all {len({r['batch'] for r in d['rows']})} batch sizes x "
                   f"{len({r['job'] for r in d['rows']})} GEMMs: {d['fast_s']:,.1f} s. Exhaustive sweep at the checked batches: "
                   f"{d['exhaustive_s']:,.1f} s; extrapolated to every batch size "
                   f"{d['exhaustive_extrapolated_all_batches_s']:,.1f} s; fast/exhaustive time "
                   f"{100 * (d['fast_over_exhaustive_time'] or 0):.1f}%. Compiles: fast "
                   f"{d['fast_compiles']}, exhaustive {d['exhaustive_compiles']}. Shared-memory launch "
                   f"failures reaching the benchmark loop: {d['smem_failures_in_benchmark_loop']}.")
        out.append("")
        out.append("| gemm | batch | config | us | % floor | default us | speedup | trials | "
                   "exhaustive best us | fast/exh | grouped_mm us | x grouped_mm |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in d["rows"]:
            def f2(v: Any, fmt: str = "{:.2f}") -> str:
                return "-" if v is None or isinstance(v, str) else fmt.format(v)
            out.append(f"| {r['job']} | {r['batch']} | {r['config']} | {f2(r['time_us'])} | "
                       f"{f2(r.get('pct_of_floor_measured', r['pct_of_floor']), '{:.1f}')} | "
                       f"{f2(r['default_us'])} | {f2(r['speedup_over_default'])} | {r['trials']} | "
                       f"{f2(r.get('exhaustive_best_us'))} | {f2(r.get('fast_over_exhaustive'), '{:.4f}')} | "
                       f"{f2(r.get('grouped_mm_us'))} | {f2(r.get('speedup_over_grouped_mm'))} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layout", choices=("ep8", "tp8"), default="ep8")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp8"))
    p.add_argument("--target", default="tilefit", choices=("tilefit", "fake"))
    p.add_argument("--gpu", default="h200", help="catalog GPU key (perf model, SMEM limits)")
    p.add_argument("--gpus", type=int, default=None, help="use at most this many local GPUs")
    p.add_argument("--batches", type=lambda t: tuple(int(x) for x in t.split(",")), default=STANDARD)
    p.add_argument("--checked", type=lambda t: tuple(int(x) for x in t.split(",")), default=CHECKED)
    p.add_argument("--compile-workers", type=int, default=None)
    p.add_argument("--jobs", default="gemm1,gemm2", help="GEMMs to tune (comma-separated)")
    p.add_argument("--warmup-ms", type=float, default=10.0, help="do_bench warm-up per config")
    p.add_argument("--rep-ms", type=float, default=40.0, help="do_bench repetition time per config")
    p.add_argument("--work", help="folder for the two runs' journals (default: a new temp folder); "
                                  "with --resume a killed benchmark continues where it stopped")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--from-journals", action="store_true",
                   help="with --resume --work DIR of a finished run: rebuild the results from its "
                        "journals alone (no GPU; no measured floor or grouped_mm columns)")
    p.add_argument("--device-name", default="NVIDIA H200", help="with --from-journals")
    p.add_argument("--strategy-option", action="append", metavar="NAME=VALUE",
                   help="fast-strategy option, repeatable (e.g. seeded_fraction=0.03)")
    p.add_argument("--out", help="results JSON file")
    p.add_argument("--summarize", nargs="+", metavar="JSON")
    args = p.parse_args()
    if args.summarize:
        print(summarize(args.summarize))
        return
    if not args.out:
        p.error("--out is required unless --summarize")
    t0 = time.time()
    data = run_layout(args)
    data["script_wall_s"] = time.time() - t0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, out)
    print(summarize([str(out)]))


if __name__ == "__main__":
    main()
