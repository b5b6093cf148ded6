"""The tuning run: for each layer shape, GEMM job and batch size, prefilter the target's space with
its SMEM model, let the strategy pick configs, compile them in the CPU pool and time them in the
GPU pool (evaluator.py), re-time the finalists in quiet and pick by their medians (finalists.py),
journal every result, then write the target's files (and the engines' files, emit.py) per shape.

The GPU's copy bandwidth and MMA rate can be measured once at the start (ceilings.py), so that
"% of floor" is against this GPU, with the catalog's floor beside it. A resumed run answers
already measured configs from the journal (same GPU and versions only), so the strategy retraces
its steps and ends where an uninterrupted run would.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tilefit._io import write_json_atomic
from tilefit.errors import UsageError
from tilefit.tune import perfmodel
from tilefit.tune.finalists import DROP, FINALISTS, ROUNDS, gather, ranked, retime
from tilefit.tune.device import DeviceFigures
from tilefit.tune.evaluator import Evaluator, Predictions, Progress
from tilefit.tune.journal import Journal, describe_context
from tilefit.tune.report import ModelBug, Retimed, Row, TuneReport
from tilefit.tune.results import Ok, Result
from tilefit.tune.schedule import SPLIT_AT, segments, side_by_side
from tilefit.tune.strategies import get_strategy, make_options
from tilefit.tune.strategies.base import Budget, SearchSpace
from tilefit.tune.targets.base import TargetSpec, TuneShape
from tilefit.tune.pools import Trace, WorkerPool
from tilefit.tune.targets import own_compiles

JOURNAL = "journal.jsonl"
SUMMARY = "tune_summary.json"
PREFETCH = 0.10


@dataclass(frozen=True)
class TuneRequest:
    target: TargetSpec
    shapes: tuple[TuneShape, ...]  # layer shapes; the target decides the GEMM jobs
    batches: tuple[int, ...]
    out_dir: Path
    gpu: str  # catalog name for the performance model and the roofline floor (unless `figures`)
    device_name: str  # as torch reports it; goes into the engines' file names
    strategy: str = "fast"
    options: dict[str, Any] = field(default_factory=dict)
    budget_minutes: float | None = None
    trials: int | None = None  # per search
    resume: bool = False
    compile_workers: int = 1
    devices: tuple[int | None, ...] = (None,)
    compile_timeout_s: float = 300.0
    run_timeout_s: float = 120.0
    exhaustive_at: tuple[int, ...] = ()  # also sweep the whole space at these batches
    ray: Any = None  # a ray_executor.RayOptions: the same requests on a Ray cluster, not here
    figures: DeviceFigures | None = None  # the local GPU's figures (tune/device.py); else `gpu`
    prefetch: float = PREFETCH  # fraction of each GEMM's fitting configs precompiled by idle workers
    hints: bool = True  # idle workers also compile what a search says it may ask for next
    side_by_side: bool = True  # a layer's searches run at once (False: one after the other)
    split_at: int = SPLIT_AT  # batch sizes from here on are searched as a segment of their own
    interleave: bool = True  # a re-timing round's finalists timed in turns (target.run_many)
    finalists: int = FINALISTS  # best configs of each search re-timed in quiet
    rounds: int = ROUNDS  # re-timing rounds (0: pick by the search's own timings)
    drop: float = DROP  # finalists this far behind after a round stop (0: all run every round)
    measure_ceilings: bool = False  # time the GPU's copy and MMA rates first (needs CUDA here)
    emit: tuple[str, ...] = ()  # engines whose config files to write too ("vllm", "sglang")
    engine_version: str | None = None  # the --emit engines' release (None: the newest read)
    given: tuple[tuple[str, int, Any], ...] = ()  # (job, batch, config) re-timed with the finalists
    provenance: dict[str, Any] = field(default_factory=dict)  # model, layout: for the emitted files
    trace: Path | None = None  # a JSON line per compile and GPU request (pools.Trace); local pools


def tune(req: TuneRequest, progress: Progress = lambda event, data: None) -> TuneReport:
    """Run the whole tuning request; see the module docstring."""
    started = time.monotonic()
    target = req.target.build()
    context = {"versions": target.versions(), "gpu": req.device_name}
    # The pools first: a cluster that cannot be reached leaves no journal behind.
    with _pools(req, started) as (cpool, bpool), \
            Journal(req.out_dir / JOURNAL, resume=req.resume, context=context,
                    from_dict=target.config_space.from_dict) as journal:
        # Once the journal is open (a refused one starts no process): the workers start while
        # the ceilings are timed. Ray's pools start theirs on the cluster.
        for pool in (cpool, bpool) if req.shapes else ():
            if hasattr(pool, "warm"):
                pool.warm(req.shapes[0])
        if journal.stale:
            progress("warning", {"message": (
                f"{journal.stale} journal entries were measured on "
                f"{'; '.join(journal.stale_contexts)}, not on {describe_context(context)}: "
                f"they are measured again")})
        run = _Run(req, target, journal, cpool, bpool, progress, started)
        try:
            for layer in req.shapes:
                run.layer(layer)
        finally:
            run.evaluator.close()
        restarts = cpool.restarts + bpool.restarts
        own = own_compiles.gather(bpool, req.shapes, progress)
    report = TuneReport(run.rows, run.files, run.model_bugs, round(time.monotonic() - started, 3),
                        journal.resumed, restarts, req.figures, run.ceilings, journal.stale,
                        tuple(journal.stale_contexts), own)
    write_json_atomic(req.out_dir / SUMMARY, report.as_dict(), indent=4)
    return report


@contextmanager
def _pools(req: TuneRequest, started: float) -> Iterator[tuple[Any, Any]]:
    """(compile pool, benchmark pool): local worker processes, or the Ray cluster's."""
    if req.ray is not None:
        if req.trace is not None:  # the cluster's workers are not this process's to time
            raise UsageError("a trace records tilefit's local worker pools, not a Ray cluster's")
        from tilefit.tune.ray_executor import ray_pools

        with ray_pools(req.target, req.ray, compile_timeout=req.compile_timeout_s,
                       run_timeout=req.run_timeout_s) as pools:
            yield pools
        return
    with Trace.opened(req.trace, started) as trace, \
            WorkerPool(req.target, [None] * max(1, req.compile_workers),
                       timeout=req.compile_timeout_s, trace=trace, name="compile") as cpool, \
            WorkerPool(req.target, list(req.devices), timeout=req.run_timeout_s, trace=trace,
                       name="gpu") as bpool:
        yield cpool, bpool


def _ties_jobs(target: Any) -> bool:
    """Whether one job's configs depend on another's winners (a `restrict`, unless the target
    says its restrict ties nothing in this run)."""
    return getattr(target, "restrict", None) is not None and getattr(target, "ties_jobs", True)


def _restrict(target: Any, job: str, batch: int, configs: list[Any],
              winners: dict[str, dict[int, Any]]) -> list[Any]:
    """A target may tie one job's configs to another's (SGLang's _down BLOCK_SIZE_M)."""
    restrict = getattr(target, "restrict", None)
    return configs if restrict is None else restrict(job, batch, configs, winners)


class _Run:
    """The state of one tuning run: strategy, budget, rows so far, files written."""

    def __init__(self, req: TuneRequest, target: Any, journal: Journal, cpool: Any, bpool: Any,
                 progress: Progress, started: float):
        from tilefit.hw.catalog import get_gpu

        self.req, self.target, self.journal = req, target, journal
        self.progress = progress
        self.deadline = None if req.budget_minutes is None else started + 60.0 * req.budget_minutes
        self.strategy = get_strategy(req.strategy)
        # The fast strategy's chunk stays at its default (8) whatever the core count: larger
        # chunks mean fewer correction rounds, and missed the best more often on synthetic
        # landscapes (chunk 16: 2 of 108 searches beyond 2%; chunk 8: none).
        self.options = make_options(self.strategy, req.options)
        self.gpu = req.figures.gpu if req.figures is not None else get_gpu(req.gpu)
        self.ceilings: Any = None
        if req.measure_ceilings:
            from tilefit.tune import ceilings

            dtypes = {s.dtype for s in req.shapes}
            dtype = "fp8-block" if "fp8-block" in dtypes else sorted(dtypes)[0]
            try:
                self.ceilings = ceilings.measure(perfmodel.Device.from_gpu(self.gpu, dtype),
                                                 dtype, req.devices[0] or 0)
                progress("note", {"message": self.ceilings.line()})
            except Exception as e:  # noqa: BLE001 - no CUDA here, an fp8 GEMM torch lacks: say so
                progress("warning", {"message": f"could not measure the GPU's copy and MMA rates "
                                                f"({type(e).__name__}: {e}); % of floor uses the "
                                                f"catalog's figures"})
        self.model_bugs: list[ModelBug] = []
        self.rows: list[Row] = []
        self.started = itertools.count()  # searches started (the progress index)
        self.stopping = threading.Event()
        self.files: list[str] = []
        self.total = len(req.shapes) * len(target.jobs) * len(req.batches)
        # A target whose variants must not share journal lines names each (journal_name).
        self.evaluator = Evaluator(getattr(target, "journal_name", target.name), target, journal,
                                   cpool, bpool, self.model_bugs,
                                   progress, interleave=req.interleave)

    def layer(self, layer: TuneShape) -> None:
        """Every job and batch of one layer shape, then the target's files for it. Each job's
        batch sizes are searched in segments (schedule.py); the jobs' segments are searched side
        by side (unless `side_by_side` is off or the target ties one job's configs to another's
        winners): a search waits on compiles much of its time, so the others' timings fill the
        GPU meanwhile. Their re-timings take turns, and hold every compile back (evaluator.quiet)."""
        winners: dict[str, dict[int, Any]] = {}
        jobs = self.target.jobs
        parts = segments(self.req.batches, self.req.split_at)
        prepared = {job: self.prepare(layer.with_gemm(job)) for job in jobs}
        searching, lock = {job: len(parts) for job in jobs}, threading.Lock()

        def searched(job: str, part: tuple[int, ...]) -> list[Row]:
            try:
                return self.segment(_Segment(prepared[job], part), winners)
            finally:  # a job's prefetches help no other job's search: dropped after its last
                with lock:
                    searching[job] -= 1
                    if searching[job] == 0:
                        self.evaluator.stop_prefetch(prepared[job].shape)

        tasks = [partial(searched, job, part) for job in jobs for part in parts]
        try:
            if self.req.side_by_side and len(tasks) > 1 and not _ties_jobs(self.target):
                done = side_by_side(tasks, self.stopping)
            else:
                done = [task() for task in tasks]
        finally:  # and those of a job whose segments did not all run (an error in turns)
            for job in jobs:
                self.evaluator.stop_prefetch(prepared[job].shape)
        order = {(job, b): i for i, (job, b) in enumerate(
            (job, b) for job in jobs for b in self.req.batches)}
        found = sorted((row for part_rows in done for row in part_rows),
                       key=lambda row: order[(row.job, row.batch)])
        rows = {(row.job, row.batch): row for row in found}
        self.rows += found
        # The winners in that order too (segments end in any order): the writers and --emit,
        # whose re-timings and replacement warnings go by them, see the request's order.
        winners = {job: {r.batch: r.config for r in found if r.job == job and r.config is not None}
                   for job in jobs}
        if all(len(winners.get(j, {})) == len(self.req.batches) for j in self.target.jobs):
            written = self.target.write(self.req.out_dir, layer, self.req.device_name, winners)
            self.files += [str(p) for p in written]
            if self.req.emit:
                from tilefit.tune.emit import emit_engine_files

                self.files += [str(p) for p in emit_engine_files(
                    self.req, self.target, self.evaluator, layer, winners, rows, self.progress)]
        else:
            self.progress("warning", {"message": f"{layer.key()}: no config ran for some batch "
                                                 f"sizes; no config file written"})

    def prepare(self, shape: TuneShape) -> _Job:
        """One job's space, fitting configs and model; its prefetch list queued."""
        space = list(self.target.space(shape))
        fitting = [c for c in space if self.target.fit_reason(c, shape) is None]
        model = Predictions(self.target, shape, perfmodel.Device.from_gpu(self.gpu, shape.dtype))
        if self.evaluator.can_prefetch:
            self.evaluator.prefetch(shape, self.prefetch_order(fitting, model))
        return _Job(shape, space, fitting, model)

    def segment(self, seg: _Segment, winners: dict[str, dict[int, Any]]) -> list[Row]:
        """One segment of a job's batch sizes in order, each search seeded by the nearer winners
        of this segment (schedule.py says why only these)."""
        rows = []
        for batch in seg.batches:
            row = self.batch(seg, batch, winners)
            rows.append(row)
            if row.config is not None:
                seg.won[batch] = row.config
                winners.setdefault(seg.job.shape.gemm, {})[batch] = row.config
            self.progress("row", row.as_dict())
        return rows

    def prefetch_order(self, fitting: list[Any], model: Predictions) -> list[Any]:
        """The `prefetch` fraction of `fitting`'s compiles: each batch size's model ranking, taken
        in turns (rank 1 at every batch, then rank 2, ...), earlier batch sizes first within a
        turn; one config per compile key (the first ranked stands for the others)."""
        key = self.target.compile_key
        count = int(self.req.prefetch * len({key(c) for c in fitting}))
        if count <= 0 or not fitting:
            return []
        rankings = [sorted(fitting, key=lambda c, p=model.at(b): (p(c), c)) for b in self.req.batches]
        order: dict[Any, Any] = {}
        for c in (c for turn in zip(*rankings) for c in turn):
            order.setdefault(key(c), c)
        return list(order.values())[:count]

    def batch(self, seg: _Segment, batch: int, winners: dict[str, dict[int, Any]]) -> Row:
        """One search (seeded by its segment's winners), the exhaustive sweep where asked, then
        the finalists re-timed in quiet."""
        shape, space, fitting, model = seg.job.shape, seg.job.space, seg.job.fitting, seg.job.model
        prev = seg.won
        if self.stopping.is_set():
            raise _Stopped()
        done = next(self.started)
        self.progress("job", {"shape": shape.key(), "job": shape.gemm, "batch": batch,
                              "index": done, "total": self.total})
        configs = tuple(_restrict(self.target, shape.gemm, batch, fitting, winners))
        # Neighbouring batch sizes' winners, then the target's default config (a finalist
        # anyway): a pick is never slower than what the engine would run untuned.
        default = self.target.default_config(shape, batch)
        seeds = tuple(prev[b] for b in sorted(prev, key=lambda b: abs(b - batch)))

        def evaluate(cs: Sequence[Any]) -> list[Result]:
            if self.stopping.is_set():
                raise _Stopped()
            return self.evaluator(shape, batch, cs)

        left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        per_search = None if left is None else left / max(1, self.total - done)
        t0 = time.monotonic()
        # Configs this segment already tried at other batch sizes are compiled, and so is every
        # config sharing a compile with one of them: cheap to time. (The segment's own history,
        # not the journal's, so a resumed run retraces the same searches.)
        compiled = {self.target.compile_key(c) for c in seg.tried}
        warm = frozenset(c for c in configs if self.target.compile_key(c) in compiled)
        # The strategy's hints (its next configs) compile on the spare workers while it waits.
        hint = None if not (self.req.hints and self.evaluator.can_prefetch) else \
            (lambda cs: self.evaluator.hint(shape, cs, source=seg.batches[0]))
        first = batch == min(self.req.batches)  # the job's first search (see strategies/fast.py)
        space_now = SearchSpace(configs, model.at(batch), seeds, warm=warm, baseline=default,
                                axes=self.target.config_space.axes, hint=hint, first=first)
        result = self.strategy.search(space_now, evaluate, Budget(self.req.trials, per_search),
                                      self.options)
        if hint is not None:
            hint([])  # the search is over: what it hinted last is not needed
        seg.tried.update(c for c, _ in result.measured)
        search_s = time.monotonic() - t0
        groups: list[tuple[str, Sequence[tuple[Any, Result | None]]]] = [
            ("fast" if self.req.strategy == "fast" else self.req.strategy, result.measured),
            ("default", [(default, evaluate([default])[0])])]
        ex = None
        if batch in self.req.exhaustive_at:
            t1 = time.monotonic()
            ex = get_strategy("exhaustive").search(SearchSpace(configs), evaluate, Budget())
            ex_s = round(time.monotonic() - t1, 3)
            groups.append(("exhaustive", ex.measured))
        groups.append(("given", [(c, None) for job, b, c in self.req.given
                                 if job == shape.gemm and b == batch]))
        t2 = time.monotonic()
        chosen = self._retime(shape, batch, gather(groups, self.req.finalists))
        pick = self._checked_best(shape, batch, chosen)
        by_config = {f.config: f for f in chosen}
        default_f = by_config.get(default)
        failures: dict[str, int] = {}
        for _, r in result.measured:
            if not isinstance(r, Ok):
                failures[r.kind] = failures.get(r.kind, 0) + 1
        routed = self.target.routed(shape, batch)
        floor = perfmodel.floor_us(shape, batch, model.dev, routed)
        row = Row(shape.key(), shape.gemm, batch, pick.config if pick else None,
                  _finite(pick.median_us) if pick else None,
                  perfmodel.floor_us(shape, batch, self.ceilings.device(model.dev), routed)
                  if self.ceilings else floor,
                  _finite(default_f.median_us) if default_f else None,
                  result.trials, len(space), len(space) - len(fitting), failures,
                  round(search_s, 3), timing=self.target.timing(shape, batch),
                  floor_us_catalog=floor, search_us=pick.search_us if pick else None,
                  pick_from=",".join(pick.sources) if pick else "",
                  retime_s=round(time.monotonic() - t2, 3), finalists=chosen)
        if ex is not None:
            best_ex = row.best_of("exhaustive")
            row.exhaustive_us = _finite(best_ex.median_us) if best_ex else None
            row.exhaustive_config = best_ex.config if best_ex else None
            row.exhaustive_trials, row.exhaustive_s = ex.trials, ex_s
        return row

    def _retime(self, shape: TuneShape, batch: int,
                found: list[tuple[Any, tuple[str, ...], float | None]]) -> list[Retimed]:
        if self.req.rounds <= 0:  # the search's own timings decide
            return [Retimed(c, (t,) if t is not None else (), t, s) for c, s, t in found]
        return retime(self.evaluator, shape, batch, found, self.req.rounds, self.req.drop)

    def _checked_best(self, shape: TuneShape, batch: int, chosen: list[Retimed]) -> Retimed | None:
        """The fastest finalist whose output matches the target's reference (a mismatch is
        journaled and the next fastest is tried)."""
        for f in ranked(chosen):
            if f.median_us == float("inf"):
                return None
            if isinstance(self.evaluator.check(shape, batch, f.config), Ok):
                return f
        return None


@dataclass(frozen=True)
class _Job:
    """One GEMM job of a layer: what every one of its searches reads."""

    shape: TuneShape
    space: list[Any]
    fitting: list[Any]  # the configs the SMEM model lets launch
    model: Predictions


@dataclass
class _Segment:
    """A job's batch sizes searched in order (schedule.py), with what its searches learnt: its
    winners (the only seeds they take) and the configs it measured (compiled: cheap to time)."""

    job: _Job
    batches: tuple[int, ...]
    won: dict[int, Any] = field(default_factory=dict)
    tried: set[Any] = field(default_factory=set)


class _Stopped(Exception):
    """A search's thread ends at its next search: another one failed or the run was interrupted."""


def _finite(x: float) -> float | None:
    return x if x < float("inf") else None
