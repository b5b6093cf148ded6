"""benchmarks/tune_finalist_count.py: fewer search finalists, replayed on the recorded rounds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import tune_finalist_count as tfc  # noqa: E402 - benchmarks/ is not a package


def _f(config: str, sources: list[str], search: float, rounds: list[float]) -> dict:
    return {"config": config, "sources": sources, "search_us": search, "rounds_us": rounds}


def test_leaving_out_the_pick_costs_what_the_next_best_ran_slower():
    # Searched F1..F4 (F4 timed slowest in the search but fastest re-timed); D the default.
    row = [_f("F1", ["fast"], 10, [100, 101, 100]), _f("F2", ["fast"], 11, [102, 102, 102]),
           _f("F3", ["fast"], 12, [105, 104, 105]), _f("F4", ["fast"], 13, [95, 95, 95]),
           _f("D", ["default"], 20, [120])]
    assert tfc.replay(row, 3) == 100 / 95  # F1 instead of F4: its median per-round ratio
    assert tfc.replay(row, 3) == tfc.replay(row, 2) and tfc.replay(row, 1) == 100 / 95
    # The default is re-timed whatever the count, also when the search ranked it 4th.
    row[3]["sources"] = ["fast", "default"]
    assert tfc.replay(row, 3) == 1.0


def test_the_recorded_runs_are_read_and_bad_counts_refused(tmp_path, capsys):
    assert tfc.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("top 3: ") and "top 2: " in out
    assert int(out.split(" rows")[0].split()[-1]) >= 1400  # sessions 7-9: 1,404 rows
    assert tfc.main(["--top", "4"]) == 2
    assert tfc.main(["--results", str(tmp_path)]) == 2
    (tmp_path / "tune_v9").mkdir()
    (tmp_path / "tune_v9" / "r.json").write_text(json.dumps({"rows": [
        {"finalists": [_f("A", ["fast"], 1, [10, 10]), _f("B", ["fast"], 2, [11, 11])]}]}))
    assert tfc.main(["--results", str(tmp_path), "--top", "1"]) == 0
    assert "1 rows of 1 runs, 0 picks change, worst 1.0000" in capsys.readouterr().out
