"""tune/prefetch.py: a search's newest hint compiles before the prefetch lists; an older hint for
the same shape is dropped once a newer one comes; dropping a shape forgets its queue."""

from __future__ import annotations

import threading

from tilefit.tune.prefetch import Prefetcher
from tilefit.tune.targets.base import TuneShape

G1 = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
G2 = G1.with_gemm("gemm2")


def _held():
    """A one-worker prefetcher busy on a first compile until `go` is set, so that what is queued
    meanwhile comes out in queue order; `done` lists (gemm, config) as compiled."""
    go, started, done = threading.Event(), threading.Event(), []

    def compile(shape, config):
        if config == "first":
            started.set()
            go.wait(5)
        done.append((shape.gemm, config))

    p = Prefetcher(1, compile)
    p.add(G1, ["first"])
    assert started.wait(5)
    return p, go, done


def test_hints_go_first_and_a_newer_hint_replaces_the_older():
    p, go, done = _held()
    p.add(G1, ["list-a", "list-b"])
    p.hint(G1, ["old-hint"])
    p.hint(G2, ["other-shape-hint"])
    p.hint(G1, ["new-hint-1", "new-hint-2"])
    go.set()
    while len(done) < 6:
        threading.Event().wait(0.01)
    p.close()
    assert done == [("gemm1", "first"), ("gemm2", "other-shape-hint"), ("gemm1", "new-hint-1"),
                    ("gemm1", "new-hint-2"), ("gemm1", "list-a"), ("gemm1", "list-b")]


def test_an_empty_hint_and_drop_forget_queued_work():
    p, go, done = _held()
    p.hint(G1, ["hint"])
    p.hint(G1, [])  # the search is over
    p.add(G1, ["list"])
    p.add(G2, ["kept"])
    p.drop(G1)
    go.set()
    while len(done) < 2:
        threading.Event().wait(0.01)
    p.close()
    assert done == [("gemm1", "first"), ("gemm2", "kept")]


def test_two_searches_of_one_shape_keep_their_own_hints():
    """One job's two batch-size segments search the same shape at once: a hint replaces only the
    earlier hint of its own search, and dropping the shape forgets both."""
    p, go, done = _held()
    p.hint(G1, ["low-old"], source=1)
    p.hint(G1, ["high"], source=1024)
    p.hint(G1, ["low-new"], source=1)
    go.set()
    while len(done) < 3:
        threading.Event().wait(0.01)
    p.close()
    assert done == [("gemm1", "first"), ("gemm1", "high"), ("gemm1", "low-new")]
