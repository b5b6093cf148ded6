#!/usr/bin/env python3
"""Would another rule for choosing among the re-timed finalists have passed the checks? Replays
every recorded fast run that has a check (benchmarks/results/tune_v4 to tune_v9: the fast
run's re-timing rounds and the check's rounds, re-timed later in the same session with the
recorded sweep's best configs), applies each rule to the fast run's rounds, and judges the chosen
config in the check's rounds: its median over the best median there ("pick/best"), and the median
of its per-round ratios to that config ("paired"). A rule's pick that the check never timed is
counted as not judged.

Rules (each over the finalists still in after the last round):
  median   the median of the rounds (tune's rule)
  min      the fastest round (a config's speed in the GPU's fastest state)
  paired   the median over rounds of the time over the round's fastest finalist
  lowhalf  the mean of the faster half of the rounds

With --rounds N, the fast run's rounds are cut to the first N before a rule chooses: what the run
would have picked with N rounds (a finalist's drop after a round depends only on the rounds
before it, so the cut rounds are what N rounds would have timed). Rows re-timed in fewer rounds
(the CUDA-graph rows: 3) are unchanged by an N at or above theirs.

  python benchmarks/tune_pick_rules.py [--results DIR] [--limit 1.02] [--rounds N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
SETS = ("tune_v4", "tune_v5", "tune_v6", "tune_v7", "tune_v8", "tune_v9")
KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
Rounds = dict[tuple[str, int], dict[tuple[int, ...], dict[int, float]]]


def rounds(path: Path, first: int | None = None) -> Rounds:
    """{(gemm, batch): {config: {round: us}}} from a journal's re-timing lines ('retimeN:...'),
    rounds 0..first-1 only when `first` is given."""
    out: Rounds = {}
    for line in gzip.open(path, "rt"):
        d = json.loads(line)
        head, _, rest = d["shape"].partition(":")
        t = d["result"].get("time_us")
        if d["batch"] is None or not head.startswith("retime") or not t:
            continue
        if first is not None and int(head[len("retime"):]) >= first:
            continue
        config = tuple(d["config"][k] for k in KEYS)
        per = out.setdefault((rest.split(":")[0], d["batch"]), {}).setdefault(config, {})
        per[int(head[len("retime"):])] = float(t)
    return out


def _alive(found: dict[tuple[int, ...], dict[int, float]]) -> dict[tuple[int, ...], dict[int, float]]:
    n = max(len(v) for v in found.values())
    return {c: v for c, v in found.items() if len(v) == n}


def _paired(alive: dict[tuple[int, ...], dict[int, float]]) -> Callable[[tuple[int, ...]], float]:
    best = {r: min(v[r] for v in alive.values() if r in v) for v in alive.values() for r in v}
    return lambda c: statistics.median(t / best[r] for r, t in alive[c].items())


def _lowhalf(times: dict[int, float]) -> float:
    ordered = sorted(times.values())
    return statistics.mean(ordered[:max(1, (len(ordered) + 1) // 2)])


def choose(found: dict[tuple[int, ...], dict[int, float]], rule: str) -> tuple[int, ...]:
    alive = _alive(found)
    key: Callable[[tuple[int, ...]], float] = {
        "median": lambda c: statistics.median(alive[c].values()),
        "min": lambda c: min(alive[c].values()),
        "paired": _paired(alive),
        "lowhalf": lambda c: _lowhalf(alive[c]),
    }[rule]
    return min(alive, key=lambda c: (key(c), c))


RULES = ("median", "min", "paired", "lowhalf")


def judge(results: Path, first: int | None = None) -> dict[str, list[tuple[str, tuple[str, int], Any]]]:
    """rule -> [(run, (gemm, batch), (pick/best, paired) or None when the check never timed it)]."""
    judged: dict[str, list[tuple[str, tuple[str, int], Any]]] = {rule: [] for rule in RULES}
    checks = sorted(p for s in SETS for p in (results / s).glob("*_check.jsonl.gz"))
    if not checks:
        raise SystemExit(f"tune_pick_rules: no *_check.jsonl.gz under {results}/{{{','.join(SETS)}}}")
    for check_path in checks:
        fast_path = check_path.with_name(check_path.name.replace("_check.", "_fast."))
        if not fast_path.exists():
            continue
        run = f"{check_path.parent.name}/{check_path.name.removesuffix('_check.jsonl.gz')}"
        fast, check = rounds(fast_path, first), rounds(check_path)
        for key, timed in sorted(check.items()):
            if key not in fast:
                continue
            medians = {c: statistics.median(v.values()) for c, v in timed.items()}
            ref = min(medians, key=lambda c: (medians[c], c))
            for rule in RULES:
                c = choose(fast[key], rule)
                if c not in timed:
                    judged[rule].append((run, key, None))
                    continue
                paired = statistics.median(t / timed[ref][r] for r, t in timed[c].items()
                                           if r in timed[ref])
                judged[rule].append((run, key, (medians[c] / medians[ref], paired)))
    return judged


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--limit", type=float, default=1.02)
    p.add_argument("--rounds", type=int, default=None,
                   help="cut the fast runs' re-timing rounds to the first N")
    args = p.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        print("tune_pick_rules: --rounds must be at least 1", file=sys.stderr)
        return 2
    if not args.results.is_dir():
        print(f"tune_pick_rules: {args.results} is not a folder", file=sys.stderr)
        return 2
    try:
        judged = judge(args.results, args.rounds)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    for rule, rows in judged.items():
        seen = [r for r in rows if r[2] is not None]
        over = [r for r in seen if r[2][0] > args.limit]
        worst = max((r[2][0] for r in seen), default=float("nan"))
        print(f"{rule:8s} judged {len(seen)} of {len(rows)} rows, beyond {args.limit}: {len(over)}, "
              f"worst {worst:.4f}")
        for run, (gemm, batch), (ratio, paired) in over:
            print(f"    {run} {gemm} {batch}: {ratio:.4f} (paired {paired:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
