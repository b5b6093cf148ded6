#!/usr/bin/env python3
"""Would fewer finalists have picked as well? Replays the recorded H200 fast runs (result files
of benchmarks/results/tune_v7 to tune_v9: each row's finalists with their sources, search timing
and re-timing rounds) with only the search's best N configs re-timed (ranked by their search
timing; the engine default and configs from elsewhere kept), and compares the config that would
have been picked with the run's own pick in the rounds both ran: the median of their per-round
ratios (1: the same pick).

The replay keeps the run's rounds as they were: with fewer finalists the drop after a round
could differ (a finalist left out may have been the leader), so it tells what the left-out
finalists were worth, not a new run.

  python benchmarks/tune_finalist_count.py [--results DIR] [--top N ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from tune_pick_rules import choose  # benchmarks/

RESULTS = Path(__file__).resolve().parent / "results"
SETS = ("tune_v7", "tune_v8", "tune_v9")
RUN_FINALISTS = 4  # what those runs re-timed from each search (tune/finalists.FINALISTS)


def replay(finalists: list[dict[str, Any]], top: int) -> float:
    """The would-be pick's time over the run's pick (median of per-round ratios)."""
    if not any(f["rounds_us"] for f in finalists):  # a run without re-timing: nothing to replay
        return 1.0
    by_config = {f["config"]: f for f in finalists}
    pick = by_config[choose({c: dict(enumerate(f["rounds_us"])) for c, f in by_config.items()},
                            "median")]  # tune's own rule, as tune_pick_rules replays it
    searched = sorted((f for f in finalists if "fast" in f["sources"]),
                      key=lambda f: (f["search_us"], f["config"]))
    left_out = {f["config"] for f in searched[top:] if set(f["sources"]) == {"fast"}}
    if pick["config"] not in left_out:
        return 1.0
    mine = pick["rounds_us"]

    def against_pick(f: dict[str, Any]) -> float:
        return statistics.median(t / m for t, m in zip(f["rounds_us"], mine))
    return min(against_pick(f) for f in finalists if f["config"] not in left_out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--top", type=int, action="append",
                   help="search finalists kept (repeatable; default: 3 and 2)")
    args = p.parse_args(argv)
    tops = args.top or [3, 2]
    if any(t < 1 or t >= RUN_FINALISTS for t in tops):
        print(f"tune_finalist_count: --top must be 1 to {RUN_FINALISTS - 1}", file=sys.stderr)
        return 2
    paths = sorted(q for s in SETS for q in (args.results / s).glob("*.json"))
    rows = [r for q in paths for r in json.loads(q.read_text())["rows"] if r.get("finalists")]
    if not rows:
        print(f"tune_finalist_count: no result rows under {args.results}/{{{','.join(SETS)}}}",
              file=sys.stderr)
        return 2
    for t in tops:
        ratios = [replay(r["finalists"], t) for r in rows]
        print(f"top {t}: {len(ratios)} rows of {len(paths)} runs, "
              f"{sum(x != 1.0 for x in ratios)} picks change, worst {max(ratios):.4f}, beyond "
              f"1.01: {sum(x > 1.01 for x in ratios)}, beyond 1.02: {sum(x > 1.02 for x in ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
