#!/usr/bin/env python3
"""SGLang's even-K, TMA and PDL paths (sglang_paths.py) against tilefit's kernel on one GPU, GLM-5
shapes (EP8, TP8), bf16 and fp8-block. JSON lines to $OUT/sgpaths.jsonl (or /tmp).

  PYTHONPATH=src:benchmarks python3 benchmarks/bench_sglang_paths.py [large] [small]

- large: batches 1024 and 4096, do_bench (CUDA events, L2 cleared, median) on one routing draw;
         variants: `base` (tilefit's kernel), `sg_mask` (SGLang's kernel with the K masks), `sg`
         (even-K), `sg_btma` (B through TMA), `sg_tma` (gemm1: B through TMA and the output in
         sorted order; gemm2: A and B through TMA from the sorted intermediate: USE_TMA);
- small: batches 1, 16, 64 and 256 as replays of one CUDA graph of 32 launches, each with its own
         routing draw; variants `base`, `sg`, `sg_pdl` (PDL, the next launch released at the start),
         `sg_tma`, `sg_tma_pdl`.
Each variant's output is held against tilefit's kernel on the rows both write ("err": relative
Frobenius norm). "% floor": max(bytes / copy rate, flops / MMA rate) over the draws' real rows and
active experts, ceilings measured at the start (bench_kernel_variants.ceilings).
"""
import json
import os
import sys
import time

import torch
from triton.testing import do_bench

from tilefit.kernels.triton_moe.align import moe_align
from tilefit.kernels.triton_moe.config import parse_config
import kernel_variants as kvar
import sglang_paths as sg
from bench_kernel_variants import _draws_floor, _graph_us, problem, seeded_ceilings
from bench_triton_kernel import routing

OUT = os.environ.get("OUT", "/tmp")
LOG = open(os.path.join(OUT, "sgpaths.jsonl"), "a")
T0 = time.time()
BUDGET = float(os.environ.get("SG_BUDGET", "480"))

LARGE = {"bf16": ["128,256,64,16,8,4", "64,128,64,16,4,3", "128,128,64,16,8,4", "64,256,64,16,8,4"],
         "fp8-block": ["64,128,128,16,4,4", "64,128,128,16,4,3", "128,128,128,16,8,3",
                       "32,128,128,16,4,3"]}
SMALL = {"bf16": ["16,64,128,1,4,4", "16,128,128,1,4,3", "32,64,128,1,4,4", "16,64,256,1,4,3"],
         "fp8-block": ["16,32,128,1,4,4", "16,64,128,1,4,4", "16,128,128,1,4,3", "64,64,128,1,4,5"]}


def emit(**d):
    d["t"] = round(time.time() - T0, 1)
    LOG.write(json.dumps(d) + "\n")
    LOG.flush()
    print(json.dumps(d), flush=True)


def _launcher(variant, p, cfg, gemm, tw):
    """launch(al) for one variant; TMA variants get their sorted operand / output per alignment."""
    cache = {}

    def prep(al):
        key = id(al)
        if key not in cache:
            a_sorted = sg.sorted_operand(p["a"], p["a_s"], al, p["arpt"]) if gemm == "gemm2" else None
            c_out = torch.empty(al.num_padded, p["n"], device="cuda", dtype=torch.bfloat16)
            cache[key] = (a_sorted, c_out)
        return cache[key]

    def launch(al):
        if variant == "base":
            return kvar.launch_base(p, cfg, al, tw)
        tma = variant.startswith("sg_tma")
        a_sorted, c_out = prep(al) if tma else (None, None)
        sg.launch_sg(p, cfg, al, tw, even_k=variant != "sg_mask",
                     b_tma=tma or variant == "sg_btma", a_tma=tma and gemm == "gemm2",
                     c_sorted=tma and gemm == "gemm1", gdc=variant.endswith("pdl"),
                     gdc_early=variant.endswith("pdl"), a_sorted=a_sorted, c_out=c_out)
    return launch, prep


def _written(variant, p, al, gemm, prep):
    """The rows of this launch's output that tilefit's kernel writes too, in token order."""
    ids = al.sorted_ids.long()
    valid = ids < al.num_valid
    if variant.startswith("sg_tma") and gemm == "gemm1":
        c_out = prep(al)[1]
        return c_out[valid].float(), ids[valid]
    return p["c"][ids[valid]].float(), ids[valid]


def _err(variant, p, al, gemm, launch, prep, ref):
    p["c"].zero_()
    launch(al)
    torch.cuda.synchronize()
    out, rows = _written(variant, p, al, gemm, prep)
    want = ref[rows]
    return ((out - want).norm() / want.norm().clamp_min(1e-30)).item()


def _floor(p, routes, gemm, ceil, fp8):
    return _draws_floor(p, routes, gemm, ceil, elem=1 if fp8 else 2, mma="fp8" if fp8 else "bf16")


def _rows(batches, configs, variants, ceil, reps):
    for batch in batches:
        for dtype in ("bf16", "fp8-block"):
            for shape in ("EP8", "TP8"):
                for gemm in ("gemm1", "gemm2"):
                    if time.time() - T0 > BUDGET:
                        emit(stop="budget")
                        return
                    p = problem(shape, gemm, batch, dtype != "bf16")
                    tw = p["w"] if gemm == "gemm2" else None
                    routes = ([p["ids"]] if reps == 1 else
                              [routing(batch, p["e"], seed=100 + r)[0] for r in range(reps)])
                    floor = _floor(p, routes, gemm, ceil, dtype != "bf16") / len(routes)
                    for s in configs[dtype]:
                        cfg = parse_config(s, dtype)
                        aligns = [moe_align(ids, p["e"], cfg.block_m) for ids in routes]
                        p["c"].zero_()
                        kvar.launch_base(p, cfg, aligns[0], tw)
                        torch.cuda.synchronize()
                        ref = p["c"].float().clone()
                        for variant in variants:
                            row = dict(batch=batch, dtype=dtype, shape=shape, gemm=gemm, config=s,
                                       variant=variant)
                            try:
                                launch, prep = _launcher(variant, p, cfg, gemm, tw)
                                err = _err(variant, p, aligns[0], gemm, launch, prep, ref)
                                if reps == 1:
                                    us = do_bench(lambda: launch(aligns[0]), warmup=10, rep=40,
                                                  return_mode="median") * 1e3
                                else:
                                    for al in aligns:
                                        prep(al) if variant.startswith("sg_tma") else None
                                    us = _graph_us(launch, aligns)
                                emit(**row, us=round(us, 2), pct_floor=round(100 * floor * 1e6 / us, 1),
                                     err=round(err, 5), timing="events" if reps == 1 else "graph")
                            except Exception as exc:  # noqa: BLE001
                                emit(**row, error=f"{type(exc).__name__}: {str(exc)[:300]}")
                    del p
                    torch.cuda.empty_cache()


def large(ceil):
    _rows((4096, 1024), LARGE, ("base", "sg_mask", "sg", "sg_btma", "sg_tma"), ceil, 1)


def small(ceil):
    _rows((1, 16, 64, 256), SMALL, ("base", "sg", "sg_pdl", "sg_tma", "sg_tma_pdl"), ceil, 32)


if __name__ == "__main__":
    steps = {"large": large, "small": small}
    what = sys.argv[1:] or ["large", "small"]
    if any(w not in steps for w in what):
        print(f"bench_sglang_paths: steps are {', '.join(steps)}", file=sys.stderr)
        sys.exit(2)
    c = seeded_ceilings(emit)
    for w in what:
        steps[w](c)
    emit(done=True)
