"""tune/schedule.py and how run.py uses it: a job's batch sizes in two ascending segments, each
seeded only by its own winners, searched side by side; picks do not depend on which search
finished first."""

from __future__ import annotations

import threading

import pytest

from tilefit.tune.journal import read_entries
from tilefit.tune.run import JOURNAL, TuneRequest, tune
from tilefit.tune.schedule import segments, side_by_side
from tilefit.tune.targets.base import MOE_SPACE, TargetSpec, TuneShape
from tilefit.tune.targets.registry import STANDARD_BATCHES

LAYER = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)  # GLM-5 under EP8


def test_segments_split_at_1024_and_ascend():
    assert segments(STANDARD_BATCHES) == (
        (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512), (1024, 1536, 2048, 3072, 4096))
    assert segments((4096, 1, 64, 1024)) == ((1, 64), (1024, 4096))
    assert segments((1, 64), 1024) == ((1, 64),)
    assert segments((2048, 4096), 1024) == ((2048, 4096),)
    assert segments((1, 64, 4096), 0) == ((1, 64, 4096),)


def test_side_by_side_raises_the_first_error_and_stops_the_others():
    stopping = threading.Event()
    seen = []

    def fails():
        raise ValueError("boom")

    def waits():
        for _ in range(500):
            if stopping.is_set():
                seen.append("stopped")
                return "stopped"
            threading.Event().wait(0.01)
        return "ran out"

    with pytest.raises(ValueError, match="boom"):
        side_by_side([waits, fails], stopping)
    assert seen == ["stopped"] and not stopping.is_set()
    assert side_by_side([lambda: 1, lambda: 2], stopping) == [1, 2]


def _run(out, side_by_side_=True, split_at=1024):
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=7, grid="distinct",
                         compile_sleep_s=0.005)
    return tune(TuneRequest(spec, (LAYER,), (1, 16, 64, 1024, 2048, 4096), out, "h200",
                            "NVIDIA H200", compile_workers=2, compile_timeout_s=20.0,
                            run_timeout_s=20.0, rounds=2, side_by_side=side_by_side_,
                            split_at=split_at))


def _searched(out, job, batch):
    return [e.config for e in read_entries(out / JOURNAL, MOE_SPACE.from_dict)
            if e.batch == batch and e.shape.startswith(job)]


def test_segments_side_by_side_pick_what_they_pick_one_after_the_other(tmp_path):
    together = _run(tmp_path / "together")
    alone = _run(tmp_path / "alone", side_by_side_=False)
    assert [(r.job, r.batch) for r in together.rows] == [(r.job, r.batch) for r in alone.rows]
    assert [r.job for r in together.rows] == ["gemm1"] * 6 + ["gemm2"] * 6
    assert [r.batch for r in together.rows][:6] == [1, 16, 64, 1024, 2048, 4096]
    assert [r.config for r in together.rows] == [r.config for r in alone.rows]
    # The high segment's first search is unseeded: its first trials are not the 64 winner.
    for job in ("gemm1", "gemm2"):
        for batch in (1024, 2048, 4096):
            assert (set(_searched(tmp_path / "together", job, batch))
                    == set(_searched(tmp_path / "alone", job, batch)))


def test_the_high_segment_is_not_seeded_by_the_low_one(tmp_path):
    split = _run(tmp_path / "split")
    whole = _run(tmp_path / "whole", split_at=0)
    low = {r.batch: r.config for r in split.rows if r.job == "gemm1" and r.batch < 1024}
    assert low == {r.batch: r.config for r in whole.rows if r.job == "gemm1" and r.batch < 1024}
    first_split = _searched(tmp_path / "split", "gemm1", 1024)
    first_whole = _searched(tmp_path / "whole", "gemm1", 1024)
    # The first chunk (fast.py: the seeds, the default, the model's top 8) is measured at once,
    # and journaled as its timings end, in any order within it.
    assert low[64] in first_whole[:3 + 1 + 8]  # seeded: the neighbour's winner in the first chunk
    assert low[64] not in first_split[:1 + 8]  # unseeded: only the default and the model's top 8
    # Not the job's first search: the seeded searches' cap, not the first search's larger one.
    first_low = _searched(tmp_path / "split", "gemm1", 1)
    assert len(first_split) == len(first_whole) < len(first_low)


def test_the_files_and_emit_get_the_winners_in_the_request_s_batch_order(tmp_path, monkeypatch):
    """Segments end in any order (side by side) and the low one first (in turns): the winners
    handed to the target's writer and to --emit (whose re-timings and replacement warnings go by
    them) are in the request's batch order, as the rows are, whichever search ended first."""
    from tilefit.tune.targets.fake import FakeTarget

    seen = []
    write = FakeTarget.write

    def spy(self, out_dir, shape, device_name, winners):
        seen.append({job: list(picks) for job, picks in winners.items()})
        return write(self, out_dir, shape, device_name, winners)

    monkeypatch.setattr(FakeTarget, "write", spy)
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=7, grid="distinct")
    report = tune(TuneRequest(spec, (LAYER,), (2048, 1, 64), tmp_path, "h200", "NVIDIA H200",
                              compile_workers=2, compile_timeout_s=20.0, run_timeout_s=20.0,
                              rounds=1, side_by_side=False))
    assert [r.batch for r in report.rows] == [2048, 1, 64] * 2
    assert seen == [{"gemm1": [2048, 1, 64], "gemm2": [2048, 1, 64]}]


def test_a_job_s_prefetches_stop_when_its_last_segment_ends(tmp_path, monkeypatch):
    """A GEMM's prefetch list (its likely winners, queued at the layer's start) is of no use once
    both its segments are searched: it is dropped then, as before the segments, not at the end of
    the layer, where it kept spare compile workers from the other GEMM's searches."""
    from tilefit.tune import evaluator

    monkeypatch.setattr(evaluator, "RESERVED_COMPILE_WORKERS", 1)  # one spare worker prefetches
    events = []
    stop = evaluator.Evaluator.stop_prefetch
    monkeypatch.setattr(evaluator.Evaluator, "stop_prefetch",
                        lambda self, shape: (events.append(("stop", shape.gemm)),
                                             stop(self, shape))[1])
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=7, grid="distinct")
    tune(TuneRequest(spec, (LAYER,), (1, 2048), tmp_path, "h200", "NVIDIA H200",
                     compile_workers=2, compile_timeout_s=20.0, run_timeout_s=20.0, rounds=1,
                     side_by_side=False),
         lambda event, data: events.append((event, data["job"])) if event == "job" else None)
    assert events.index(("stop", "gemm1")) < events.index(("job", "gemm2"))
