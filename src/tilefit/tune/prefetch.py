"""Compiles ahead of the searches, on the compile workers a search does not wait on.

Two kinds of work, one queue: a search's hint (the configs its strategy may ask for next, newest
hint per search only: an older one is stale once the search has moved on) goes before the
performance model's prefetch lists (each GEMM's likely winners at every batch size, queued at the
start of the layer, dropped once the GEMM's searches end). A compile here is the evaluator's own (journaled, shared with a search that
asks for the same config meanwhile, held back while finalists are re-timed).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tilefit.tune.targets.base import TuneShape

HINT, LIST = 0, 1  # priorities: lower first


class Prefetcher:
    """`workers` threads compiling queued (shape, config) pairs with `compile(shape, config)`."""

    def __init__(self, workers: int, compile: Callable[[TuneShape, Any], Any]):
        self._compile = compile
        # (priority, order, shape key, hint key, generation, shape, config)
        self._heap: list[tuple[int, int, str, tuple[str, Any], int, TuneShape, Any]] = []
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._hints: dict[tuple[str, Any], int] = {}  # (shape key, source) -> newest generation
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"tilefit-prefetch-{i}",
                                          daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def add(self, shape: TuneShape, configs: Sequence[Any]) -> None:
        """Queue a prefetch list (after every hint)."""
        self._push(LIST, shape, configs, 0)

    def hint(self, shape: TuneShape, configs: Sequence[Any], source: Any = None) -> None:
        """Queue `configs` first, in place of the earlier hint of the same search (`shape` and
        `source`: one job's batch-size segments search the same shape at once); empty: drop it."""
        key = (shape.key(), source)
        with self._cv:
            generation = self._hints[key] = self._hints.get(key, 0) + 1
        self._push(HINT, shape, configs, generation, source)

    def drop(self, shape: TuneShape) -> None:
        """Forget `shape`'s queued work (compiles running finish)."""
        key = shape.key()
        with self._cv:
            self._heap = [item for item in self._heap if item[2] != key]
            heapq.heapify(self._heap)

    def close(self) -> None:
        """Drop the queue, let the running compiles finish, end the threads."""
        with self._cv:
            self._closed = True
            self._heap = []
            self._cv.notify_all()
        for thread in self._threads:
            thread.join()

    def _push(self, priority: int, shape: TuneShape, configs: Sequence[Any], generation: int,
              source: Any = None) -> None:
        key = shape.key()
        with self._cv:
            if self._closed:
                return
            for c in configs:
                heapq.heappush(self._heap, (priority, next(self._seq), key, (key, source),
                                            generation, shape, c))
            self._cv.notify_all()

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._heap and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                priority, _, _, hint_key, generation, shape, config = heapq.heappop(self._heap)
                if priority == HINT and generation != self._hints.get(hint_key):
                    continue  # a newer hint replaced it
            try:
                self._compile(shape, config)
            except Exception:  # noqa: BLE001 - a pool closing under us; the search compiles it anyway
                pass
