"""Cold-start time of `tilefit plan` on the README's default case (goal: under 1 s on the CPU machine).

Runs the console entry point in fresh processes and reports min / median / max wall time.
Usage: python benchmarks/bench_plan_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time

CMD = [sys.executable, "-m", "tilefit.cli.main", "plan", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--ep", "8"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    runs = ap.parse_args().runs
    subprocess.run(CMD, check=True, capture_output=True)  # warm the OS file cache and bytecode
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(CMD, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    print(f"python {platform.python_version()} on {platform.machine()}, {runs} runs of: "
          f"tilefit plan --model glm-5 --gpu rtx-pro-6000 --ep 8")
    print(f"cold start wall time: min {min(times):.3f} s, median {statistics.median(times):.3f} s, "
          f"max {max(times):.3f} s")


if __name__ == "__main__":
    main()
