"""The tuning run: for each layer shape, GEMM job and batch size, prefilter the target's space with
its SMEM model, let the strategy pick configs, compile them in the CPU pool and time them in the
GPU pool, journal every result, then write the target's config files after each shape.

While a search waits on the GPU, idle compile workers precompile the configs the performance
model ranks highest at the request's batch sizes (`prefetch`): compiling, not timing, is what a
search would otherwise wait for. Prefetching changes when configs compile, never which configs a
search measures or picks.

Everything a config can do wrong comes back as a result value; a shared-memory failure at launch
of a config the model let through is listed as a model bug. A resumed run answers already
measured configs from the journal, so the strategy retraces its steps and ends where an
uninterrupted run would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilefit.kernels.triton_moe.config import MoEConfig
from tilefit.tune import perfmodel
from tilefit.engines.triton_moe import write_json_atomic
from tilefit.tune.device import DeviceFigures
from tilefit.tune.journal import Journal
from tilefit.tune.results import (DoesNotFit, LaunchFailed, Ok, Result, describe, time_of,
                                  to_json)
from tilefit.tune.strategies import get_strategy, make_options
from tilefit.tune.strategies.base import Budget, SearchSpace
from tilefit.tune.targets.base import TargetSpec, TuneShape
from tilefit.tune.workers import WorkerPool

JOURNAL = "journal.jsonl"
SUMMARY = "tune_summary.json"
PREFETCH = 0.10
# Compile workers kept free of prefetching, for the configs a search is waiting on (the fast
# strategy's chunk): prefetching only ever uses the workers beyond these.
RESERVED_COMPILE_WORKERS = 8


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


@dataclass(frozen=True, slots=True)
class ModelBug:
    """A config the SMEM model let through that failed for shared memory at launch."""

    shape: str
    config: MoEConfig
    result: Result

    def as_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "config": self.config.as_dict(), "result": to_json(self.result)}


@dataclass
class Row:
    shape: str
    job: str
    batch: int
    config: MoEConfig | None  # the pick; None when nothing ran
    time_us: float | None
    floor_us: float
    default_us: float | None
    trials: int
    space: int
    prefiltered: int
    failures: dict[str, int]
    search_s: float
    exhaustive_us: float | None = None
    exhaustive_trials: int | None = None
    exhaustive_s: float | None = None

    @property
    def pct_of_floor(self) -> float | None:
        return None if not self.time_us else 100.0 * self.floor_us / self.time_us

    @property
    def speedup(self) -> float | None:
        return None if not (self.time_us and self.default_us) else self.default_us / self.time_us

    def as_dict(self) -> dict[str, Any]:
        """JSON: the config as its label ("config") and as the engines' keys ("config_dict")."""
        d = dict(self.__dict__)
        d["config"] = self.config.label() if self.config else None
        d["config_dict"] = self.config.as_dict() if self.config else None
        d["pct_of_floor"] = self.pct_of_floor
        d["speedup_over_default"] = self.speedup
        return d


@dataclass
class TuneReport:
    rows: list[Row]
    files: list[str]
    model_bugs: list[ModelBug]
    wall_s: float
    resumed_entries: int
    worker_restarts: int
    figures: DeviceFigures | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.figures.as_dict() if self.figures else None,
                "rows": [r.as_dict() for r in self.rows], "files": self.files,
                "model_bugs": [b.as_dict() for b in self.model_bugs], "wall_s": self.wall_s,
                "resumed_entries": self.resumed_entries, "worker_restarts": self.worker_restarts}


Progress = Callable[[str, dict[str, Any]], None]


def _quiet(event: str, data: dict[str, Any]) -> None:
    return None


class _Evaluator:
    """evaluate(configs) for one (job shape, batch): journal first, then each config flows
    compile (CPU pool) -> run (GPU pool) on its own thread, so timing starts as soon as the first
    compile is done instead of after the slowest of the chunk."""

    def __init__(self, name: str, target: Any, journal: Journal, compile_pool: WorkerPool,
                 bench_pool: WorkerPool, model_bugs: list[ModelBug], progress: Progress):
        self.name, self.target, self.journal = name, target, journal
        self.compile_pool, self.bench_pool = compile_pool, bench_pool
        self.model_bugs, self.progress = model_bugs, progress
        lanes = compile_pool.size + bench_pool.size
        self._lanes = ThreadPoolExecutor(max_workers=lanes)
        self._lock = threading.Lock()
        self._compiling: dict[tuple[str, Any], Future[Result]] = {}
        spare = compile_pool.size - RESERVED_COMPILE_WORKERS
        self._prefetcher = ThreadPoolExecutor(max_workers=spare) if spare > 0 else None
        self._prefetched: list[Future[Any]] = []

    def close(self) -> None:
        self.stop_prefetch()
        if self._prefetcher is not None:
            self._prefetcher.shutdown(wait=True)
        self._lanes.shutdown(wait=True)

    @property
    def can_prefetch(self) -> bool:
        """Whether compile workers are spare for prefetching (more than the reserved ones)."""
        return self._prefetcher is not None

    def prefetch(self, shape: TuneShape, configs: Sequence[Any]) -> None:
        """Compile `configs` in the background on the spare compile workers (none: a no-op)."""
        if self._prefetcher is not None:
            self._prefetched += [self._prefetcher.submit(self.compiled, shape, c) for c in configs]

    def stop_prefetch(self) -> None:
        """Drop the prefetches not started yet (those running finish and are journaled)."""
        for f in self._prefetched:
            f.cancel()
        self._prefetched = []

    def compiled(self, shape: TuneShape, config: Any) -> Result:
        """The compile result of `config` for `shape`: from the journal, from a compile already in
        flight on another thread (a prefetch), or compiled now and journaled."""
        key = shape.key()
        with self._lock:
            done = self.journal.lookup(self.name, key, None, config)
            if done is not None:
                return done
            pending = self._compiling.get((key, config))
            if pending is None:
                mine: Future[Result] = Future()
                self._compiling[(key, config)] = mine
        if pending is not None:
            return pending.result()
        try:
            reply = self.compile_pool.call("compile", config, shape, None)
            result = Ok(0.0) if reply is None else reply
            self.journal.record(self.name, key, None, config, result)
            mine.set_result(result)
            return result
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                del self._compiling[(key, config)]

    def _one(self, shape: TuneShape, batch: int, config: MoEConfig) -> Result:
        key = shape.key()
        done = self.journal.lookup(self.name, key, batch, config)
        if done is not None:
            return done
        misfit = self.target.fit_reason(config, shape)
        if misfit is not None:
            self.journal.record(self.name, key, batch, config, misfit)
            return misfit
        compiled = self.compiled(shape, config)
        if not isinstance(compiled, Ok):
            return compiled
        r = self.bench_pool.call("run", config, shape, batch)
        self.journal.record(self.name, key, batch, config, r)
        if isinstance(r, DoesNotFit):
            self.model_bugs.append(ModelBug(key, config, r))
        self.progress("measured", {"config": config.label(), "result": describe(r)})
        return r

    def __call__(self, shape: TuneShape, batch: int, configs: Sequence[Any]) -> list[Result]:
        futures = [self._lanes.submit(self._one, shape, batch, c) for c in configs]
        return [f.result() for f in futures]


def _restrict(target: Any, job: str, batch: int, configs: list[Any],
              winners: dict[str, dict[int, Any]]) -> list[Any]:
    """A target may tie one job's configs to another's (SGLang's _down BLOCK_SIZE_M)."""
    restrict = getattr(target, "restrict", None)
    return configs if restrict is None else restrict(job, batch, configs, winners)


def tune(req: TuneRequest, progress: Progress = _quiet) -> TuneReport:
    """Run the whole tuning request; see the module docstring."""
    started = time.monotonic()
    target = req.target.build()
    context = {"versions": target.versions(), "gpu": req.device_name}
    # The pools first: a cluster that cannot be reached leaves no journal behind.
    with _pools(req) as (cpool, bpool), \
            Journal(req.out_dir / JOURNAL, resume=req.resume, context=context) as journal:
        run = _Run(req, target, journal, cpool, bpool, progress, started)
        try:
            for layer in req.shapes:
                run.layer(layer)
        finally:
            run.evaluator.close()
        restarts = cpool.restarts + bpool.restarts
    report = TuneReport(run.rows, run.files, run.model_bugs, round(time.monotonic() - started, 3),
                        journal.resumed, restarts, req.figures)
    write_json_atomic(req.out_dir / SUMMARY, report.as_dict())
    return report


@contextmanager
def _pools(req: TuneRequest) -> Iterator[tuple[Any, Any]]:
    """(compile pool, benchmark pool): local worker processes, or the Ray cluster's."""
    if req.ray is not None:
        from tilefit.tune.ray_executor import ray_pools

        with ray_pools(req.target, req.ray, compile_timeout=req.compile_timeout_s,
                       run_timeout=req.run_timeout_s) as pools:
            yield pools
        return
    with WorkerPool(req.target, [None] * max(1, req.compile_workers),
                    timeout=req.compile_timeout_s) as cpool, \
            WorkerPool(req.target, list(req.devices), timeout=req.run_timeout_s) as bpool:
        yield cpool, bpool


class _Run:
    """The state of one tuning run: strategy, budget, rows so far, files written."""

    def __init__(self, req: TuneRequest, target: Any, journal: Journal, cpool: WorkerPool,
                 bpool: WorkerPool, progress: Progress, started: float):
        from tilefit.hw.catalog import get_gpu

        self.req, self.target, self.journal, self.bpool = req, target, journal, bpool
        self.progress = progress
        self.deadline = None if req.budget_minutes is None else started + 60.0 * req.budget_minutes
        self.strategy = get_strategy(req.strategy)
        # The fast strategy's chunk stays at its default (8) whatever the core count: larger
        # chunks mean fewer correction rounds, and missed the best more often on synthetic
        # landscapes (chunk 16: 2 of 108 searches beyond 2%; chunk 8: none).
        self.options = make_options(self.strategy, req.options)
        self.gpu = req.figures.gpu if req.figures is not None else get_gpu(req.gpu)
        self.model_bugs: list[ModelBug] = []
        self.rows: list[Row] = []
        self.files: list[str] = []
        self.tried: dict[str, set[Any]] = {}
        self.total = len(req.shapes) * len(target.jobs) * len(req.batches)
        self.evaluator = _Evaluator(target.name, target, journal, cpool, bpool, self.model_bugs,
                                    progress)

    def layer(self, layer: TuneShape) -> None:
        """Every job and batch of one layer shape, then the target's files for it."""
        winners: dict[str, dict[int, Any]] = {}
        for job in self.target.jobs:
            shape = layer.with_gemm(job)
            space = list(self.target.space(shape))
            fitting = [c for c in space if self.target.fit_reason(c, shape) is None]
            model = _Predictions(self.target, shape, self.gpu)
            if self.evaluator.can_prefetch:
                self.evaluator.prefetch(shape, self.prefetch_order(fitting, model))
            try:
                for batch in self.req.batches:
                    row, best = self.batch(shape, batch, space, fitting, winners, model)
                    self.rows.append(row)
                    if best is not None:
                        winners.setdefault(job, {})[batch] = best
                    self.progress("row", row.as_dict())
            finally:
                self.evaluator.stop_prefetch()
        if all(len(winners.get(j, {})) == len(self.req.batches) for j in self.target.jobs):
            written = self.target.write(self.req.out_dir, layer, self.req.device_name, winners)
            self.files += [str(p) for p in written]
        else:
            self.progress("warning", {"message": f"{layer.key()}: no config ran for some batch "
                                                 f"sizes; no config file written"})

    def prefetch_order(self, fitting: list[Any], model: _Predictions) -> list[Any]:
        """The `prefetch` fraction of `fitting`: each batch size's model ranking, taken in turns
        (rank 1 at every batch, then rank 2, ...), earlier batch sizes first within a turn."""
        count = int(self.req.prefetch * len(fitting))
        if count <= 0 or not fitting:
            return []
        rankings = [sorted(fitting, key=lambda c, p=model.at(b): (p(c), c)) for b in self.req.batches]
        order = dict.fromkeys(c for turn in zip(*rankings) for c in turn)
        return list(order)[:count]

    def batch(self, shape: TuneShape, batch: int, space: list[Any], fitting: list[Any],
              winners: dict[str, dict[int, Any]], model: _Predictions) -> tuple[Row, Any | None]:
        """One search: the strategy's pick, checked against the reference, with its context."""
        done = len(self.rows)
        self.progress("job", {"shape": shape.key(), "job": shape.gemm, "batch": batch,
                              "index": done, "total": self.total})
        configs = tuple(_restrict(self.target, shape.gemm, batch, fitting, winners))
        prev = winners.get(shape.gemm, {})
        # Neighbouring batch sizes' winners, then the target's default config (timed for the
        # row anyway): a pick is never slower than what the engine would run untuned.
        default = self.target.default_config(shape, batch)
        seeds = tuple(prev[b] for b in sorted(prev, key=lambda b: abs(b - batch)))

        def evaluate(cs: Sequence[Any]) -> list[Result]:
            return self.evaluator(shape, batch, cs)

        left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        per_search = None if left is None else left / max(1, self.total - done)
        t0 = time.monotonic()
        # Configs this job already tried at other batch sizes are compiled: cheap to time. (The
        # run's own history, not the journal's, so a resumed run retraces the same searches.)
        warm = frozenset(self.tried.setdefault(shape.key(), set()))
        space_now = SearchSpace(configs, model.at(batch), seeds, warm=warm, baseline=default)
        result = self.strategy.search(space_now, evaluate, Budget(self.req.trials, per_search),
                                      self.options)
        self.tried[shape.key()].update(c for c, _ in result.measured)
        search_s = time.monotonic() - t0
        best = _checked_best(result.ranked(), shape, batch, self.bpool, self.journal,
                             self.target.name)
        default_r = evaluate([default])[0]
        failures: dict[str, int] = {}
        for _, r in result.measured:
            if not isinstance(r, Ok):
                failures[r.kind] = failures.get(r.kind, 0) + 1
        row = Row(shape.key(), shape.gemm, batch, best,
                  time_of(result_of(result.measured, best)) if best else None,
                  perfmodel.floor_us(shape, batch, model.dev),
                  default_r.time_us if isinstance(default_r, Ok) else None,
                  result.trials, len(space), len(space) - len(fitting), failures, round(search_s, 3))
        if batch in self.req.exhaustive_at:
            t1 = time.monotonic()
            ex = get_strategy("exhaustive").search(SearchSpace(configs), evaluate, Budget())
            row.exhaustive_us = ex.best_time_us if ex.best is not None else None
            row.exhaustive_trials = ex.trials
            row.exhaustive_s = round(time.monotonic() - t1, 3)
        return row, best


class _Predictions:
    """The performance model's times for one GEMM job's configs, each computed once per batch
    size (the prefetch order and every search of the job read the same figures)."""

    def __init__(self, target: Any, shape: TuneShape, gpu: Any):
        self.shape = shape
        self.dev = perfmodel.Device.from_gpu(gpu, shape.dtype)
        self._smem_of = getattr(target, "smem_bytes", None)
        self._smem: dict[Any, int] = {}
        self._times: dict[int, dict[Any, float]] = {}

    def at(self, batch: int) -> Callable[[Any], float]:
        """predict(config) -> microseconds at `batch`."""
        times = self._times.setdefault(batch, {})

        def predict(c: Any) -> float:
            t = times.get(c)
            if t is None:
                t = times[c] = perfmodel.predict_us(c, self.shape, batch, self.dev, self._smem_bytes(c))
            return t
        return predict

    def _smem_bytes(self, c: Any) -> int:
        if self._smem_of is None:
            return 0
        b = self._smem.get(c)
        if b is None:
            b = self._smem[c] = self._smem_of(c, self.shape)
        return b


def result_of(measured: Sequence[tuple[Any, Result]], config: Any) -> Result:
    for c, r in measured:
        if c == config:
            return r
    raise KeyError(config)


def _checked_best(ranked: list[tuple[Any, Result]], shape: TuneShape, batch: int,
                  bench_pool: WorkerPool, journal: Journal, name: str) -> Any | None:
    """The fastest config whose output matches the target's reference (checked in the GPU
    worker; a mismatch is journaled and the next fastest is tried)."""
    for config, r in ranked:
        if not isinstance(r, Ok):
            return None
        key = f"check:{shape.key()}"
        known = journal.lookup(name, key, batch, config)
        if known is None:
            reply = bench_pool.call("check", config, shape, batch)
            known = Ok(0.0) if reply is None else (
                LaunchFailed(f"wrong result: {reply}") if isinstance(reply, str) else reply)
            journal.record(name, key, batch, config, known)
        if isinstance(known, Ok):
            return config
    return None
