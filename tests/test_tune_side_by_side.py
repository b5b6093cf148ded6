"""The GEMMs of a layer searched side by side (run.py): the same picks as one after the other, the
searches really overlap, and a re-timing holds back every compile, the other GEMM's search's too."""

from __future__ import annotations

import threading
import time

import pytest

from tilefit.tune.evaluator import Evaluator
from tilefit.tune.journal import Journal, read_entries
from tilefit.tune.results import Ok
from tilefit.tune.run import JOURNAL, TuneRequest, tune
from tilefit.tune.targets.base import MOE_SPACE, TargetSpec, TuneShape
from tilefit.tune.targets.fake import FakeTarget

LAYER = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)  # GLM-5 under EP8
BATCHES = (1, 16, 64, 1024)


class _InTurnsTarget(FakeTarget):
    """The fake with a `restrict` that ties the jobs: the run searches them one after the other."""

    def restrict(self, job, batch, configs, winners):
        return configs

    ties_jobs = property(lambda self: True, lambda self, value: None)


def _run(out, factory, side_by_side=True):
    spec = TargetSpec.of(factory, seed=5, grid="distinct", compile_sleep_s=0.01)
    return tune(TuneRequest(spec, (LAYER,), BATCHES, out, "h200", "NVIDIA H200", compile_workers=2,
                            compile_timeout_s=20.0, run_timeout_s=20.0, rounds=2,
                            side_by_side=side_by_side))


def test_side_by_side_picks_what_one_after_the_other_picks(tmp_path):
    together = _run(tmp_path / "together", "tilefit.tune.targets.fake:FakeTarget")
    in_turns = _run(tmp_path / "turns", f"{__name__}:_InTurnsTarget")
    asked = _run(tmp_path / "asked", "tilefit.tune.targets.fake:FakeTarget", side_by_side=False)
    assert [(r.job, r.batch, r.config) for r in together.rows] == \
        [(r.job, r.batch, r.config) for r in in_turns.rows] == \
        [(r.job, r.batch, r.config) for r in asked.rows]
    assert [r.job for r in together.rows] == ["gemm1"] * 4 + ["gemm2"] * 4

    def overlap(out):
        searched = [e for e in read_entries(out / JOURNAL, MOE_SPACE.from_dict)
                    if e.batch is not None and e.shape.split(":")[0] in ("gemm1", "gemm2")]
        first_gemm2 = min(i for i, e in enumerate(searched) if e.shape.startswith("gemm2"))
        last_gemm1 = max(i for i, e in enumerate(searched) if e.shape.startswith("gemm1"))
        return first_gemm2 < last_gemm1
    assert overlap(tmp_path / "together") and not overlap(tmp_path / "turns")
    assert not overlap(tmp_path / "asked")


class _SlowCompiles:
    """A compile pool whose calls take 50 ms, recording when each starts and ends."""

    def __init__(self, size):
        self.size, self.spans, self.restarts = size, [], 0
        self._lock = threading.Lock()

    def call(self, op, config, shape, batch):
        start = time.monotonic()
        time.sleep(0.05)
        with self._lock:
            self.spans.append((start, time.monotonic()))


class _Bench:
    size, restarts = 1, 0

    def call(self, op, config, shape, batch):
        return None if op in ("compile", "check") else Ok(10.0)


def test_a_retiming_holds_back_the_other_searchs_compiles(tmp_path):
    """While one GEMM's finalists are re-timed, the other GEMM's search compiles nothing: its
    compiles in flight end first, and the next wait until the quiet block is over."""
    other = LAYER.with_gemm("gemm2")
    configs = FakeTarget(grid="distinct").space(other)[:24]
    with Journal(tmp_path / "j.jsonl", resume=False, context={},
                 from_dict=MOE_SPACE.from_dict) as j:
        pool = _SlowCompiles(4)
        ev = Evaluator("fake", FakeTarget(), j, pool, _Bench(), [], lambda e, d: None)
        search = threading.Thread(target=lambda: [ev(other, 16, configs[i:i + 4])
                                                  for i in range(0, len(configs), 4)])
        search.start()
        time.sleep(0.08)
        with ev.quiet():
            entered = time.monotonic()
            time.sleep(0.25)
            left = time.monotonic()
        search.join(10)
        ev.close()
    assert not [s for s in pool.spans if s[1] > entered and s[0] < left]
    assert len(pool.spans) == 24  # the search went on after the quiet block
    assert all(isinstance(j.lookup("fake", other.key(), 16, c), Ok) for c in configs)


def test_a_job_that_fails_stops_the_other_at_its_next_search(tmp_path, monkeypatch):
    """gemm2's first search raises; gemm1 must not go on through its batch sizes."""
    import tilefit.tune.run as run_mod

    started = []
    original = run_mod._Run.batch

    def batch(self, seg, b, *args):
        started.append((seg.job.shape.gemm, b))
        if seg.job.shape.gemm == "gemm2":
            raise RuntimeError("boom")
        time.sleep(0.2)
        return original(self, seg, b, *args)

    monkeypatch.setattr(run_mod._Run, "batch", batch)
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=5, grid="distinct")
    req = TuneRequest(spec, (LAYER,), (1, 2, 4, 8, 16, 32, 64, 128), tmp_path, "h200", "NVIDIA H200",
                      compile_workers=2, rounds=1)
    with pytest.raises(RuntimeError, match="boom"):
        tune(req)
    assert len([s for s in started if s[0] == "gemm1"]) <= 3
