"""Which searches of a layer run at once, and in what order.

A job's batch sizes are searched in two segments, each in ascending order and seeded only by its
own winners: the batch sizes below `split_at` from the smallest, and those from `split_at` up,
starting unseeded at `split_at`. With the GEMMs side by side that is four searches at once, and
the two kinds of search need different resources: the small batches' searches keep the GPU busy
(their configs are compiled by then, their timings are the cost), the large batches' wait on
compiles of large tiles (BLOCK_SIZE_M 64-128, 8 warps). One after the other, the GPU idled through
the large batches' compiles (H200, GLM-5 EP8 bf16: 43 of 95 s; benchmarks/RESULTS.md, session 6).

Why 1024: an unseeded fast search there found the exhaustive sweep's best on every H200 landscape
swept in full (EP8/TP8, bf16/fp8-block; benchmarks/results/tune_v3_journals), while at 4096 the
performance model misranks fp8-block so badly that an unseeded search ended 1.71-1.73x behind.
Each segment reads only its own winners, so a search does not depend on which other search
finished first: a resumed run retraces the same steps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TypeVar

SPLIT_AT = 1024
T = TypeVar("T")


def segments(batches: Sequence[int], split_at: int = SPLIT_AT) -> tuple[tuple[int, ...], ...]:
    """The batch sizes in their search segments, each ascending (0 or below the smallest batch
    size: one segment)."""
    ordered = tuple(sorted(set(batches)))
    low = tuple(b for b in ordered if b < split_at)
    high = tuple(b for b in ordered if b >= split_at)
    return tuple(s for s in (low, high) if s)


def side_by_side(tasks: Sequence[Callable[[], T]], stopping: threading.Event) -> list[T]:
    """Run `tasks` on threads of their own; their results in order. The first task to fail
    sets `stopping` (the others end at their next search) and its error is raised once all end."""
    pool = ThreadPoolExecutor(max_workers=max(1, len(tasks)), thread_name_prefix="tilefit-search")
    futures = [pool.submit(task) for task in tasks]
    try:
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in finished:
            error = f.exception()
            if error is not None:
                raise error
        return [f.result() for f in futures]
    finally:
        stopping.set()  # the others stop at their next search (an error, Ctrl-C)
        pool.shutdown(wait=True)
        stopping.clear()
