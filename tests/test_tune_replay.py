"""benchmarks/tune_replay.py, the offline replay that the fast strategy's cost and pick claims
rest on: it must reproduce what session 4's H200 runs recorded before its estimates of a change
mean anything."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import tune_replay  # noqa: E402 - benchmarks/ is not a package


@pytest.mark.parametrize("run, recorded_s", [("ep8_bf16", (114.9, 129.3)),
                                             ("ep8_fp8-block", (68.6, 70.3))])
def test_session_4_settings_replay_to_the_recorded_working_time(run, recorded_s):
    """Session 4's settings, replayed: the searches ask for the configs the runs measured (same
    trial count), and the working time lands within 10% of the recorded runs'."""
    rec = tune_replay.Recorded(run)
    s = tune_replay.simulate(rec, tune_replay.VARIANTS["v4"], tune_replay.COMPILE_S[rec.dtype])
    rows = json.loads((BENCH / "results" / "tune_v4" / f"{run}_r1.json").read_text())["rows"]
    assert s["trials"] == sum(r["trials"] for r in rows)
    low, high = recorded_s
    assert 0.9 * low <= s["total_s"] <= 1.1 * high
    side = tune_replay.simulate(rec, tune_replay.VARIANTS["together"], tune_replay.COMPILE_S[rec.dtype])
    assert side["together_s"] < s["total_s"]
    assert side["worst"] == s["worst"]  # the same searches: the same picks


def test_recorded_rounds_replay_to_the_recorded_picks():
    """Session 4's own rule on its own rounds gives back each row's pick, except where a finalist
    that left early kept the lower median of the GPU's cooler first rounds (the rule changed)."""
    differ = 0
    for r in (1, 2, 3):
        rows = json.loads((BENCH / "results" / "tune_v4" / f"tp8_bf16_r{r}.json").read_text())["rows"]
        for row in rows:
            pick, count = tune_replay.replay_rounds(row["finalists"], 5, 0.03, drop_from=1)
            assert count == sum(len(f["rounds_us"]) for f in row["finalists"])
            short = {f["config"] for f in row["finalists"] if len(f["rounds_us"]) < 5}
            if pick != row["config"]:
                differ += 1
                assert row["config"] in short
    assert differ == 1  # r1 gemm2 batch 4096: its check read 1.0179 against the sweep


def test_a_check_cut_short_is_read_back_from_its_journal(tmp_path):
    """bench_tune --rebuild reads a check that was killed before its summary from the journal's
    re-timing lines: on a check that did finish, the same medians as its summary."""
    import gzip

    from tune_results import _check_from_journal

    results = BENCH / "results" / "tune_v5"
    (tmp_path / "journal.jsonl").write_bytes(
        gzip.decompress((results / "ep8_bf16_r5a_check.jsonl.gz").read_bytes()))
    rows = {(r["job"], r["batch"]): r for r in _check_from_journal(tmp_path)["rows"]}
    built = json.loads((results / "ep8_bf16_r5a.json").read_text())["rows"]
    checked = [r for r in built if r.get("pick_in_sweep_us") is not None]
    assert len(checked) == 8
    for r in checked:
        mine = next(f for f in rows[(r["job"], r["batch"])]["finalists"] if f["config"] == r["config"])
        assert len(mine["rounds_us"]) == 5
        assert mine["median_us"] == pytest.approx(r["pick_in_sweep_us"])



def test_paired_ratios_pair_the_same_rounds_and_skip_failed_ones(tmp_path):
    """A round a config failed (no journal line, or inf in a live check) is left out of the
    pairing, not shifted onto the next round of the other config."""
    import gzip

    from tune_results import _check_from_journal, paired_over

    from tilefit.kernels.triton_moe.config import MoEConfig

    assert paired_over([float("inf"), float("inf"), 10.0], [[10.0, 10.0, 10.0]]) == 1.0
    assert paired_over([None, 11.0, 20.0], [[30.0, 10.0, 20.0]]) == pytest.approx(1.05)
    lines = gzip.decompress((BENCH / "results" / "tune_v5" / "ep8_bf16_r5a_check.jsonl.gz")
                            .read_bytes()).decode().splitlines(keepends=True)
    gone = next(i for i, line in enumerate(lines) if '"retime1:gemm1' in line
                and '"batch": 64' in line)
    (tmp_path / "journal.jsonl").write_text("".join(lines[:gone] + lines[gone + 1:]))
    label = MoEConfig.from_dict(json.loads(lines[gone])["config"]).label()
    row = next(r for r in _check_from_journal(tmp_path)["rows"]
               if (r["job"], r["batch"]) == ("gemm1", 64))
    cut = next(f for f in row["finalists"] if f["config"] == label)
    assert len(cut["rounds_us"]) == 5 and cut["rounds_us"][1] is None


@pytest.mark.parametrize("argv", [["--layouts", "ep8_bf16,ep8"], ["--variants", "v4,v5"]])
def test_an_unknown_layout_or_variant_is_one_line_and_exit_2(argv, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["tune_replay.py", *argv])
    with pytest.raises(SystemExit) as exit_:
        tune_replay.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{argv[0]}: unknown {argv[1].split(',')[1]}; choose from" in err


@pytest.mark.parametrize("extra, says", [
    (["--against", str(BENCH / "results" / "tune_v3_journals")], "fast/tune_summary.json not found"),
    ([], "--rebuild needs --against DIR")])
def test_rebuild_from_a_wrong_folder_is_one_line_and_exit_2(tmp_path, extra, says):
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    proc = subprocess.run([sys.executable, str(BENCH / "bench_tune.py"), "--rebuild", str(tmp_path),
                           "--layouts", "ep8", "--dtype", "bf16", *extra],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and says in proc.stderr
