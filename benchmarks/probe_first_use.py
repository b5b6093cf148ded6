"""What a config's first probe in a GPU process costs (issue 17). In session 8's H200 traces of
TP8 fp8-block fast runs, 66-72 probes a run took 0.3-1.8 s each (42-49 of 77-84 s of probe time;
the median probe 10-14 ms), nearly all in gemm2's first searches (batch 1 and 1024), where each config
is probed for the first time; EP8 fp8-block and both bf16 layouts had no such tail.

In this process, for the configs a run's journal probed at one (GEMM, batch), in the journal's
order, alternating with probes of the other GEMM as the GPU worker's four searches do:
`TilefitMoETarget.probe` timed twice per config (first use, then again), with Triton's compile
listener counting the compiles this process ran itself (a cache miss: a kernel the compile pool
compiled for another specialisation) and the seconds they took.

With the run's own TRITON_CACHE_DIR the kernels the compile pool built are there, but so are any
the run's GPU worker compiled itself, so a first probe finds them all. With `--compile-here` and an
empty TRITON_CACHE_DIR each config is first compiled as the compile pool does
(`TilefitMoETarget.compile`, which the listener sees too); a probe that compiles after that made
another Triton source key, and the fields where the launch's key (signature, constants, attrs)
differs from the compile pool's are printed. Session 8 (H200): 10 of 16 TP8 fp8-block gemm2
configs at batch 1 differed in `attrs` (benchmarks/RESULTS.md, results/tune_v8/probe_first_use_*;
those files' `compile_s` also counted the --compile-here compiles: `probe_compile_s` now counts the
probes' own). A config whose pool compile was itself a cache hit (a GROUP_SIZE_M variant of a tile
compiled before) has no pool key to compare: its row says `"pool_compile": "cache hit"`.

Usage: TRITON_CACHE_DIR=WORK/LAYOUT/triton-cache PYTHONPATH=src python3 \
    benchmarks/probe_first_use.py JOURNAL.jsonl --layout tp8 --dtype fp8-block --gemm gemm2 \
    --batch 1 [--other-batch 1] [--out F]   (GLM-5's per-GPU shapes)
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _journal_configs(path: str, gemm: str, batch: int) -> list[dict[str, Any]]:
    """The configs probed at (gemm, batch), in first-occurrence order."""
    seen, out = set(), []
    with (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d.get("batch") != batch or not str(d.get("shape", "")).startswith(gemm + ":"):
                continue
            key = json.dumps(d["config"], sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append(d["config"])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("journal")
    p.add_argument("--layout", choices=("ep8", "tp8"), default="tp8")
    p.add_argument("--dtype", default="fp8-block")
    p.add_argument("--gemm", default="gemm2")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--other-batch", type=int, default=1,
                   help="batch of the other GEMM's probes interleaved (0: none)")
    p.add_argument("--limit", type=int, default=40, help="configs probed (at least 1)")
    p.add_argument("--gpu", default="h200")
    p.add_argument("--compile-here", action="store_true",
                   help="compile each config as the compile pool does before probing it")
    p.add_argument("--out")
    args = p.parse_args()
    if args.limit < 1:
        p.error("--limit must be at least 1")

    import torch
    import triton

    from tune_results import layer_shape  # benchmarks/: GLM-5's per-GPU shape, from the planner
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    compiles: list[float] = []  # seconds of each compile this process ran
    probe_compile_s = 0.0  # ... of those a probe ran
    sources: list[dict[str, str]] = []  # the Triton source key of each compile, in order

    def listener(*, src: Any, metadata: Any, metadata_group: Any, times: Any, cache_hit: bool) -> None:
        if not cache_hit:
            compiles.append(float(getattr(times, "total", 0) or 0) / 1e6)  # microseconds
            sources.append({"signature": repr(sorted(getattr(src, "signature", {}).items())),
                            "constants": repr(sorted(getattr(src, "constants", {}).items())),
                            "attrs": repr(getattr(src, "attrs", {}))})

    triton.knobs.compilation.listener = listener
    configs = _journal_configs(args.journal, args.gemm, args.batch)
    if not configs:
        raise SystemExit(f"no {args.gemm} probes at batch {args.batch} in {args.journal}")
    shape = layer_shape(args.layout, args.dtype).with_gemm(args.gemm)
    other = shape.with_gemm("gemm1" if args.gemm == "gemm2" else "gemm2")
    target = TilefitMoETarget(gpu=args.gpu)
    first_other = target.config_from_dict(configs[0]) if args.other_batch else None
    if args.compile_here and first_other is not None:
        target.compile(target.compile_key(first_other), other)
    rows = []
    for d in configs[: args.limit]:
        config = target.config_from_dict(d)
        if first_other is not None:  # the other search's probe: the worker switches GEMMs
            target.probe(first_other, other, args.other_batch)
        torch.cuda.synchronize()
        row: dict[str, Any] = {"config": d}
        pool_key = None
        if args.compile_here:
            before = len(sources)
            target.compile(target.compile_key(config), shape)
            pool_key = sources[-1] if len(sources) > before else None
            if pool_key is None:
                row["pool_compile"] = "cache hit"
        for label in ("first_ms", "again_ms"):
            before = len(compiles)
            t = time.perf_counter()
            target.probe(config, shape, args.batch)
            torch.cuda.synchronize()
            row[label] = round(1000 * (time.perf_counter() - t), 2)
            row[label.replace("_ms", "_compiles")] = len(compiles) - before
            probe_compile_s += sum(compiles[before:])
            if pool_key is not None and len(sources) > before:  # the launch compiled anyway
                mine = sources[-1]
                row["differs"] = {k: [pool_key[k], mine[k]] for k in mine if mine[k] != pool_key[k]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    firsts = [r["first_ms"] for r in rows]
    summary = {"shape": shape.key(), "batch": args.batch, "configs": len(rows),
               "first_ms_median": statistics.median(firsts), "first_ms_max": max(firsts),
               "again_ms_median": statistics.median(r["again_ms"] for r in rows),
               "compiles_here": sum(r["first_compiles"] + r["again_compiles"] for r in rows),
               "probe_compile_s": round(probe_compile_s, 2)}
    print(json.dumps(summary))
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            for r in rows + [summary]:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
