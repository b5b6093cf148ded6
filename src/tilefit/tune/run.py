"""The tuning run: for each layer shape, GEMM job and batch size, prefilter the target's space with
its SMEM model, let the strategy pick configs, compile them in the CPU pool and time them in the
GPU pool, journal every result, then write the target's config files after each shape.

Everything a config can do wrong comes back as a result value; a shared-memory failure at launch
of a config the model let through is listed as a model bug. A resumed run answers already
measured configs from the journal, so the strategy retraces its steps and ends where an
uninterrupted run would.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilefit.tune import perfmodel
from tilefit.tune.config_files import write_json_atomic
from tilefit.tune.journal import Journal
from tilefit.tune.results import (DoesNotFit, LaunchFailed, Ok, Result, describe, time_of,
                                  to_json)
from tilefit.tune.strategies import get_strategy, make_options
from tilefit.tune.strategies.base import Budget, SearchSpace
from tilefit.tune.targets.base import TargetSpec, TuneShape
from tilefit.tune.workers import WorkerPool

JOURNAL = "journal.jsonl"
SUMMARY = "tune_summary.json"


@dataclass(frozen=True)
class TuneRequest:
    target: TargetSpec
    shapes: tuple[TuneShape, ...]  # layer shapes; the target decides the GEMM jobs
    batches: tuple[int, ...]
    out_dir: Path
    gpu: str  # catalog name for the performance model and the roofline floor
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


@dataclass
class Row:
    shape: str
    job: str
    batch: int
    config: str | None
    config_dict: dict[str, int] | None
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
        d = dict(self.__dict__)
        d["pct_of_floor"] = self.pct_of_floor
        d["speedup_over_default"] = self.speedup
        return d


@dataclass
class TuneReport:
    rows: list[Row]
    files: list[str]
    model_bugs: list[dict[str, Any]]
    wall_s: float
    resumed_entries: int
    worker_restarts: int

    def as_dict(self) -> dict[str, Any]:
        return {"rows": [r.as_dict() for r in self.rows], "files": self.files,
                "model_bugs": self.model_bugs, "wall_s": self.wall_s,
                "resumed_entries": self.resumed_entries, "worker_restarts": self.worker_restarts}


Progress = Callable[[str, dict[str, Any]], None]


def _quiet(event: str, data: dict[str, Any]) -> None:
    return None


class _Evaluator:
    """evaluate(configs) for one (job shape, batch): journal first, then each config flows
    compile (CPU pool) -> run (GPU pool) on its own thread, so timing starts as soon as the first
    compile is done instead of after the slowest of the chunk."""

    def __init__(self, name: str, target: Any, journal: Journal, compile_pool: WorkerPool,
                 bench_pool: WorkerPool, model_bugs: list[dict[str, Any]], progress: Progress):
        self.name, self.target, self.journal = name, target, journal
        self.compile_pool, self.bench_pool = compile_pool, bench_pool
        self.model_bugs, self.progress = model_bugs, progress
        lanes = len(compile_pool.workers) + len(bench_pool.workers)
        self._lanes = ThreadPoolExecutor(max_workers=lanes)

    def close(self) -> None:
        self._lanes.shutdown(wait=True)

    def _one(self, shape: TuneShape, batch: int, config: Any) -> Result:
        key, cfg = shape.key(), config.as_dict()
        done = self.journal.lookup(self.name, key, batch, cfg)
        if done is not None:
            return done
        misfit = self.target.fit_reason(config, shape)
        if misfit is not None:
            self.journal.record(self.name, key, batch, cfg, misfit)
            return misfit
        compiled = self.journal.lookup(self.name, key, None, cfg)
        if compiled is None:
            reply = self.compile_pool.call("compile", config, shape, None)
            compiled = Ok(0.0) if reply is None else reply
            self.journal.record(self.name, key, None, cfg, compiled)
        if not isinstance(compiled, Ok):
            return compiled
        r = self.bench_pool.call("run", config, shape, batch)
        self.journal.record(self.name, key, batch, cfg, r)
        if isinstance(r, DoesNotFit):
            self.model_bugs.append({"shape": key, "config": cfg, "result": to_json(r)})
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
    from tilefit.hw.catalog import get_gpu

    started = time.monotonic()
    deadline = None if req.budget_minutes is None else started + 60.0 * req.budget_minutes
    target = req.target.build()
    strategy = get_strategy(req.strategy)
    opts = dict(req.options)
    if "chunk" not in opts and any(f.name == "chunk" for f in dataclasses.fields(strategy.Options)):
        # Hand the workers as many configs at once as there are compilers to keep busy.
        opts["chunk"] = max(strategy.Options().chunk, req.compile_workers)
    options = make_options(strategy, opts)
    exhaustive = get_strategy("exhaustive")
    gpu = get_gpu(req.gpu)
    context = {"versions": target.versions(), "gpu": req.device_name}
    model_bugs: list[dict[str, Any]] = []
    rows: list[Row] = []
    files: list[str] = []
    jobs_total = len(req.shapes) * len(target.jobs) * len(req.batches)
    jobs_done = 0
    with Journal(req.out_dir / JOURNAL, resume=req.resume, context=context) as journal, \
            WorkerPool(req.target, [None] * max(1, req.compile_workers),
                       timeout=req.compile_timeout_s) as cpool, \
            WorkerPool(req.target, list(req.devices), timeout=req.run_timeout_s) as bpool:
        evaluator = _Evaluator(target.name, target, journal, cpool, bpool, model_bugs, progress)
        for layer in req.shapes:
            winners: dict[str, dict[int, Any]] = {}
            for job in target.jobs:
                shape = layer.with_gemm(job)
                dev = perfmodel.Device.from_gpu(gpu, shape.dtype)
                space = list(target.space(shape))
                fitting = [c for c in space if target.fit_reason(c, shape) is None]
                smem = getattr(target, "smem_bytes", None)
                for batch in req.batches:
                    progress("job", {"shape": shape.key(), "job": job, "batch": batch,
                                     "index": jobs_done, "total": jobs_total})
                    configs = _restrict(target, job, batch, fitting, winners)
                    prev = winners.get(job, {})
                    seeds = tuple(prev[b] for b in sorted(prev, key=lambda b: abs(b - batch)))

                    def predict(c: Any, _s: TuneShape = shape, _b: int = batch) -> float:
                        return perfmodel.predict_us(c, _s, _b, dev, smem(c, _s) if smem else 0)

                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    per_search = None if left is None else left / max(1, jobs_total - jobs_done)
                    t0 = time.monotonic()
                    result = strategy.search(SearchSpace(tuple(configs), predict, seeds),
                                             lambda cs, _s=shape, _b=batch: evaluator(_s, _b, cs),
                                             Budget(req.trials, per_search), options)
                    search_s = time.monotonic() - t0
                    best = _checked_best(result.ranked(), shape, batch, bpool, journal, target.name)
                    default = target.default_config(shape, batch)
                    default_r = evaluator(shape, batch, [default])[0]
                    failures: dict[str, int] = {}
                    for _, r in result.measured:
                        if not isinstance(r, Ok):
                            failures[r.kind] = failures.get(r.kind, 0) + 1
                    row = Row(shape.key(), job, batch, best.label() if best else None,
                              best.as_dict() if best else None,
                              time_of(result_of(result.measured, best)) if best else None,
                              perfmodel.floor_us(shape, batch, dev),
                              default_r.time_us if isinstance(default_r, Ok) else None,
                              result.trials, len(space), len(space) - len(fitting), failures,
                              round(search_s, 3))
                    if batch in req.exhaustive_at:
                        t1 = time.monotonic()
                        ex = exhaustive.search(SearchSpace(tuple(configs)),
                                               lambda cs, _s=shape, _b=batch: evaluator(_s, _b, cs),
                                               Budget())
                        row.exhaustive_us = ex.best_time_us if ex.best is not None else None
                        row.exhaustive_trials = ex.trials
                        row.exhaustive_s = round(time.monotonic() - t1, 3)
                    rows.append(row)
                    if best is not None:
                        winners.setdefault(job, {})[batch] = best
                    jobs_done += 1
                    progress("row", row.as_dict())
            if all(len(winners.get(j, {})) == len(req.batches) for j in target.jobs):
                files += [str(p) for p in target.write(req.out_dir, layer, req.device_name, winners)]
            else:
                progress("warning", {"message": f"{layer.key()}: no config ran for some batch "
                                                f"sizes; no config file written"})
        evaluator.close()
        restarts = cpool.restarts + bpool.restarts
    report = TuneReport(rows, files, model_bugs, round(time.monotonic() - started, 3),
                        journal.resumed, restarts)
    write_json_atomic(req.out_dir / SUMMARY, report.as_dict())
    return report


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
        known = journal.lookup(name, key, batch, config.as_dict())
        if known is None:
            reply = bench_pool.map("check", [(config, shape, batch)])[0]
            known = Ok(0.0) if reply is None else (
                LaunchFailed(f"wrong result: {reply}") if isinstance(reply, str) else reply)
            journal.record(name, key, batch, config.as_dict(), known)
        if isinstance(known, Ok):
            return config
    return None
