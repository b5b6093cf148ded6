#!/usr/bin/env python3
"""The fused-MoE kernel launched as the engines launch it, against tilefit's own launch, on one GPU
(GLM-5 shapes, bf16 and fp8-block); and what torch's CUTLASS fp8 GEMMs reach on the same problems.
JSON lines to $OUT/forms.jsonl (or /tmp).

  PYTHONPATH=src:benchmarks python3 benchmarks/bench_launch_forms.py [forms] [naive] [ref]

- forms: batches 16, 256 (replays of one CUDA graph of 32 launches, each its own routing draw),
         1024 and 4096 (do_bench, one draw), EP8 and TP8, both GEMMs, a few tiles of each
         BLOCK_SIZE_M; variants `base` (tilefit's alignment and grid), `sg` (SGLang's kernel on
         tilefit's alignment, even K), `sg_form` (SGLang's alignment and grid: the sorted-ids
         buffer's rows with early exit, and under EP the -1 bucket whose blocks write zeros;
         sglang_paths.sglang_align);
- naive: TP8 batches 1-8 (vLLM 0.14.0+'s naive block assignment, one block per (token, expert)
         pair, sglang_paths.vllm_naive_align) against tilefit's alignment, graph replays;
- ref:   torch's fp8 GEMMs on the H200: dense e4m3 with DeepSeek-style block scales (1x128
         activations, 128x128 weights) and the grouped row-wise scaled GEMM over the same routed
         rows as the fused kernel at batches 1024 and 4096, "% floor" as the fused kernel's.
Outputs are held against tilefit's kernel on every row either writes ("err").
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
from bench_triton_kernel import TOPK, routing

OUT = os.environ.get("OUT", "/tmp")
LOG = open(os.path.join(OUT, "forms.jsonl"), "a")
T0 = time.time()
BUDGET = float(os.environ.get("FORMS_BUDGET", "300"))

TILES = {  # (batch class) -> dtype -> configs, spanning BLOCK_SIZE_M
    "small": {"bf16": ["16,64,128,1,4,4", "16,128,128,1,4,3", "32,64,128,1,4,4", "64,64,64,1,4,4"],
              "fp8-block": ["16,64,128,1,4,3", "16,128,128,1,4,3", "32,128,128,1,4,3",
                            "64,64,128,1,4,4"]},
    "large": {"bf16": ["128,256,64,16,8,4", "64,128,64,16,4,3", "64,256,64,16,8,4",
                       "32,128,64,16,4,4"],
              "fp8-block": ["64,128,128,16,4,4", "128,128,128,16,8,3", "32,128,128,16,4,3",
                            "16,128,128,16,4,3"]},
}


def emit(**d):
    d["t"] = round(time.time() - T0, 1)
    LOG.write(json.dumps(d) + "\n")
    LOG.flush()
    print(json.dumps(d), flush=True)


def _over():
    if time.time() - T0 > BUDGET:
        emit(stop="budget")
        return True
    return False


def _launch(variant, p, cfg, tw, shape):
    """(align(ids) -> (alignment, grid rows), launch(alignment, grid rows)) for one variant."""
    if variant == "base":
        return (lambda ids: (moe_align(ids, p["e"], cfg.block_m), None),
                lambda al, rows: kvar.launch_base(p, cfg, al, tw))
    if variant == "sg":
        return (lambda ids: (moe_align(ids, p["e"], cfg.block_m), None),
                lambda al, rows: sg.launch_sg(p, cfg, al, tw))
    if variant == "sg_form":
        ep = shape == "EP8"
        return (lambda ids: sg.sglang_align(ids, p["e"], cfg.block_m, ep),
                lambda al, rows: sg.launch_sg(p, cfg, al, tw, grid_rows=rows, ep_zeros=ep))
    if variant == "naive":
        return (lambda ids: (sg.vllm_naive_align(ids, cfg.block_m), None),
                lambda al, rows: kvar.launch_base(p, cfg, al, tw))
    raise ValueError(variant)


def _err(p, launch, aligned, ref):
    """Relative error against tilefit's kernel over every (token, k) row (unwritten rows are zero)."""
    p["c"].zero_()
    launch(*aligned)
    torch.cuda.synchronize()
    out = p["c"].float()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _table(batches, shapes, variants, cls):
    for batch in batches:
        for dtype in ("bf16", "fp8-block"):
            for shape in shapes:
                for gemm in ("gemm1", "gemm2"):
                    if _over():
                        return
                    fp8 = dtype != "bf16"
                    p = problem(shape, gemm, batch, fp8)
                    tw = p["w"] if gemm == "gemm2" else None
                    graph = batch <= 256
                    routes = ([routing(batch, p["e"], seed=100 + r)[0] for r in range(32)] if graph
                              else [p["ids"]])
                    floor = _draws_floor(p, routes, gemm, ceil_, elem=1 if fp8 else 2,
                                         mma="fp8" if fp8 else "bf16") / len(routes)
                    for s in TILES[cls][dtype]:
                        cfg = parse_config(s, dtype)
                        p["c"].zero_()
                        kvar.launch_base(p, cfg, moe_align(routes[0], p["e"], cfg.block_m), tw)
                        torch.cuda.synchronize()
                        ref = p["c"].float().clone()
                        for variant in variants:
                            row = dict(step=cls, batch=batch, dtype=dtype, shape=shape, gemm=gemm,
                                       config=s, variant=variant)
                            try:
                                align, launch = _launch(variant, p, cfg, tw, shape)
                                aligned = [align(ids) for ids in routes]
                                err = _err(p, launch, aligned[0], ref)
                                if graph:
                                    us = _graph_us(lambda a: launch(*a), aligned)
                                else:
                                    us = do_bench(lambda: launch(*aligned[0]), warmup=10, rep=40,
                                                  return_mode="median") * 1e3
                                al0, rows0 = aligned[0]
                                emit(**row, us=round(us, 2), pct_floor=round(100 * floor * 1e6 / us, 1),
                                     err=round(err, 5), timing="graph" if graph else "events",
                                     padded=al0.num_padded, grid_rows=rows0 or al0.num_padded)
                            except Exception as exc:  # noqa: BLE001
                                emit(**row, error=f"{type(exc).__name__}: {str(exc)[:300]}")
                    del p
                    torch.cuda.empty_cache()


def forms():
    _table((16, 256), ("EP8", "TP8"), ("base", "sg", "sg_form"), "small")
    _table((1024, 4096), ("EP8", "TP8"), ("base", "sg", "sg_form"), "large")


def naive():
    _table((1, 2, 4, 8), ("TP8",), ("base", "naive"), "small")


def _rowwise_grouped(p, fp8_a, a_scale):
    """torch._scaled_grouped_mm (e4m3, one scale per row of A and per column of each expert's
    weight) over the expert-sorted real rows; None where this torch build lacks it."""
    flat = p["ids"].reshape(-1)
    local = torch.nonzero(flat >= 0).reshape(-1)
    order = local[torch.sort(flat[local], stable=True).indices]
    a = fp8_a[order // p["arpt"]].contiguous()
    sa = a_scale[order // p["arpt"]].contiguous()
    counts = torch.bincount(flat[local], minlength=p["e"])
    offs = torch.cumsum(counts, 0).to(torch.int32)
    b = p["b"].transpose(1, 2)  # [E, K, N] view of the [E, N, K] weights: column-major per expert
    sb = torch.ones(p["e"], p["n"], device="cuda", dtype=torch.float32)
    return lambda: torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)


def ref():
    for m, n, k in ((8192, 8192, 8192), (4096, 4096, 6144), (4096, 6144, 2048)):
        if _over():
            return
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        for name, sa, sb in (
                ("tensor", torch.ones((), device="cuda"), torch.ones((), device="cuda")),
                ("block_1x128_128x128_outer", torch.ones(k // 128, m, device="cuda").t(),
                 torch.ones(n // 128, k // 128, device="cuda").t()),
                ("block_1x128_128x128", torch.ones(m, k // 128, device="cuda"),
                 torch.ones(k // 128, n // 128, device="cuda"))):
            try:
                fn = lambda: torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
                fn()
                us = do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3
                emit(step="ref", kind="dense", scales=name, m=m, n=n, k=k, us=round(us, 2),
                     tflops=round(2 * m * n * k / us / 1e6, 1))
            except Exception as exc:  # noqa: BLE001
                emit(step="ref", kind="dense", scales=name, m=m, n=n, k=k,
                     error=f"{type(exc).__name__}: {str(exc)[:300]}")
    for batch in (1024, 4096):
        for shape in ("EP8", "TP8"):
            for gemm in ("gemm1", "gemm2"):
                if _over():
                    return
                p = problem(shape, gemm, batch, True)
                floor = _draws_floor(p, [p["ids"]], gemm, ceil_, elem=1, mma="fp8")
                row = dict(step="ref", kind="grouped_rowwise", batch=batch, shape=shape, gemm=gemm)
                try:
                    fn = _rowwise_grouped(p, p["a"], torch.ones(p["a"].shape[0], device="cuda"))
                    fn()
                    us = do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3
                    emit(**row, us=round(us, 2), pct_floor=round(100 * floor * 1e6 / us, 1))
                except Exception as exc:  # noqa: BLE001
                    emit(**row, error=f"{type(exc).__name__}: {str(exc)[:300]}")
                del p
                torch.cuda.empty_cache()


if __name__ == "__main__":
    steps = {"forms": forms, "naive": naive, "ref": ref}
    what = sys.argv[1:] or list(steps)
    if any(w not in steps for w in what):
        print(f"bench_launch_forms: steps are {', '.join(steps)}", file=sys.stderr)
        sys.exit(2)
    ceil_ = seeded_ceilings(emit)
    for w in what:
        steps[w]()
    emit(done=True)
