"""How long a tuning run's compile workers take to start and compile their first config, and the
memory each holds (issue 17: in session 8's H200 traces the 16 compile workers' warm-ups took
5.6-6.9 s on average, and the run's first compile ended 5.7-6.5 s after its start, while the GPU
waited).

Starts a pool of N compile workers for tilefit's kernel (tune/pools.WorkerPool, as `tilefit tune`
does: warmed at once, `WorkerPool.warm`), and asks N distinct configs of it at once into an empty
Triton cache (they wait behind the warm-ups, as a run's first compiles do); prints one JSON line:
seconds from the pool's start to the first and the last compile's end, each worker's resident
memory (VmRSS) and whether torch's library is mapped in it (/proc/PID/maps; Linux).

Usage: PYTHONPATH=src python3 benchmarks/bench_compile_start.py [--workers N] [--dtype D]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _has_torch(pid: int) -> bool | None:
    try:
        return "torch/lib/libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp8-block"))
    args = p.parse_args()
    if args.workers < 1:
        p.error("--workers must be at least 1")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilefit-bench-cache-")

    from tilefit.tune.pools import WorkerPool
    from tilefit.tune.targets.base import TargetSpec
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    from tune_results import layer_shape  # benchmarks/: GLM-5's per-GPU shape, from the planner

    shape = layer_shape("ep8", args.dtype)
    spec = TargetSpec.of("tilefit.tune.targets.tilefit_moe:TilefitMoETarget", gpu="h200")
    configs = [c for c in TilefitMoETarget(gpu="h200").space(shape)
               if c.group_m == 1 and c.block_m == 16][: args.workers]
    start = time.monotonic()
    ends: list[float] = []
    with WorkerPool(spec, [None] * args.workers, timeout=600.0, name="compile") as pool:
        pool.warm(shape)

        def compile_one(config) -> None:
            pool.call("compile", config, shape, None)
            ends.append(time.monotonic() - start)

        threads = [threading.Thread(target=compile_one, args=(c,)) for c in configs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        pids = [w._proc.pid for w in pool.workers if w.alive]
        rss = [_rss_kb(pid) for pid in pids]
        torch = [_has_torch(pid) for pid in pids]
    print(json.dumps({"workers": args.workers, "dtype": args.dtype, "first_compile_s": round(min(ends), 2), "last_compile_s": round(max(ends), 2),
                      "rss_mb": [None if r is None else round(r / 1024) for r in rss],
                      "torch_loaded": torch}))


if __name__ == "__main__":
    main()
