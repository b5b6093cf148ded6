#!/usr/bin/env python3
"""How deep into its trials does a search find what it ends with? For every search of the recorded
fast runs (benchmarks/results/tune_v7: a result JSON and the fast journal per run), in the order
the journal holds its probes: the fraction of the search's trials made when it first probed a
config within TOL of its best probe, and when it first probed the config it picked (after the
re-timing). A search that finds its best early could stop sooner; one that finds it late could not.

Usage: python3 benchmarks/tune_trial_depth.py [--set tune_v7] [--tol 0.01,0.02]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _key(config: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(config.items()))


def searches(result: Path) -> list[tuple[list[float], int | None]]:
    """Per search of one run: its probe times in journal order, and the index of the first probe
    of the config the run picked (None: the pick came from outside the search, e.g. the default)."""
    rows = json.loads(result.read_text())["rows"]
    picks = {(r["job"], r["batch"]): _key(r["config_dict"]) for r in rows if r.get("config_dict")}
    seq: dict[tuple[str, int], list[tuple[Any, float]]] = defaultdict(list)
    with gzip.open(result.with_name(result.stem + "_fast.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            e = json.loads(line)
            if e["batch"] is None or e["shape"].startswith(("retime", "check")):
                continue  # a compile, a re-timing round or an output check
            t = e["result"].get("time_us") if e["result"].get("kind") == "ok" else None
            seq[(e["shape"].split(":")[0], e["batch"])].append((_key(e["config"]), t or float("inf")))
    out = []
    for k, probes in seq.items():
        pick = next((i for i, (c, _) in enumerate(probes) if c == picks.get(k)), None)
        out.append(([t for _, t in probes], pick))
    return out


def depth(times: list[float], tol: float) -> float:
    best = min(times)
    return (next(i for i, t in enumerate(times) if t <= best * (1 + tol)) + 1) / len(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", default="tune_v7")
    p.add_argument("--tol", type=lambda s: [float(x) for x in s.split(",")], default=[0.01, 0.02])
    args = p.parse_args()
    found = [s for r in sorted((RESULTS / args.set).glob("*.json")) for s in searches(r)]
    print(f"{len(found)} searches in {args.set}")
    for tol in args.tol:
        d = sorted(depth(t, tol) for t, _ in found)
        print(f"  first probe within {tol:.0%} of the search's best: median {statistics.median(d):.2f} "
              f"of its trials, 90th percentile {d[int(0.9 * len(d))]:.2f}, last {d[-1]:.2f}; in the "
              f"first half {sum(x <= 0.5 for x in d)}, after 70% {sum(x > 0.7 for x in d)}")
    picked = sorted((i + 1) / len(t) for t, i in found if i is not None)
    print(f"  the picked config first probed: median {statistics.median(picked):.2f}, after 80% of "
          f"the trials in {sum(x > 0.8 for x in picked)} of {len(picked)}")


if __name__ == "__main__":
    main()
