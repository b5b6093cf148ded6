"""Result values and the journal: exact round trips, torn last lines, resume lookups."""

from __future__ import annotations

import json

import pytest

from tilefit.errors import UsageError
from tilefit.kernels.triton_moe.config import MoEConfig
from tilefit.tune.journal import Journal, read_entries
from tilefit.tune.results import (CompileFailed, Crashed, DoesNotFit, LaunchFailed, Ok, Timeout,
                                  describe, from_json, parse_out_of_resources, to_json)
from tilefit.tune.targets.base import MOE_SPACE

MOE = MOE_SPACE.from_dict
H200 = {"gpu": "NVIDIA H200", "versions": {"tilefit": "0.1.0", "triton": "3.6.0", "torch": "2.11.0"}}

ALL = [Ok(12.5), DoesNotFit("shared memory", 245760, 232448), CompileFailed("PassManager::run failed"),
       LaunchFailed("illegal memory access"), Timeout(5.0, "compile"), Crashed(11, None, "run")]
CFG = MoEConfig(16, 32, 64, 1, 4, 3)


@pytest.mark.parametrize("result", ALL)
def test_results_round_trip(result):
    assert from_json(json.loads(json.dumps(to_json(result)))) == result
    assert describe(result)


def test_triton_out_of_resources_is_does_not_fit():
    msg = ("OutOfResources: out of resource: shared memory, Required: 147456, Hardware limit: "
           "101376. Reducing block sizes or `num_stages` may help.")
    assert parse_out_of_resources(msg) == DoesNotFit("shared memory", 147456, 101376)
    assert parse_out_of_resources("RuntimeError: PassManager::run failed") is None


def test_resume_reads_back_and_tolerates_torn_line(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, resume=False, context=H200, from_dict=MOE) as j:
        for i, r in enumerate(ALL):
            j.record("fake", "s", i, CFG, r)
        j.record("fake", "s", None, CFG, Ok(0.0))
    with open(path, "ab") as f:  # a SIGKILL in the middle of a write
        f.write(b'{"v": 1, "target": "fake", "shape": "s", "ba')
    with pytest.raises(UsageError, match="--resume"):
        Journal(path, resume=False, context=H200, from_dict=MOE)
    with Journal(path, resume=True, context=H200, from_dict=MOE) as j:
        assert j.resumed == len(ALL) + 1 and j.stale == 0
        for i, r in enumerate(ALL):
            assert j.lookup("fake", "s", i, MoEConfig(16, 32, 64, 1, 4, 3)) == r
        assert j.lookup("fake", "s", 99, CFG) is None
        j.record("fake", "s", 99, CFG, Ok(1.0))
    # The torn tail was cut before appending: every line parses.
    entries = list(read_entries(path, MOE))
    assert len(entries) == len(ALL) + 2 and entries[-1].result == Ok(1.0)
    assert all(json.loads(line)["gpu"] for line in path.read_text().splitlines()[:3])


# A line exactly as journals written before configs became MoEConfig values look (keys in the
# engines' order or not, values as JSON ints), with a compile line (batch null).
OLD_LINES = [
    '{"v": 1, "target": "fake", "shape": "gemm1:E=32/256,H=6144,I=2048,k=8,bf16", "batch": null, '
    '"config": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16, '
    '"num_warps": 4, "num_stages": 3}, "result": {"kind": "ok", "time_us": 0.0}, "t": 1700000000.0, '
    '"versions": {"tilefit": "0.1.0"}, "gpu": "NVIDIA H200"}',
    '{"v": 1, "target": "fake", "shape": "gemm1:E=32/256,H=6144,I=2048,k=8,bf16", "batch": 64, '
    '"config": {"num_stages": 3, "num_warps": 4, "GROUP_SIZE_M": 16, "BLOCK_SIZE_K": 64, '
    '"BLOCK_SIZE_N": 128, "BLOCK_SIZE_M": 64}, "result": {"kind": "ok", "time_us": 41.25}, '
    '"t": 1700000001.0, "versions": {"tilefit": "0.1.0"}, "gpu": "NVIDIA H200"}',
]


def test_journal_written_before_moeconfig_still_resumes(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text("\n".join(OLD_LINES) + "\n")
    cfg = MoEConfig(64, 128, 64, 16, 4, 3)
    shape = "gemm1:E=32/256,H=6144,I=2048,k=8,bf16"
    assert [e.config for e in read_entries(path, MOE)] == [cfg, cfg]
    # tilefit's own version is not part of the resume key: a newer CLI resumes the same lines.
    with Journal(path, resume=True, context={"gpu": "NVIDIA H200", "versions": {"tilefit": "0.2"}},
                 from_dict=MOE) as j:
        assert j.resumed == 2 and j.stale == 0
        assert j.lookup("fake", shape, 64, cfg) == Ok(41.25)
        assert j.lookup("fake", shape, None, cfg) == Ok(0.0)
        assert j.lookup("fake", shape, 64, MoEConfig(64, 128, 64, 16, 4, 4)) is None
        j.record("fake", shape, 1, cfg, Ok(9.5))
    new = json.loads(path.read_text().splitlines()[-1])
    # the config's spelling did not change; the format did (2: "fp8-block" names block-scaled fp8)
    assert new["config"] == cfg.as_dict() and new["v"] == 2


def test_line_whose_config_lacks_a_key_is_usage_error(tmp_path):
    path = tmp_path / "j.jsonl"
    bad = json.loads(OLD_LINES[1])
    del bad["config"]["num_stages"]
    path.write_text(json.dumps(bad) + "\n" + OLD_LINES[0] + "\n")
    with pytest.raises(UsageError, match="line 1"):
        Journal(path, resume=True, context={}, from_dict=MOE)


@pytest.mark.parametrize("changed", [{"gpu": "NVIDIA H100 80GB HBM3"},
                                     {"versions": {"tilefit": "0.1.0", "triton": "3.7.0",
                                                   "torch": "2.11.0"}}])
def test_resume_after_an_upgrade_or_on_another_gpu_measures_again(tmp_path, changed):
    path = tmp_path / "j.jsonl"
    with Journal(path, resume=False, context=H200, from_dict=MOE) as j:
        j.record("fake", "s", 1, CFG, Ok(3.0))
        j.record("fake", "s", None, CFG, Ok(0.0))
    with Journal(path, resume=True, context={**H200, **changed}, from_dict=MOE) as j:
        assert j.resumed == 0 and j.stale == 2
        assert j.lookup("fake", "s", 1, CFG) is None and j.lookup("fake", "s", None, CFG) is None
        assert j.stale_contexts == ["NVIDIA H200, torch 2.11.0, triton 3.6.0"]
        j.record("fake", "s", 1, CFG, Ok(2.5))
    with Journal(path, resume=True, context={**H200, **changed}, from_dict=MOE) as j:
        assert j.lookup("fake", "s", 1, CFG) == Ok(2.5) and j.stale == 2
    assert len(list(read_entries(path, MOE))) == 3  # the old lines stay on disk


def test_store_lookup_gives_the_nearest_config(tmp_path):
    from tilefit.tune.store import lookup, write_tilefit_store
    from tilefit.tune.targets.base import TuneShape

    small, large = MoEConfig(16, 64, 64, 1, 4, 3), MoEConfig(128, 128, 64, 16, 8, 4)
    layer = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
    path = write_tilefit_store(tmp_path, "tilefit", layer, "NVIDIA H200",
                               {"gemm1": {1: small, 256: large}}, {"tilefit": "0"})
    assert lookup(path, "gemm1", 2, MOE_SPACE) == small
    assert lookup(path, "gemm1", 200, MOE_SPACE) == large


def test_bad_middle_line_is_usage_error(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text('{"nope": 1}\n{"also": 2}\n')
    with pytest.raises(UsageError, match="line 1"):
        Journal(path, resume=True, context={}, from_dict=MOE)


def test_active_seconds_leaves_out_long_gaps(tmp_path):
    from tilefit.tune.journal import active_seconds

    path = tmp_path / "j.jsonl"
    lines = [json.dumps({"t": t}) for t in (100.0, 101.5, 103.0, 5000.0, 5002.0)]
    path.write_text("\n".join(lines) + "\n")
    assert active_seconds(path, max_gap_s=60) == pytest.approx(5.0)


def test_complete_last_entry_without_newline_is_kept(tmp_path):
    """The last entry parses whole but lacks its newline: it counts as resumed and must stay in the
    file (it was counted, then cut as a torn tail, and never measured again: 913 of 914)."""
    path = tmp_path / "j.jsonl"
    with Journal(path, resume=False, context={}, from_dict=MOE) as j:
        for i, r in enumerate(ALL):
            j.record("fake", "s", i, CFG, r)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    with Journal(path, resume=True, context={}, from_dict=MOE) as j:
        assert j.resumed == len(ALL)
        assert j.lookup("fake", "s", len(ALL) - 1, CFG) == ALL[-1]
        j.record("fake", "s", 99, CFG, Ok(1.0))
    entries = list(read_entries(path, MOE))
    assert len(entries) == len(ALL) + 1
    assert [e.batch for e in entries] == [*range(len(ALL)), 99]
    with Journal(path, resume=True, context={}, from_dict=MOE) as j:  # and again: nothing lost on a second resume
        assert j.resumed == len(ALL) + 1


def test_torn_last_entry_is_dropped_and_only_it(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, resume=False, context={}, from_dict=MOE) as j:
        for i, r in enumerate(ALL):
            j.record("fake", "s", i, CFG, r)
    data = path.read_bytes()
    path.write_bytes(data[:-2])  # the last line cut before its closing brace
    with Journal(path, resume=True, context={}, from_dict=MOE) as j:
        assert j.resumed == len(ALL) - 1 and j.lookup("fake", "s", len(ALL) - 1, CFG) is None
    assert path.read_bytes() == data[:data.rstrip(b"\n").rfind(b"\n") + 1]


def test_out_folder_the_os_refuses_is_one_line_exit_2(cli, tmp_path, monkeypatch):
    """`tune --out` under a folder without search permission (simulated: root may search any
    folder) or with a name over 255 characters: exit 2, not a traceback."""
    import pathlib
    import time

    from test_models_limits import stat_refusing

    start = time.monotonic()
    r = cli("tune", "--model", "mixtral-8x7b", "--target", "fake", "--trials", "2", "--batches", "1",
            "--out", str(tmp_path / ("a" * 300)))
    assert r.code == 2 and r.err.count("\n") == 1 and "File name too long" in r.err, r.err
    assert time.monotonic() - start < 5
    monkeypatch.setattr(pathlib.Path, "stat", stat_refusing("locked"))
    with pytest.raises(UsageError, match="cannot read journal .*locked.*Permission denied"):
        Journal(tmp_path / "locked" / "journal.jsonl", resume=True, context={}, from_dict=MOE)


def test_journal_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    import os

    os.mkfifo(tmp_path / "journal.jsonl")
    for resume in (True, False):
        with pytest.raises(UsageError, match="not a regular file"):
            Journal(tmp_path / "journal.jsonl", resume=resume, context={}, from_dict=MOE)


# ------------------------------------------------------------------ fp8 renamed fp8-block

def _committed_journal(name):
    import gzip
    from pathlib import Path

    return gzip.decompress((Path(__file__).parents[1] / "benchmarks" / "results" / "tune_v3_journals"
                            / name).read_bytes())


def test_committed_fp8_journal_of_an_older_tilefit_resumes_as_fp8_block(tmp_path):
    # benchmarks/results/tune_v3_journals/ep8_fp8_fast.jsonl.gz: GLM-5-FP8 EP8 on an H200, written
    # when the tuner called 128x128 block-scaled fp8 "fp8" (format 1).
    raw = _committed_journal("ep8_fp8_fast.jsonl.gz")
    first = json.loads(raw.split(b"\n", 1)[0])
    assert first["v"] == 1 and first["shape"].endswith(",k=8,fp8")
    path = tmp_path / "journal.jsonl"
    path.write_bytes(raw)
    entries = list(read_entries(path, MOE))
    assert entries and {e.shape.rsplit(",", 1)[1] for e in entries} == {"fp8-block"}
    from tilefit.tune.targets.base import TuneShape

    gemm1 = TuneShape("gemm1", 32, 6144, 2048, 8, "fp8-block", 256).key()
    timed = next(e for e in entries if e.batch is not None and e.shape == gemm1)
    with Journal(path, resume=True, context={"gpu": first["gpu"], "versions": first["versions"]},
                 from_dict=MOE) as j:
        assert j.resumed == len({e.key for e in entries}) and j.stale == 0
        assert j.lookup(timed.target, gemm1, timed.batch, timed.config) == timed.result
        j.record(timed.target, gemm1, 7, timed.config, Ok(1.0))
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["v"] == 2 and last["shape"] == gemm1
    # read again, the new line (format 2) keeps its name and the old ones are mapped as before
    assert sum(e.shape == gemm1 for e in read_entries(path, MOE)) == \
        sum(e.shape == gemm1 for e in entries) + 1


def test_format_2_fp8_shape_keys_are_not_renamed(tmp_path):
    line = json.loads(OLD_LINES[1])
    line.update(v=2, shape="gemm1:E=32/256,H=6144,I=2048,k=8,fp8")
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps(line) + "\n")
    assert [e.shape for e in read_entries(path, MOE)] == ["gemm1:E=32/256,H=6144,I=2048,k=8,fp8"]


def test_store_written_with_the_old_fp8_name_is_found_and_read(tmp_path):
    from tilefit.tune.store import find_store, load_store, lookup, store_name, write_tilefit_store
    from tilefit.tune.targets.base import TuneShape

    layer = TuneShape("gemm1", 32, 6144, 2048, 8, "fp8-block", 256)
    cfg = MoEConfig(16, 128, 128, 1, 4, 3)
    assert "dtype=fp8-block," in store_name("tilefit", layer, "NVIDIA H200")
    assert find_store(tmp_path, "tilefit", layer, "NVIDIA H200") is None
    # an older tilefit's store: format 1, dtype=fp8 in its name and its shape
    old = tmp_path / "tilefit" / "E=32,H=6144,I=2048,k=8,dtype=fp8,device_name=NVIDIA_H200.json"
    old.parent.mkdir()
    old.write_text(json.dumps({"format": 1, "target": "tilefit", "shape": {**layer.as_dict(), "dtype": "fp8"},
                               "gemm1": {"1": cfg.as_dict()}}))
    assert find_store(tmp_path, "tilefit", layer, "NVIDIA H200") == old
    assert load_store(old)["shape"]["dtype"] == "fp8-block"
    assert lookup(old, "gemm1", 3, MOE_SPACE) == cfg
    # once rewritten, the new name wins
    new = write_tilefit_store(tmp_path, "tilefit", layer, "NVIDIA H200", {"gemm1": {1: cfg}}, {})
    assert find_store(tmp_path, "tilefit", layer, "NVIDIA H200") == new != old
    assert json.loads(new.read_text())["format"] == 2
