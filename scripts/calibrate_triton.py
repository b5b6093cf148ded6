#!/usr/bin/env python3
"""Record the Triton compiler's shared memory for our fused-MoE kernel and refit the SMEM model.

Compiles every distinct config (GROUP_SIZE_M only reorders blocks, so GROUP_SIZE_M=1 stands for all
four) of the bf16, fp8 (per-tensor) and fp8-block (128x128 block scales; twice: weight scales per
column as vLLM's kernel applies them, and per row as SGLang's does) grids for the given archs,
in a process pool, and writes src/tilefit/kernels/triton_moe/data/oracle_triton-<version>.json (the
recorded oracle table the tests compare with) and calib_triton-<version>.json (the model's
calibration, fitted from it).

  PYTHONPATH=src python scripts/calibrate_triton.py -j 16   # every catalogued arch
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "src/tilefit/kernels/triton_moe/data"
ROW_TABLE = "fp8-block-row"  # smem.ROW_TABLE (not imported here: workers import on first job)
SWAP_SUFFIX = "-swap"  # smem.SWAP_SUFFIX: the swap-AB tables, sm90 and the tiles it applies to
SWAP_DTYPES = f"fp8{SWAP_SUFFIX},fp8-block{SWAP_SUFFIX},{ROW_TABLE}{SWAP_SUFFIX}"


def _compile(job, full=False):
    arch, dtype, values = job
    from tilefit.hw.catalog import get_arch
    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.kernels.triton_moe.spec import compile_config

    try:
        swap = dtype.endswith(SWAP_SUFFIX)  # the engines' sm90 swap-AB path
        unswapped = dtype[:-len(SWAP_SUFFIX)] if swap else dtype
        row = unswapped == ROW_TABLE  # fp8-block with SGLang's per-row weight scales
        r = compile_config(MoEConfig(*values), get_arch(arch).cc_int, "fp8-block" if row else unswapped,
                           full=full, row_scale=row, swap_ab=swap)
        return job, r.shared, r.seconds, ""
    except Exception as exc:  # a compiler crash is a result, not the end of the run
        return job, -1, 0.0, f"{type(exc).__name__}: {str(exc)[:200]}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", default=None, help="comma-separated (default: every catalogued arch)")
    p.add_argument("--dtypes", default=f"bf16,fp8,fp8-block,{ROW_TABLE},{SWAP_DTYPES}",
                   help=f"table dtypes; {ROW_TABLE} is fp8-block with one weight scale per row "
                        f"where a tile's columns share one (SGLang's kernel); *{SWAP_SUFFIX} the "
                        f"fp8 tiles vLLM and SGLang compute as B^T A^T on sm90 (swap-AB)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", type=Path, default=DATA)
    p.add_argument("--fit-only", action="store_true", help="refit calibration from the recorded table")
    p.add_argument("--sample", type=int, default=0,
                   help="compile only N random distinct configs per arch and dtype (seed 0)")
    p.add_argument("--check-full", type=int, default=0, metavar="N",
                   help="also compile N random recorded configs per arch through the whole pipeline "
                        "(to a cubin) and check the early-stopped figure against it")
    a = p.parse_args(argv)

    import triton

    from tilefit.hw.catalog import get_arch
    from tilefit.kernels.triton_moe import FAMILY, smem
    from tilefit.kernels.triton_moe.config import grid_configs
    from tilefit.kernels.triton_moe.kernel import fused_moe_kernel

    version = triton.__version__
    table_path = a.out / f"oracle_triton-{version}.json"
    # an older table's "fp8" is block-scaled: upgrade_table renames it before new entries join
    table = smem.upgrade_table(json.loads(table_path.read_text())) if table_path.exists() else {}
    if table.get("kernel_hash") != fused_moe_kernel.cache_key:  # kernel changed: start afresh
        table = {"format": smem.TABLE_FORMAT, "triton_version": version,
                 "kernel_hash": fused_moe_kernel.cache_key, "entries": {}}
    rng = random.Random(0)
    if not a.fit_only:
        jobs = []
        from tilefit.hw.catalog import all_archs

        archs = a.archs.split(",") if a.archs else [x.name for x in all_archs()]
        for arch in archs:
            for dtype in a.dtypes.split(","):
                swap = dtype.endswith(SWAP_SUFFIX)
                unswapped = dtype[:-len(SWAP_SUFFIX)] if swap else dtype
                base = "fp8-block" if unswapped == ROW_TABLE else unswapped
                if base not in FAMILY.dtypes(get_arch(arch)):
                    continue  # e.g. no e4m3 tensor-core dots before sm89
                if swap and get_arch(arch).cc[0] != 9:
                    continue  # the engines swap on sm90 only
                space = grid_configs(base, "distinct")
                if swap:
                    space = [c for c in space if smem.swapped(c, base, True)]
                if a.sample:
                    space = rng.sample(space, min(a.sample, len(space)))
                for cfg in space:
                    key = smem.table_key(arch, dtype, cfg)
                    if key not in table["entries"]:
                        jobs.append((arch, dtype, cfg.values()))
        t0, secs, failures = time.time(), [], 0
        print(f"compiling {len(jobs)} configs with {a.jobs} workers", file=sys.stderr)
        with ProcessPoolExecutor(a.jobs) as pool:
            for i, fut in enumerate(as_completed([pool.submit(_compile, j) for j in jobs]), 1):
                (arch, dtype, values), shared, sec, err = fut.result()
                if err:
                    failures += 1
                    print(f"  {arch} {dtype} {values}: {err}", file=sys.stderr)
                    continue
                table["entries"][smem.table_key(arch, dtype, values)] = shared
                secs.append(sec)
                if i % 200 == 0:
                    print(f"  {i}/{len(jobs)} {time.time() - t0:.0f}s", file=sys.stderr)
        if secs:
            print(f"{len(secs)} compiles, {failures} failures, wall {time.time() - t0:.1f}s, "
                  f"{sum(secs) / len(secs):.2f}s per compile per worker", file=sys.stderr)
        smem.write_json_atomic(table_path, table)
    if a.check_full:
        keys = sorted(table["entries"])
        by_arch: dict[str, list[str]] = {}
        for k in keys:
            by_arch.setdefault(k.split("/")[0], []).append(k)
        picks = [k for ks in by_arch.values() for k in rng.sample(ks, min(a.check_full, len(ks)))]
        jobs = []
        for k in picks:
            arch, dtype, (bm, bn, bk, w, s) = smem.parse_table_key(k)
            jobs.append((arch, dtype, (bm, bn, bk, 1, w, s)))
        t0, secs, mismatch = time.time(), [], 0
        with ProcessPoolExecutor(a.jobs) as pool:
            for (arch, dtype, values), shared, sec, err in pool.map(_compile, jobs,
                                                                   [True] * len(jobs)):
                want = table["entries"][smem.table_key(arch, dtype, values)]
                if err or shared != want:
                    mismatch += 1
                    print(f"  FULL MISMATCH {arch} {dtype} {values}: {shared} vs {want} {err}",
                          file=sys.stderr)
                secs.append(sec)
        print(f"full-pipeline check: {len(jobs)} configs, {mismatch} mismatches, "
              f"{sum(secs) / max(1, len(secs)):.2f}s per full compile per worker, "
              f"wall {time.time() - t0:.1f}s", file=sys.stderr)
    calib = smem.fit_calibration(table)
    smem.write_json_atomic(a.out / f"calib_triton-{version}.json", calib)
    bad = smem.check_against_table(table, calib)
    print(f"calibration written; {len(table['entries'])} recorded configs, {len(bad)} disagree",
          file=sys.stderr)
    for line in bad[:20]:
        print("  " + line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
