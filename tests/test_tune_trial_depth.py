"""benchmarks/tune_trial_depth.py reads every search of the recorded session 7 runs (36 rows a
run), and `depth` is the fraction of trials made when a config within the tolerance first came."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import tune_trial_depth  # noqa: E402 - benchmarks/ is not a package


def test_depth_counts_trials_up_to_the_first_near_best():
    assert tune_trial_depth.depth([10.0, 5.0, 4.0, 4.05], 0.02) == 0.75
    assert tune_trial_depth.depth([10.0, 5.0, 4.0, 4.05], 0.30) == 0.5
    assert tune_trial_depth.depth([4.0], 0.0) == 1.0


def test_every_recorded_search_is_read():
    runs = sorted((tune_trial_depth.RESULTS / "tune_v7").glob("*.json"))
    found = [s for r in runs for s in tune_trial_depth.searches(r)]
    assert len(runs) == 12 and len(found) == 12 * 36
    for times, pick in found:
        assert len(times) >= 2 and (pick is None or 0 <= pick < len(times))
