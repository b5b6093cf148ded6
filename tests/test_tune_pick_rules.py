"""benchmarks/tune_pick_rules.py: the rules choose as their definitions say, and the recorded
H200 runs are read whole (every checked row judged by tune's own rule)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import tune_pick_rules  # noqa: E402 - benchmarks/ is not a package

A, B, C = (64, 128, 64, 1, 4, 3), (64, 128, 64, 16, 4, 3), (128, 256, 64, 1, 8, 4)


def _journal(path: Path, rows: dict[tuple[int, ...], list[float]], batch: int = 4096) -> None:
    lines = []
    for config, times in rows.items():
        for r, t in enumerate(times):
            lines.append(json.dumps({"shape": f"retime{r}:gemm1:E=32/256", "batch": batch,
                                     "config": dict(zip(tune_pick_rules.KEYS, config)),
                                     "result": {"kind": "ok", "time_us": t}}))
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))


def test_each_rule_chooses_by_its_definition():
    # A: steady 100; B: two fast rounds then slow (a clock drop) -> min prefers B, median A.
    found = {A: {0: 100.0, 1: 100.0, 2: 100.0}, B: {0: 95.0, 1: 96.0, 2: 110.0},
             C: {0: 120.0}}  # C left after round 1: not a candidate
    assert tune_pick_rules.choose(found, "median") == B
    assert tune_pick_rules.choose(found, "min") == B
    found[B] = {0: 95.0, 1: 103.0, 2: 110.0}
    assert tune_pick_rules.choose(found, "median") == A  # 100 against 103
    assert tune_pick_rules.choose(found, "min") == B  # 95 against 100
    assert tune_pick_rules.choose(found, "lowhalf") == B  # the faster two: 99 against 100
    assert tune_pick_rules.choose(found, "paired") == A  # per-round ratios' medians: 1 vs 1.03


def test_a_check_judges_the_rules_pick(tmp_path):
    results = tmp_path / "results" / "tune_v6"
    results.mkdir(parents=True)
    _journal(results / "ep8_bf16_r1_fast.jsonl.gz", {A: [100, 100, 100], B: [101, 101, 101]})
    _journal(results / "ep8_bf16_r1_check.jsonl.gz", {A: [104, 104, 104], B: [100, 100, 100]})
    judged = tune_pick_rules.judge(tmp_path / "results")
    (run, key, (ratio, paired)), = judged["median"]
    assert run == "tune_v6/ep8_bf16_r1" and key == ("gemm1", 4096)
    assert ratio == paired == 1.04


def test_the_recorded_runs_are_judged_whole(capsys):
    assert tune_pick_rules.main([]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("median"))
    judged, of = line.split("judged ")[1].split(" rows")[0].split(" of ")
    assert judged == of and int(of) >= 160


def test_a_missing_folder_is_exit_2(tmp_path, capsys):
    assert tune_pick_rules.main(["--results", str(tmp_path / "none")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_rounds_cut_to_the_first_n_change_the_pick_as_fewer_rounds_would(tmp_path):
    """B is fastest in the first two rounds and slowest in the last three: five rounds pick A,
    two pick B; --rounds 0 is refused with exit code 2."""
    results = tmp_path / "results" / "tune_v9"
    results.mkdir(parents=True)
    _journal(results / "tp8_bf16_r1_fast.jsonl.gz", {A: [100, 100, 100, 100, 100],
                                                      B: [98, 98, 105, 105, 105]})
    _journal(results / "tp8_bf16_r1_check.jsonl.gz", {A: [100] * 5, B: [103] * 5})
    five = tune_pick_rules.judge(tmp_path / "results")["median"]
    two = tune_pick_rules.judge(tmp_path / "results", 2)["median"]
    assert [r[2][0] for r in five] == [1.0] and [r[2][0] for r in two] == [1.03]
    assert tune_pick_rules.main(["--results", str(tmp_path / "results"), "--rounds", "0"]) == 2
