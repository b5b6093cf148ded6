"""Pools of worker processes (workers.py): what the tuner sends its compiles and timings to.

`RequestPool` is what every pool offers (local processes here, a Ray cluster in ray_executor.py);
`Trace` records where a run's time goes (each request's wait and run, each pause and closing);
`WorkerPool` runs requests over local workers, one per CPU core for compiling and one per GPU for
timing, pauses its compile workers while the GPU is timed, and serves a finalist's re-timing before
the searches' probes.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tilefit.errors import UsageError
from tilefit.tune.targets.base import TargetSpec, TuneShape
from tilefit.tune.workers import Worker


class Trace:
    """A JSON line per request served by a pool (`tilefit tune --trace`, bench_tune `--trace`): the
    pool, op, shape, batch, when it was asked (s since `t0`, the run's start, after the lines of
    the runs it is appended to), how long it waited for a worker and how long the worker took;
    also each pause of the compile workers and each pool's closing. For finding where a run's time
    goes; thread-safe."""

    def __init__(self, path: Any, t0: float | None = None):
        path = Path(path)
        try:  # a folder, a FIFO (its open would block), no write permission: one line, exit 2
            if path.exists() and not path.is_file():
                raise UsageError(f"trace {path} is not a regular file; give a file's name")
            path.parent.mkdir(parents=True, exist_ok=True)
            # Appended: a resumed run keeps the first's lines, its own times following theirs.
            since = _trace_end(path)
            self._file = open(path, "a", encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot write trace {path}: {e.strerror or e}; give a file in a "
                             f"writable folder") from None
        self._lock = threading.Lock()
        self._t0 = (time.monotonic() if t0 is None else t0) - since  # t0: the run's start

    def record(self, pool: str, op: str, shape: TuneShape | None, batch: int | None, asked: float,
               started: float, done: float, work_s: float | None = None) -> None:
        """One request (or, with no shape, a pause of the pool's workers or its closing: `started`
        to `done`); `work_s`, where the worker replied, its own time on the request. The rest of
        `run_s` is the pipe and this process's threads, and a worker process (re)started for the
        request (a warm-up, the first request after a crash), and for a compile worker the time
        its request waited in the pipe while the pool was paused."""
        key = shape.key() if shape is not None else None
        fields = {"pool": pool, "op": op, "shape": key, "batch": batch,
                  "t": round(asked - self._t0, 4), "wait_s": round(started - asked, 4),
                  "run_s": round(done - started, 4)}
        if work_s is not None:
            fields["work_s"] = round(work_s, 4)
        line = json.dumps(fields)
        with self._lock:
            if self._file.closed:  # a warm-up that outlived its pool's close (Ctrl-C in the join)
                return
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        """Close the file; a line recorded after (a warm-up outliving its pool) is dropped."""
        with self._lock:
            self._file.close()

    @staticmethod
    @contextmanager
    def opened(path: Any, t0: float) -> Iterator[Trace | None]:
        """A trace to `path` for the block, closed after it (None: no trace, no path)."""
        trace = Trace(path, t0) if path is not None else None
        try:
            yield trace
        finally:
            if trace is not None:
                trace.close()


def _trace_end(path: Path) -> float:
    """Where an earlier run's lines in the trace at `path` end (s on its clock; 0 for none), so
    that a resumed run's lines follow them instead of overlapping them from 0."""
    end = 0.0
    if not path.exists():
        return end
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                d = json.loads(line)
                end = max(end, float(d["t"]) + float(d["wait_s"]) + float(d["run_s"]))
            except (ValueError, KeyError, TypeError):  # a torn last line, a line not a trace's
                continue
    return end


# Requests that decide a pick: the finalists' full timings (alone or in turns) and the output
# check. A search's "probe" only ranks configs for the search; "compile" runs on the CPU pool.
URGENT = frozenset({"run", "run_many", "check"})


class RequestPool(ABC):
    """What every pool of workers offers the tuner (local processes here, Ray in ray_executor):
    `call` one request on the next free worker, `map` many in parallel (results in input order),
    `stats` of the target's counters, and context management."""

    size: int  # requests served at once
    _threads: ThreadPoolExecutor | None = None

    @abstractmethod
    def call(self, op: str, config: Any, shape: TuneShape, batch: int | None) -> Any:
        """One request's reply, or a failure value; thread-safe."""

    @contextmanager
    def pause(self) -> Iterator[bool]:
        """Hold the pool's requests in flight stopped for the block, if it can: yields whether it
        does. This default cannot (a Ray task runs on a host this process does not signal)."""
        yield False

    def stats(self, shape: TuneShape) -> dict[str, int]:
        """The target's counters summed over the pool's workers; this default has none (a Ray
        task's process is the cluster's)."""
        return {}

    def map(self, op: str, items: Sequence[tuple[Any, TuneShape, int | None]]) -> list[Any]:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(max_workers=self.size)
        return list(self._threads.map(lambda item: self.call(op, *item), items))

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)

    def __enter__(self) -> RequestPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Turns:
    """Idle workers handed to waiting requests: URGENT ones first, the rest in arrival order."""

    def __init__(self, workers: Sequence[Worker]):
        self._idle = list(workers)
        self._waiting: list[tuple[int, int]] = []  # (0 urgent / 1 not, arrival): a heap
        self._arrival = itertools.count()
        self._cv = threading.Condition()

    def take(self, urgent: bool) -> Worker:
        with self._cv:
            ticket = (0 if urgent else 1, next(self._arrival))
            heapq.heappush(self._waiting, ticket)
            try:
                while not (self._idle and self._waiting[0] == ticket):
                    self._cv.wait()
            except BaseException:  # Ctrl-C in the main thread: its ticket must not block the rest
                self._waiting.remove(ticket)
                heapq.heapify(self._waiting)
                self._cv.notify_all()
                raise
            heapq.heappop(self._waiting)
            worker = self._idle.pop(0)
            self._cv.notify_all()  # the next ticket may find a worker too
            return worker

    def give(self, worker: Worker) -> None:
        with self._cv:
            self._idle.append(worker)
            self._cv.notify_all()


class WorkerPool(RequestPool):
    """Several workers serving a list of requests in parallel; results come back in input order.
    An URGENT request (a finalist's re-timing or output check) gets the next free worker before
    the searches' probes waiting for it: on one GPU shared by four searches, a re-timing waited
    behind the others' probes, and every compile on the host stays paused while it waits
    (benchmarks/RESULTS.md, session 6: quiet blocks of 3-5 s for 13 timings of ~12 ms)."""

    def __init__(self, spec: TargetSpec, devices: Sequence[int | None], *, timeout: float,
                 trace: Trace | None = None, name: str = ""):
        if not devices:
            raise ValueError("a worker pool needs at least one worker")
        self.timeout = timeout
        self.trace, self.name = trace, name
        self.workers = [Worker(spec, d) for d in devices]
        self.size = len(self.workers)
        self._turns = _Turns(self.workers)
        self._pausing = threading.Lock()
        self._warming: list[threading.Thread] = []
        self._pauses = 0  # pause blocks open (they may nest or overlap: the last one resumes)
        self._paused_at = 0.0

    def call(self, op: str, config: Any, shape: TuneShape, batch: int | None) -> Any:
        """One request on the next idle worker (blocks while all are busy; URGENT ops go first);
        thread-safe."""
        asked = time.monotonic()
        worker = self._turns.take(op in URGENT)
        started = time.monotonic()
        try:
            return worker.call(op, config, shape, batch, self.timeout)
        finally:
            done, work_s = time.monotonic(), worker.last_work_s  # before another thread's request
            self._turns.give(worker)
            if self.trace is not None:
                self.trace.record(self.name, op, shape, batch, asked, started, done, work_s)

    def stats(self, shape: TuneShape) -> dict[str, int]:
        """The target's counters (its optional `stats()`), summed over the workers running now;
        none is started for it. Waits until every worker is idle and holds them all meanwhile."""
        held = [self._turns.take(True) for _ in self.workers]
        total: dict[str, int] = {}
        try:
            for worker in held:
                if not worker.alive:
                    continue
                reply = worker.call("stats", None, shape, None, self.timeout)
                for key, value in (reply.items() if isinstance(reply, dict) else ()):
                    total[key] = total.get(key, 0) + int(value)
        finally:
            for worker in held:
                self._turns.give(worker)
        return total

    def warm(self, shape: TuneShape) -> None:
        """Start every worker now, in the background, each readying what `shape`'s requests will
        need (the target's `warm`: imports; a GPU worker's CUDA context). A worker process takes
        seconds to start (H200 host: the first probe of a run took 5.4 s, benchmarks/RESULTS.md
        session 7), time the run spent waiting before; requests that come meanwhile wait their
        turn behind the warm-up as they would behind the start."""
        def warm_one() -> None:
            try:
                self.call("warm", None, shape, None)
            except Exception:  # noqa: BLE001 - no traceback from a thread: the first request meets it
                pass

        for _ in self.workers:
            thread = threading.Thread(target=warm_one, daemon=True, name="tilefit-warm")
            thread.start()
            self._warming.append(thread)

    @contextmanager
    def pause(self) -> Iterator[bool]:
        """Compile workers: each stopped (its group) for the block with its request in flight, then
        continued; requests sent meanwhile wait, and so does a (re)start. GPU workers: False."""
        if not all(w.pausable for w in self.workers):
            yield False
            return
        with self._pausing:
            self._pauses += 1
            if self._pauses == 1:
                self._paused_at = time.monotonic()
                for w in self.workers:
                    w.pause()
        try:
            yield True
        finally:
            with self._pausing:
                self._pauses -= 1
                if self._pauses == 0:
                    for w in self.workers:
                        w.resume()
                    if self.trace is not None:
                        now = time.monotonic()
                        self.trace.record(self.name, "pause", None, None, self._paused_at,
                                          self._paused_at, now)

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w in self.workers)

    def close(self) -> None:
        closing = time.monotonic()
        for thread in self._warming:  # a warm-up in flight holds its worker: let it finish
            thread.join()
        for w in self.workers:  # all asked first, so they leave side by side
            w.ask_stop()  # resumes a paused worker first, so it can read "stop" and leave
        for w in self.workers:
            w.stop(asked=True)
        if self.trace is not None:  # how long the workers took to leave
            self.trace.record(self.name, "close", None, None, closing, closing, time.monotonic())
        super().close()


def default_compile_workers() -> int:
    """One compile worker per CPU core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)

