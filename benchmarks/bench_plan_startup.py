"""Cold-start time of `tilefit plan` and `tilefit check` on the README's cases (goal: under 1 s on
the CPU machine), output piped as a script would read it.

Runs each command in fresh processes and reports min / median / max wall time, the median CPU time
(user + system: what the command costs, whatever else the machine runs), and from one run under
`python -X importtime` the import time of the CLI and whether the terminal and plotting libraries
(rich, matplotlib) were imported at all (they must not be when stdout is not a terminal).
Usage: python benchmarks/bench_plan_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "plan": ["plan", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--ep", "8"],
    "check": ["check", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--ep", "8", "--engine", "sglang"],
}
LAZY = ("rich", "matplotlib")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _imports(args: list[str]) -> tuple[float, list[str]]:
    """(cumulative import time of tilefit.cli.main in seconds, lazy libraries that were imported)."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "tilefit", *args], capture_output=True,
                       text=True, check=True)
    total, loaded = 0.0, set()
    for line in r.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if not m:
            continue
        name = m.group(3)
        if name == "tilefit.cli.main":
            total = int(m.group(1)) / 1e6
        if name.split(".")[0] in LAZY:
            loaded.add(name.split(".")[0])
    return total, sorted(loaded)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    runs = ap.parse_args().runs
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, {runs} runs each")
    for name, args in COMMANDS.items():
        cmd = [sys.executable, "-m", "tilefit", *args]
        subprocess.run(cmd, check=True, capture_output=True)  # warm the OS file cache and bytecode
        walls, cpus = [], []
        for _ in range(runs):
            c0, t0 = _cpu(), time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            walls.append(time.perf_counter() - t0)
            cpus.append(_cpu() - c0)
        imports, loaded = _imports(args)
        print(f"tilefit {' '.join(args)}")
        print(f"  cold start wall time: min {min(walls):.3f} s, median {statistics.median(walls):.3f} s, "
              f"max {max(walls):.3f} s; CPU time median {statistics.median(cpus):.3f} s")
        print(f"  import of tilefit.cli.main: {imports:.3f} s; lazy libraries imported: "
              f"{', '.join(loaded) or 'none'}")


if __name__ == "__main__":
    main()
