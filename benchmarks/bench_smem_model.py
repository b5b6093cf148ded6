#!/usr/bin/env python3
"""How fast the triton-moe SMEM model judges the engines' grid, next to the compiler oracle.

  PYTHONPATH=src python benchmarks/bench_smem_model.py [--arch sm120] [--oracle 8]

Model: evaluations per second on one core over every config of the bf16, per-tensor fp8 and
fp8-block grids (1920 each), for total_bytes (what a prefilter uses) and for verdict
(footprint with its terms plus the judgement). Oracle: seconds per config for `--oracle N` random configs, with a fresh
Triton cache and tilefit's cache off, early-stopped (default) and through the whole pipeline.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

from tilefit.hw.catalog import get_arch
from tilefit.kernels.triton_moe import FAMILY, smem


def rate(fn, items, min_seconds=1.0) -> float:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_seconds:
        for it in items:
            fn(it)
        n += len(items)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm120")
    ap.add_argument("--oracle", type=int, default=8)
    a = ap.parse_args()
    arch = get_arch(a.arch)
    for dtype in ("bf16", "fp8", "fp8-block"):
        grid = FAMILY.configs(arch, dtype)
        t0 = time.perf_counter()
        verdicts = [FAMILY.verdict(c, arch, dtype) for c in grid]
        whole_ms = (time.perf_counter() - t0) * 1e3
        r_total = rate(lambda c: smem.total_bytes(c, arch, dtype), grid)
        r_verdict = rate(lambda c: FAMILY.verdict(c, arch, dtype), grid)
        print(f"{arch.name} {dtype}: grid {len(grid)} configs judged in {whole_ms:.1f} ms; "
              f"total_bytes {r_total:,.0f}/s, verdict {r_verdict:,.0f}/s")
        for line in FAMILY.summary(verdicts):
            print("  " + line)
    if a.oracle:
        from tilefit.kernels.triton_moe.spec import compile_config

        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilefit-bench-")
        configs = random.Random(0).sample(FAMILY.configs(arch, "bf16", grid="distinct"), a.oracle)
        for full in (False, True):
            t0 = time.perf_counter()
            for c in configs:
                compile_config(c, arch.cc_int, "bf16", use_cache=False, full=full)
            per = (time.perf_counter() - t0) / len(configs)
            print(f"oracle ({'full pipeline' if full else 'stopped after smem allocation'}): "
                  f"{per:.2f} s per config over {len(configs)} random bf16 configs")


if __name__ == "__main__":
    main()
