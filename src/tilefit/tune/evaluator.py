"""How a search's configs get measured: journal first, then compile (CPU pool) -> run (GPU pool)
per config on its own thread; idle compile workers compile ahead (prefetch.py: the configs a search
says it may ask for next, then those the performance model ranks highest); `quiet()` holds every
compile back (prefetches, and the other searches running side by side, schedule.py) while finalists
are re-timed, so no compile shares the host with a timing that a host-side launch could spoil:
local compile workers are stopped where they are and continue after, a pool that cannot stop
its compiles (Ray's) is waited on until those in flight end.
A search's timings only rank configs (its best few are re-timed in quiet), so they use the
target's shorter `probe` timing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import Any

from tilefit.tune import perfmodel
from tilefit.tune.journal import Journal
from tilefit.tune.prefetch import Prefetcher
from tilefit.tune.report import ModelBug
from tilefit.tune.results import DoesNotFit, LaunchFailed, Ok, Result, describe
from tilefit.tune.targets.base import ConfigGroup, TuneShape

# Compile workers kept free of prefetching, for the configs a search is waiting on (the fast
# strategy's chunk): prefetching only ever uses the workers beyond these.
RESERVED_COMPILE_WORKERS = 8
SEARCHES_AT_ONCE = 4  # searches side by side: two GEMMs x two batch-size segments (schedule.py)

Progress = Callable[[str, dict[str, Any]], None]


class Evaluator:
    """evaluate(configs) for one (job shape, batch): journal first, then each config flows
    compile (CPU pool) -> run (GPU pool) on its own thread, so timing starts as soon as the first
    compile is done instead of after the slowest of the chunk."""

    def __init__(self, name: str, target: Any, journal: Journal, compile_pool: Any,
                 bench_pool: Any, model_bugs: list[ModelBug], progress: Progress,
                 interleave: bool = False):
        self.name, self.target, self.journal = name, target, journal
        self.compile_pool, self.bench_pool = compile_pool, bench_pool
        self.model_bugs, self.progress = model_bugs, progress
        # Re-timing rounds take their finalists in turns (finalists.retime), where the target can.
        self.interleave = interleave and hasattr(target, "run_many")
        # Room for every search of a layer at once (schedule.py runs them side by side).
        lanes = SEARCHES_AT_ONCE * (compile_pool.size + bench_pool.size)
        self._lanes = ThreadPoolExecutor(max_workers=lanes)
        self._lock = threading.Lock()
        self._compiling: dict[tuple[str, Any], Future[Result]] = {}
        spare = compile_pool.size - RESERVED_COMPILE_WORKERS
        self._prefetcher = Prefetcher(spare, self.compiled) if spare > 0 else None
        self._gate = threading.Condition()
        self._quiet = False
        self._retiming = threading.Lock()  # one re-timing at a time
        self._running = 0  # compiles in flight

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
        self._lanes.shutdown(wait=True)

    @property
    def can_prefetch(self) -> bool:
        """Whether compile workers are spare for prefetching (more than the reserved ones)."""
        return self._prefetcher is not None

    def prefetch(self, shape: TuneShape, configs: Sequence[Any]) -> None:
        """Compile `configs` in the background on the spare compile workers (none: a no-op)."""
        if self._prefetcher is not None:
            self._prefetcher.add(shape, configs)

    def hint(self, shape: TuneShape, configs: Sequence[Any], source: Any = None) -> None:
        """A search's next configs, compiled before any prefetch list (replaces the last hint of
        the same search: `shape` and `source`)."""
        if self._prefetcher is not None:
            self._prefetcher.hint(shape, configs, source)

    def stop_prefetch(self, shape: TuneShape) -> None:
        """Drop `shape`'s prefetches not started yet (those running finish and are journaled)."""
        if self._prefetcher is not None:
            self._prefetcher.drop(shape)

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """No compile runs on this host inside this block: none starts, and those in flight are
        paused (local workers) or, where the pool cannot pause, waited for before the block.
        One quiet block at a time: a second waits for the first to end."""
        # Waiting cost 8.9-9.7 s per fp8 re-timing at batch 3072-4096 on the H200 (one long
        # compile of a large tile; benchmarks/RESULTS.md, session 5) and stalled the other GEMM's
        # search meanwhile; a paused compile loses only the block's seconds. A compile pool
        # without `pause` (a test's stand-in) is one that cannot.
        pause = getattr(self.compile_pool, "pause", None)
        with self._retiming:
            with self._gate:
                self._quiet = True
            try:
                with pause() if pause is not None else nullcontext(False) as paused:
                    if not paused:
                        with self._gate:
                            while self._running:
                                self._gate.wait()
                    yield
            finally:
                with self._gate:
                    self._quiet = False
                    self._gate.notify_all()

    def _compile(self, shape: TuneShape, config: Any) -> Any:
        """The compile pool's reply, started only outside a quiet block (one running when a
        block begins is paused in the pool, or counted in `_running` for the block to wait on)."""
        with self._gate:
            while self._quiet:
                self._gate.wait()
            self._running += 1
        try:
            return self.compile_pool.call("compile", config, shape, None)
        finally:
            with self._gate:
                self._running -= 1
                self._gate.notify_all()

    def compiled(self, shape: TuneShape, config: Any) -> Result:
        """The compile result of `config` for `shape`: from the journal, from a compile already in
        flight on another thread (a prefetch), or compiled now and journaled. Configs with one
        compile key (target.compile_key) share one compile, journaled under the key."""
        config = self.target.compile_key(config)
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
            reply = self._compile(shape, config)
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

    def measure(self, shape: TuneShape, batch: int, config: Any, key: str | None = None,
                probe: bool = False) -> Result:
        """One timing of a compiled `config`, journaled under `key` (default: the shape's key;
        re-timing rounds use their own keys, so each round is a line of its own); `probe`: the
        target's shorter ranking timing (a search's), else its full one."""
        key = key or shape.key()
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
        r = self.bench_pool.call("probe" if probe else "run", config, shape, batch)
        return self._measured(shape, batch, config, key, r)

    def measure_together(self, shape: TuneShape, batch: int, configs: Sequence[Any],
                         key: str) -> list[Result]:
        """`measure` of each of `configs` (full timings, journaled under `key`), the ones not
        journaled yet timed in turns in one request (the target's run_many; gpu_timing.py says
        why). Where that request fails as a whole, or a config is not ready to time (does not
        fit, did not compile), `measure` takes the config alone."""
        found: dict[Any, Result | None] = {
            c: self.journal.lookup(self.name, key, batch, c) for c in configs}
        ready = [c for c in configs if found[c] is None and self.target.fit_reason(c, shape) is None
                 and isinstance(self.compiled(shape, c), Ok)]
        if len(ready) > 1:
            reply = self.bench_pool.call("run_many", ConfigGroup(tuple(ready)), shape, batch)
            if isinstance(reply, list) and len(reply) == len(ready):
                for c, r in zip(ready, reply):
                    found[c] = self._measured(shape, batch, c, key, r)
        return [r if r is not None else self.measure(shape, batch, c, key)
                for c, r in found.items()]

    def _measured(self, shape: TuneShape, batch: int, config: Any, key: str, r: Result) -> Result:
        """Journal a timing, note a launch the SMEM model said would fit, say it."""
        self.journal.record(self.name, key, batch, config, r)
        if isinstance(r, DoesNotFit):
            self.model_bugs.append(ModelBug(key, config, r))
        self.progress("measured", {"job": shape.gemm, "batch": batch, "config": config.label(),
                                   "result": describe(r),
                                   "time_us": r.time_us if isinstance(r, Ok) else None})
        return r

    def check(self, shape: TuneShape, batch: int, config: Any) -> Result:
        """Whether `config`'s output matches the target's reference (journaled)."""
        key = f"check:{shape.key()}"
        known = self.journal.lookup(self.name, key, batch, config)
        if known is None:
            reply = self.bench_pool.call("check", config, shape, batch)
            known = Ok(0.0) if reply is None else (
                LaunchFailed(f"wrong result: {reply}") if isinstance(reply, str) else reply)
            self.journal.record(self.name, key, batch, config, known)
        return known

    def __call__(self, shape: TuneShape, batch: int, configs: Sequence[Any]) -> list[Result]:
        """A search's evaluate(configs): probe timings, in parallel, results in input order."""
        futures = [self._lanes.submit(self.measure, shape, batch, c, None, True) for c in configs]
        return [f.result() for f in futures]


class Predictions:
    """The performance model's times for one GEMM job's configs, each computed once per batch
    size (the prefetch order and every search of the job read the same figures)."""

    def __init__(self, target: Any, shape: TuneShape, dev: perfmodel.Device):
        self.shape = shape
        self.dev = dev
        self._tile = target.config_space.tile
        self._smem_of = getattr(target, "smem_bytes", None)
        self._smem: dict[Any, int] = {}
        self._times: dict[int, dict[Any, float]] = {}

    def at(self, batch: int) -> Callable[[Any], float]:
        """predict(config) -> microseconds at `batch`."""
        times = self._times.setdefault(batch, {})

        def predict(c: Any) -> float:
            t = times.get(c)
            if t is None:
                t = times[c] = perfmodel.predict_us(self._tile(c), self.shape, batch, self.dev,
                                                    self._smem_bytes(c))
            return t
        return predict

    def _smem_bytes(self, c: Any) -> int:
        if self._smem_of is None:
            return 0
        b = self._smem.get(c)
        if b is None:
            b = self._smem[c] = self._smem_of(c, self.shape)
        return b
