"""A fast tuning run replayed offline on the H200 measurements of issue 17: what a change to the
fast strategy, the re-timing or the prefetching would pick and cost, with no GPU.

Landscape, per GEMM and batch size: the v3 exhaustive sweeps' timings where they swept (every
fitting config at batch 1, 64, 1024, 4096: benchmarks/results/tune_v3_journals) and the session 4
fast runs' search timings elsewhere (about 58 configs at every batch size: tune_v4); a config
neither measured is the nearest swept batch's timing scaled by the median ratio of the configs
measured at both. The fast strategy searches it as `tune` did in session 5 (seeds from the nearest
batch sizes' picks, the default, `warm` = configs tried earlier): one segment per GEMM, a compile
per config (not session 6's two segments, tune/schedule.py, nor one compile per compile key).

Cost, calibrated on the session 4 journals (same GPU, 16 compile workers): every search call
(a chunk of configs) costs its probe timings (the journals' median gap between two probe lines at
that batch size) and, when a config in it is not compiled yet, one compile latency before that
config's probe; the spare compile workers prefetch the model's ranking in the background except
while finalists are re-timed; re-timing costs the rounds' timings (the journals' median gap between
two re-timing lines, less the 30 ms budget they ran with, plus the budget asked for) counted on the
session 4 run's own finalists and rounds (finalists.py's drop rule replayed on them). Side by
side (run.py): the two GEMMs' sequences of searches and re-timings share the one GPU, and a
re-timing stalls the other GEMM's compile waits. Hints (the strategy's next chunk, compiled while
this one runs): compiled by the time the chunk ends when it waited on a compile. Not modelled: the CPU contention of more
compiles at once (pass a larger --compile-s to see its effect).

  python benchmarks/tune_replay.py                   # every variant, every recorded layout
  python benchmarks/tune_replay.py --layouts ep8_bf16 --variants v4,together
  python benchmarks/tune_replay.py --retime          # re-timing settings on the recorded rounds
Pick quality: the pick over the sweep's best at the swept batch sizes (the landscape there is
every fitting config's real timing). Time: seconds of journal working time, as bench_tune reports.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tune_results import layer_shape  # benchmarks/: the script's own folder

RESULTS = Path(__file__).resolve().parent / "results"
V4_RUNS = {"ep8_bf16": 3, "tp8_bf16": 3, "ep8_fp8-block": 2}  # session 4's fast runs
V4_BUDGET_MS = 30.0  # the re-timing budget (do_bench 5+25 ms, graph replays for 30 ms) of v4


@dataclass(frozen=True)
class Variant:
    """What a run would do differently: the fast strategy's options, the re-timing, prefetching."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    rounds: int = 3
    drop: float = 0.03
    drop_from: int = 0  # the first round after which finalists behind leave (0: the first)
    budget_ms: float = 12.0  # re-timing budget per timing
    prefetch: float = 0.10  # fraction of each GEMM's fitting configs prefetched
    prefetch_ahead: bool = False  # every GEMM's prefetch starts with the layer, not with the GEMM
    together: bool = False  # the GEMMs' searches run side by side (run.py), re-timings one at a time
    hints: bool = False  # the fast strategy's next chunk compiled while this one runs


VARIANTS = {v.name: v for v in (
    Variant("v4", rounds=5, drop_from=1, budget_ms=30.0),  # session 4's runs
    Variant("rounds3", budget_ms=30.0),  # 3 rounds, drop from the first
    Variant("budget12"),  # ... on a 12 ms re-timing budget (do_bench 2+10 ms)
    Variant("together", prefetch_ahead=True, together=True),  # ... GEMMs side by side
    Variant("hints", prefetch_ahead=True, together=True, hints=True),  # ... search hints: today's
    Variant("together30", budget_ms=30.0, prefetch_ahead=True, together=True),
    # Not taken (see benchmarks/RESULTS.md): more prefetching, a stronger preference for compiled
    # configs, the patience stop.
    Variant("prefetch20", prefetch=0.2, prefetch_ahead=True, together=True, hints=True),
    Variant("margin25", options={"cold_margin": 0.25}, prefetch_ahead=True, together=True, hints=True),
    Variant("patience2", options={"patience": 2}, prefetch_ahead=True, together=True, hints=True),
)}


def _entries(path: Path) -> Iterator[Any]:
    from tilefit.tune.journal import read_entries
    from tilefit.tune.targets.base import MOE_SPACE

    with tempfile.NamedTemporaryFile(suffix=".jsonl") as tmp:
        tmp.write(gzip.decompress(path.read_bytes()))
        tmp.flush()
        yield from read_entries(tmp.name, MOE_SPACE.from_dict)


def _kind(e: Any) -> str:
    if e.batch is None:
        return "compile"
    head = e.shape.split(":")[0]
    return "retime" if head.startswith("retime") else "check" if head == "check" else "probe"


class Recorded:
    """One layout's measurements: landscapes, per-batch timing costs, session 4's finalists."""

    def __init__(self, run: str):
        layout, dtype = run.split("_", 1)
        self.run, self.dtype = run, dtype
        self.layer = layer_shape(layout, dtype)
        sweep = RESULTS / "tune_v3_journals" / f"{layout}_{dtype.replace('-block', '')}_exhaustive.jsonl.gz"
        self.swept: dict[tuple[str, int], dict[Any, float]] = {}
        for e in _entries(sweep):
            if _kind(e) == "probe" and hasattr(e.result, "time_us"):
                self.swept.setdefault((e.shape.split(":")[0], e.batch), {})[e.config] = e.result.time_us
        probed: dict[tuple[str, int], dict[Any, list[float]]] = {}
        gaps: dict[tuple[str, int], list[float]] = {}
        for r in range(1, V4_RUNS[run] + 1):
            lines = list(_entries(RESULTS / "tune_v4" / f"{run}_r{r}_fast.jsonl.gz"))
            for a, b in zip(lines, lines[1:]):
                if _kind(a) == _kind(b) in ("probe", "retime") and a.batch == b.batch:
                    gaps.setdefault((_kind(b), b.batch), []).append(b.t - a.t)
            for e in lines:
                if _kind(e) == "probe" and hasattr(e.result, "time_us"):
                    job = e.shape.split(":")[0]
                    probed.setdefault((job, e.batch), {}).setdefault(e.config, []).append(e.result.time_us)
        self.searched = {job: {c for (j, _), d in self.swept.items() if j == job for c in d}
                         for job in ("gemm1", "gemm2")}
        self.probed = {k: {c: statistics.median(v) for c, v in d.items()} for k, d in probed.items()}
        self.cost_s = {k: statistics.median(v) for k, v in gaps.items()}
        self.rows = {(r["job"], r["batch"]): r["finalists"] for r in json.loads(
            (RESULTS / "tune_v4" / f"{run}_r1.json").read_text())["rows"]}

    def landscape(self, job: str, batch: int) -> dict[Any, float]:
        """Every config's timing at (job, batch): the sweep's where swept, else the search
        timings and the nearest swept batch scaled to them."""
        if (job, batch) in self.swept:
            return self.swept[(job, batch)]
        mine = self.probed.get((job, batch), {})
        near = min((b for j, b in self.swept if j == job), key=lambda b: abs(math.log(b / batch)))
        base = self.swept[(job, near)]
        ratios = [t / base[c] for c, t in mine.items() if c in base]
        scale = statistics.median(ratios) if ratios else 1.0
        return {**{c: t * scale for c, t in base.items()}, **mine}

    def probe_s(self, batch: int) -> float:
        return self.cost_s[("probe", batch)]

    def retime_s(self, batch: int, budget_ms: float) -> float:
        return max(self.probe_s(batch), self.cost_s[("retime", batch)] - (V4_BUDGET_MS - budget_ms) / 1e3)


def replay_rounds(finalists: list[dict[str, Any]], rounds: int, drop: float, drop_from: int = 0
                  ) -> tuple[str, int]:
    """(pick, timings) of re-timing one recorded row's finalists (bench results' "finalists")
    for `rounds` with finalists.py's rule: after round `drop_from` (0: the first) and each later
    one, a finalist whose fastest round is `drop` behind the leading median leaves; the pick is
    the best median of those still in. (A finalist that left session 4's rounds leaves here too
    when its recorded rounds run out.)"""
    live = [f["config"] for f in finalists]
    times: dict[str, list[float]] = {c: [] for c in live}
    by = {f["config"]: f["rounds_us"] for f in finalists}
    count = 0
    for r in range(rounds):
        if all(r >= len(by[c]) for c in live):  # session 4's rounds ended here: one was left
            break
        for c in live:
            count += 1
            if r < len(by[c]):
                times[c].append(by[c][r])
        live = [c for c in live if len(times[c]) == r + 1]
        if drop > 0 and r >= drop_from and live:
            lead = min(statistics.median(times[c]) for c in live)
            live = [c for c in live if min(times[c]) <= (1 + drop) * lead]
        if len(live) <= 1:
            break
    return min(live, key=lambda c: (statistics.median(times[c]), c)), count


def paired_ratio(a: list[float], b: list[float]) -> float:
    """a over b in the rounds both ran (the median of the per-round ratios): a GPU that warms up
    over the rounds slows both alike."""
    return statistics.median(x / y for x, y in zip(a, b))


RETIMINGS = ((5, 0.03, 1), (5, 0.03, 0), (3, 0.03, 1), (3, 0.03, 0), (3, 0.05, 0), (3, 0.02, 0),
             (2, 0.03, 0), (1, 0.0, 0))


def retime_table() -> None:
    """Each re-timing setting replayed on every row of session 4's eight runs: timings, and the
    pick against every finalist in the rounds both ran (all five recorded rounds)."""
    rows = [row for run, n in V4_RUNS.items() for r in range(1, n + 1) for row in json.loads(
        (RESULTS / "tune_v4" / f"{run}_r{r}.json").read_text())["rows"]]
    full = sum(replay_rounds(row["finalists"], 5, 0.03, 1)[1] for row in rows)
    recorded = [max(paired_ratio(by[row["config"]], rounds) for rounds in by.values())
                for row in rows for by in [{f["config"]: f["rounds_us"] for f in row["finalists"]}]]
    print(f"{len(rows)} rows; session 4 (5 rounds, drop 3% from round 2, the best median of all "
          f"finalists, those that left included): {full} timings, picks beyond 0.5% of a finalist: "
          f"{sum(r > 1.005 for r in recorded)}, worst {max(recorded):.4f}")
    for rounds, drop, drop_from in RETIMINGS:
        worst, over, count = 1.0, 0, 0
        for row in rows:
            pick, n = replay_rounds(row["finalists"], rounds, drop, drop_from)
            count += n
            by = {f["config"]: f["rounds_us"] for f in row["finalists"]}
            ratio = max(paired_ratio(by[pick], by[c]) for c in by)
            worst, over = max(worst, ratio), over + (ratio > 1.005)
        print(f"  {rounds} rounds, drop {drop:.0%} from round {drop_from + 1}: {count} timings "
              f"({count / full:.0%}), picks beyond 0.5% of a finalist: {over}, worst {worst:.4f}")


@dataclass
class Clock:
    """The run's journal working time, by where it went, and the compile workers' state."""

    compile_s: float  # one cold compile's latency
    spare: int = 8  # compile workers that prefetch
    search_s: float = 0.0
    wait_s: float = 0.0  # of search_s: waiting on compiles
    retime_s: float = 0.0
    compiled: set[Any] = field(default_factory=set)
    queue: list[Any] = field(default_factory=list)  # prefetch order
    credit: float = 0.0  # prefetch compiles' progress (configs)
    compiles: int = 0
    hinted: list[Any] = field(default_factory=list)  # compiling while the next search call runs
    rows: list[tuple[str, int, float]] = field(default_factory=list)  # (job, batch, search s)
    # Per job, in order: ("search", compile wait s, GPU s) per search call, ("retime", 0, GPU s).
    segments: dict[str, list[tuple[str, float, float]]] = field(
        default_factory=lambda: {"gemm1": [], "gemm2": []})

    def advance(self, seconds: float) -> None:
        """Search time passes: the spare workers prefetch meanwhile."""
        self.credit += seconds * self.spare / self.compile_s
        while self.queue and self.credit >= 1:
            c = self.queue.pop(0)
            if c not in self.compiled:
                self.compiled.add(c)
                self.compiles += 1
                self.credit -= 1
        if not self.queue:
            self.credit = 0.0


def concurrent_s(pipelines: list[list[tuple[str, float, float]]], dt: float = 0.002) -> float:
    """Seconds for the GEMMs' pipelines run side by side: one GPU shared by the timings of both
    (fluid: two pipelines wanting it get half each), and a re-timing holds every compile back
    (the other pipeline's compile waits stall) and waits for the other's re-timing to end. It
    starts at once: local compile workers in flight are paused (evaluator.quiet), not waited on."""
    todo = [list(p) for p in pipelines]
    now = 0.0
    while any(todo):
        heads = [p[0] if p else None for p in todo]
        retiming = [h is not None and h[0] == "retime" for h in heads]
        quiet = None
        for i, r in enumerate(retiming):  # the first pipeline in a re-timing holds the quiet
            if r:
                quiet = i
                break
        gpu_users = [i for i, h in enumerate(heads) if h is not None and h[1] <= 0
                     and (h[0] != "retime" or i == quiet)]
        for i, h in enumerate(heads):
            if h is None:
                continue
            kind, wait, gpu = h
            if kind == "search" and wait > 0:
                if quiet is None or quiet == i:
                    todo[i][0] = (kind, max(0.0, wait - dt), gpu)
            elif i in gpu_users:
                gpu -= dt / len(gpu_users)
                todo[i][0] = (kind, wait, gpu)
                if gpu <= 0:
                    todo[i].pop(0)
        now += dt
    return now


def simulate(rec: Recorded, variant: Variant, compile_s: float) -> dict[str, Any]:
    from tilefit.hw.catalog import get_gpu
    from tilefit.tune import perfmodel
    from tilefit.tune.evaluator import Predictions
    from tilefit.tune.results import LaunchFailed, Ok
    from tilefit.tune.strategies import get_strategy, make_options
    from tilefit.tune.strategies.base import Budget, SearchSpace
    from tilefit.tune.targets.registry import STANDARD_BATCHES
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    target = TilefitMoETarget(gpu="h200")
    fast = get_strategy("fast")
    options = make_options(fast, variant.options)
    dev = perfmodel.Device.from_gpu(get_gpu("h200"), rec.dtype)
    clock = Clock(compile_s)
    jobs = {}
    for job in target.jobs:
        shape = rec.layer.with_gemm(job)
        # The space session 4 searched: the configs its sweep timed (the fp8-block grid has grown
        # since; a config the sweep never saw has no timing to replay).
        fitting = [c for c in target.space(shape) if target.fit_reason(c, shape) is None
                   and c in rec.searched[job]]
        model = Predictions(target, shape, dev)
        rankings = [sorted(fitting, key=lambda c, p=model.at(b): (p(c), c)) for b in STANDARD_BATCHES]
        order = list(dict.fromkeys(c for turn in zip(*rankings) for c in turn))
        jobs[job] = (shape, fitting, model, order[:int(variant.prefetch * len(fitting))])
    if variant.prefetch_ahead:
        clock.queue = [(job, c) for job in target.jobs for c in jobs[job][3]]
    worst: dict[str, float] = {}
    trials = 0
    for job in target.jobs:
        shape, fitting, model, ahead = jobs[job]
        if not variant.prefetch_ahead:
            clock.queue = [(job, c) for c in ahead]
        winners: dict[int, Any] = {}
        tried: set[Any] = set()
        for batch in STANDARD_BATCHES:
            land = rec.landscape(job, batch)
            probe = rec.probe_s(batch)

            def evaluate(configs: Any, _land: dict[Any, float] = land, _probe: float = probe) -> list[Any]:
                cold = [c for c in configs if (job, c) not in clock.compiled]
                # Warm configs' timings run while the cold ones compile (one thread per config).
                spent = max(len(configs) * _probe,
                            (clock.compile_s * math.ceil(len(cold) / 8) if cold else 0.0) + len(cold) * _probe)
                if spent >= clock.compile_s:  # hinted configs compiled meanwhile, by their own workers
                    clock.compiled |= {(job, c) for c in clock.hinted}
                    clock.compiles += len(clock.hinted)
                clock.hinted = []
                clock.wait_s += spent - len(configs) * _probe
                clock.search_s += spent
                clock.segments[job].append(("search", spent - len(configs) * _probe, len(configs) * _probe))
                clock.advance(spent)
                for c in cold:
                    clock.compiled.add((job, c))
                    clock.compiles += 1
                return [Ok(_land[c]) if c in _land else LaunchFailed("not recorded") for c in configs]

            before = clock.search_s
            default = target.default_config(shape, batch)
            seeds = tuple(winners[b] for b in sorted(winners, key=lambda b: abs(b - batch)))
            def hint(configs: Any) -> None:
                clock.hinted = [c for c in configs if (job, c) not in clock.compiled]

            found = fast.search(SearchSpace(tuple(fitting), model.at(batch), seeds, warm=frozenset(tried),
                                            baseline=default, axes=target.config_space.axes,
                                            hint=hint if variant.hints else None),
                                evaluate, Budget(), options)
            evaluate([default])
            clock.search_s += ROW_OVERHEAD_S
            clock.segments[job].append(("search", 0.0, ROW_OVERHEAD_S))
            clock.rows.append((job, batch, clock.search_s - before))
            trials += found.trials
            tried |= {c for c, _ in found.measured}
            winners[batch] = found.best
            row = rec.rows.get((job, batch))
            if row is not None:
                seconds = replay_rounds(row, variant.rounds, variant.drop, variant.drop_from)[1] * \
                    rec.retime_s(batch, variant.budget_ms)
                clock.retime_s += seconds
                clock.segments[job].append(("retime", 0.0, seconds))
            if (job, batch) in rec.swept:
                worst[f"{job} {batch}"] = land[found.best] / min(land.values())
    together = concurrent_s(list(clock.segments.values())) if variant.together else None
    return {"together_s": together, "search_s": clock.search_s, "wait_s": clock.wait_s, "retime_s": clock.retime_s,
            "total_s": clock.search_s + clock.retime_s, "compiles": clock.compiles,
            "trials": trials, "worst": max(worst.values()), "picks": worst, "rows": clock.rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layouts", default=",".join(V4_RUNS))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--retime", action="store_true",
                   help="only the re-timing settings replayed on session 4's recorded rounds")
    p.add_argument("--compile-s", type=float, default=None,
                   help="one cold compile's latency (default: calibrated per dtype, see COMPILE_S)")
    args = p.parse_args()
    for option, given, known in (("--layouts", args.layouts, V4_RUNS),
                                 ("--variants", args.variants, VARIANTS)):
        unknown = [x for x in given.split(",") if x not in known]
        if unknown:
            p.error(f"{option}: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    if args.retime:
        retime_table()
        return
    for run in args.layouts.split(","):
        rec = Recorded(run)
        for name in args.variants.split(","):
            v = VARIANTS[name]
            s = simulate(rec, v, args.compile_s or COMPILE_S[rec.dtype])
            print(f"{run:14s} {name:10s} total {s['total_s']:6.1f} s = search {s['search_s']:5.1f} "
                  f"(compile waits {s['wait_s']:5.1f}) + re-time {s['retime_s']:5.1f}"
                  + (f"; side by side {s['together_s']:5.1f} s" if s["together_s"] else "")
                  + f"; {s['compiles']} compiles, {s['trials']} trials; worst pick/best {s['worst']:.4f}")


# One cold compile's latency on the critical path, fitted to session 4's search times (EP8 bf16
# 94 s, TP8 bf16 95 s, EP8 fp8-block 43 s of search in the r1 journals).
COMPILE_S = {"bf16": 0.5, "fp8-block": 0.85}
# Per row, besides the search and the re-timing: the default config's timing, the output check.
ROW_OVERHEAD_S = 0.12

if __name__ == "__main__":
    main()
