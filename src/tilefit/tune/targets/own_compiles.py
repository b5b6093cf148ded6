"""Kernels a GPU worker compiled itself. The compile pool compiles every config ahead of its first
launch, into Triton's cache, under the key Triton's launcher will make; a launch that misses the
cache compiles on the GPU worker instead, holding the GPU for the compile's seconds. The run is
slower, not wrong, and nothing else shows it: session 8's H200 runs (benchmarks/RESULTS.md) lost
~45 s of a 100 s TP8 fp8-block run to ~73 such compiles before the oracle's key was fixed.

`watch(name)` counts, in this process, Triton's compiles of kernels called `name` that did not come
from its cache (`triton.knobs.compilation.listener`, read in Triton 3.6; a Triton without it
counts nothing). A listener set before is still called.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

_lock = threading.Lock()
_counts: dict[str, int] = {}
_installed = False


def _listener(previous: Any) -> Any:
    def listener(*, src: Any, metadata: Any, metadata_group: Any, times: Any,
                 cache_hit: bool) -> None:
        name = getattr(src, "name", None)
        if not cache_hit and name in _counts:
            with _lock:
                _counts[name] += 1
        if previous is not None:
            previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times,
                     cache_hit=cache_hit)
    return listener


def watch(name: str) -> bool:
    """Count `name`'s compiles from now on; whether Triton can tell this process's compiles."""
    global _installed
    try:
        from triton import knobs
        compilation = knobs.compilation
    except (ImportError, AttributeError):
        return False
    if not hasattr(compilation, "listener"):
        return False
    with _lock:
        _counts.setdefault(name, 0)
        if not _installed:
            compilation.listener = _listener(compilation.listener)
            _installed = True
    return True


def count(name: str) -> int:
    """`name`'s compiles counted so far (0 if not watched)."""
    with _lock:
        return _counts.get(name, 0)


def gather(pool: Any, shapes: Sequence[Any], progress: Any) -> int | None:
    """The GPU pool's count at a run's end (pools.WorkerPool.stats; None: not counted), and the
    warning through `progress` when there were any."""
    n = pool.stats(shapes[0]).get("own_compiles") if shapes else None
    if n:
        progress("warning", {"message": warning(n)})
    return n


def warning(n: int) -> str:
    """The line a run prints when its GPU workers compiled `n` kernels themselves."""
    return (f"the GPU worker compiled {n} kernel(s) itself at their first launch, each holding "
            f"the GPU for a compile: Triton's cache did not have them under the key the launch "
            f"made (the compile pool compiled them under another key, or the cache was emptied "
            f"since). The picks are not affected. Unless the cache was emptied, please report it "
            f"with the versions in the journal")
