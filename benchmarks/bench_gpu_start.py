"""Where a tuning run's GPU worker spends its start (issue 17: in session 9's H200 traces the GPU
worker's warm-up took 3.1-6.3 s, and the GPU idled until it ended, while the first compiled
configs were ready 1.7-3.0 s after the run's start).

In a freshly spawned process (as tune/workers.py starts its workers), times each step of
`TilefitMoETarget.warm` for a GPU worker: importing Triton, the kernel module, Triton's source
hash (`triton_key`), importing torch, `torch.cuda.init()`, the first allocation (the context and
the caching allocator). Three scenarios, each REPEATS times: the process alone; while a pool of N
compile workers warms up (as `tune` starts them, at the same moment); and while, in addition, this
process times the GPU's ceilings (tune/ceilings.py), as `tune`'s main process does. Prints one
JSON line per start.

Usage: PYTHONPATH=src python3 benchmarks/bench_gpu_start.py [--workers N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _steps(queue: Any) -> None:
    """A GPU worker's warm-up, step by step (seconds each), put on `queue` (or why it failed)."""
    try:
        queue.put(_timed_steps())
    except Exception as e:  # noqa: BLE001 - reported in the JSON line
        queue.put({"error": f"{type(e).__name__}: {e}"})


def _timed_steps() -> dict[str, Any]:
    out: dict[str, Any] = {}
    t = time.monotonic()

    def mark(name: str) -> None:
        nonlocal t
        now = time.monotonic()
        out[name] = round(now - t, 3)
        t = now
    import triton  # noqa: F401
    mark("import_triton")
    from tilefit.kernels.triton_moe import kernel  # noqa: F401
    mark("import_kernel")
    from triton.runtime import cache
    cache.triton_key()
    mark("triton_key")
    import torch
    mark("import_torch")
    torch.cuda.init()
    mark("cuda_init")
    torch.empty(1, device="cuda")
    mark("first_alloc")
    return out


def _start(ctx: Any) -> tuple[Any, Any]:
    queue = ctx.Queue()
    proc = ctx.Process(target=_steps, args=(queue,))
    proc.start()
    return proc, queue


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilefit-bench-cache-")
    from tilefit.tune.pools import WorkerPool
    from tilefit.tune.targets.base import TargetSpec

    from tune_results import layer_shape  # benchmarks/: GLM-5's per-GPU shape, from the planner

    ctx = mp.get_context("spawn")
    shape = layer_shape("ep8", "bf16")
    spec = TargetSpec.of("tilefit.tune.targets.tilefit_moe:TilefitMoETarget", gpu="h200")
    for scenario in ("alone", "pool", "pool+ceilings") * args.repeats:
        start = time.monotonic()
        pool = None
        if scenario != "alone":
            pool = WorkerPool(spec, [None] * args.workers, timeout=600.0, name="compile")
            pool.warm(shape)
        proc, queue = _start(ctx)
        ceilings_s = None
        if scenario == "pool+ceilings":
            from tilefit.hw.catalog import get_gpu
            from tilefit.tune import ceilings, perfmodel

            try:
                c = ceilings.measure(perfmodel.Device.from_gpu(get_gpu("h200"), "bf16"), "bf16", 0)
                ceilings_s = c.seconds
            except Exception as e:  # noqa: BLE001 - no CUDA here: said in the JSON line
                ceilings_s = f"{type(e).__name__}: {e}"
        steps = queue.get(timeout=300)
        ended = round(time.monotonic() - start, 3)
        proc.join()
        if pool is not None:
            pool.close()
        print(json.dumps({"scenario": scenario, "steps_s": steps, "steps_total_s":
                          round(sum(v for v in steps.values() if isinstance(v, float)), 3), "ready_after_s": ended,
                          "ceilings_s": ceilings_s, "workers": args.workers}), flush=True)


if __name__ == "__main__":
    main()
