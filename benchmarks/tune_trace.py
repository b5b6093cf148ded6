"""Where a tuning run's time went, from its request trace (`tilefit tune --trace FILE`,
bench_tune.py `--trace`: a JSON line per compile and GPU request, per pause of the compile
workers and per pool's closing, tune/pools.py; times from the run's start).

Prints, per trace: the span from the first request to the last reply; per (pool, op) the count,
the summed wait for a worker and the summed run time, and where the worker reported its own time
(traces from session 8 on) that time and the requests whose run took over GAP_S more than it
(the rest of a run is the pipe, the tuner's own threads, a worker process started for the
request, so every warm-up line counts, and a compile request's wait in the pipe while the pool
was paused); the GPU worker's busy share in 5 s windows; when the first GPU request was asked and
answered; the pauses' summed length.

Usage: python3 benchmarks/tune_trace.py TRACE.jsonl [TRACE.jsonl ...] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

WINDOW_S = 5.0
GAP_S = 0.05  # a request whose run exceeds the worker's own time by more is counted as delayed
NOT_WORK = ("pause", "warm", "close")  # lines that are no GPU work (warm: a process starting)


def read(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    if not lines:
        raise ValueError("an empty trace")
    begin = min(d["t"] for d in lines)
    end = max(d["t"] + d["wait_s"] + d["run_s"] for d in lines)
    ops: dict[str, dict[str, float]] = defaultdict(
        lambda: {"n": 0, "wait_s": 0.0, "run_s": 0.0, "timed": 0, "work_s": 0.0, "delayed": 0})
    busy: dict[int, float] = defaultdict(float)
    for d in lines:
        o = ops[f"{d['pool']}:{d['op']}"]
        o["n"] += 1
        o["wait_s"] += d["wait_s"]
        o["run_s"] += d["run_s"]
        if "work_s" in d:
            o["timed"] += 1
            o["work_s"] += d["work_s"]
            o["delayed"] += d["run_s"] - d["work_s"] > GAP_S
        if d["pool"] == "gpu" and d["op"] not in NOT_WORK:
            s = d["t"] + d["wait_s"]
            e = s + d["run_s"]
            while s < e:
                w = int(s // WINDOW_S)
                step = min(e, (w + 1) * WINDOW_S) - s
                busy[w] += step
                s += step
    gpu = sorted((d for d in lines if d["pool"] == "gpu" and d["op"] not in NOT_WORK),
                 key=lambda d: d["t"])
    first = gpu[0] if gpu else None
    return {
        "span_s": round(end - begin, 2),
        "ops": {k: {"n": int(v["n"]), "wait_s": round(v["wait_s"], 2), "run_s": round(v["run_s"], 2),
                    **({"work_s": round(v["work_s"], 2), "delayed": int(v["delayed"])}
                       if v["timed"] else {})}
                for k, v in sorted(ops.items())},
        "gpu_busy_pct": {f"{int(w * WINDOW_S)}": round(100 * b / WINDOW_S) for w, b in sorted(busy.items())},
        "first_gpu_request": None if first is None else {
            "op": first["op"], "asked_s": first["t"], "answered_s": round(
                first["t"] + first["wait_s"] + first["run_s"], 2)},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    for path in args.traces:
        s = summary(read(path))
        if args.json:
            print(json.dumps({"trace": path, **s}))
            continue
        print(f"{Path(path).name}: {s['span_s']} s from the first request to the last reply")
        for k, v in s["ops"].items():
            worker = (f"  in the worker {v['work_s']:7.1f} s, {v['delayed']} runs over it by "
                      f"> {GAP_S * 1000:.0f} ms" if "work_s" in v else "")
            print(f"  {k:18} {v['n']:6}  wait {v['wait_s']:8.1f} s  run {v['run_s']:7.1f} s{worker}")
        print("  GPU busy per 5 s: " + " ".join(f"{w}:{b}%" for w, b in s["gpu_busy_pct"].items()))
        f = s["first_gpu_request"]
        if f:
            print(f"  first GPU request ({f['op']}): asked at {f['asked_s']} s, answered at "
                  f"{f['answered_s']} s")


if __name__ == "__main__":
    main()
