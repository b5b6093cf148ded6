#!/usr/bin/env python3
"""Where tilefit's fused-MoE kernel loses time at both ends of the batch range (issue 17 item 6),
measured on one GPU against variants (kernel_variants.py). JSON lines to $OUT/kbench.jsonl (or /tmp).

  PYTHONPATH=src:benchmarks python3 benchmarks/bench_kernel_variants.py [check small small2 large draws]

- check:  the fp8 small-K variant against the product kernel on the rows both write;
- small:  fp8-block batches 1-256, the product grid (BLOCK_SIZE_N >= 128) against BLOCK_SIZE_N 32/64
          and BLOCK_SIZE_K 64; per-launch time in replays of one CUDA graph of 32 launches, each with
          its own routing draw (so the weights stream from DRAM, as in a decode step);
- small2: fp8-block batches 1 and 16, the product kernel with BLOCK_SIZE_N 32/64 and BLOCK_SIZE_K 256;
- large:  batches 1024 and 4096, bf16 and fp8-block: pointer loads of B against a TMA descriptor, and
          TMA + warp specialisation; do_bench (CUDA events, L2 cleared, median);
- persistent: bf16 batches 1024 and 4096, the product kernel against a persistent tile loop;
- splitk: fp8-block batches 1 and 16, split-K (fp32 buffer, atomics, cast) against the product kernel;
- draws:  one config at batch 4096 on the tuner's routing draw and on this script's, through the
          tuner's own timing, ops.grouped_gemm and a bare launch, events and a CUDA graph, with the
          GPU's clocks and throttle reasons before and after.
"% floor": max(bytes / copy bandwidth, flops / MMA rate) of the draw's real rows and active experts,
with both ceilings measured at the start (torch copy; torch.matmul bf16 / torch._scaled_mm e4m3
8192^3). "pad": padded rows / real rows (the tensor cores compute the padding too).
Shapes: GLM-5 (zai-org/GLM-5 config.json: hidden 6144, moe_intermediate_size 2048, 256 experts, top-8).
"""
import json
import os
import sys
import time

import torch
import triton
from triton.testing import do_bench

from tilefit.kernels.triton_moe.align import moe_align
from tilefit.kernels.triton_moe.config import MoEConfig, parse_config
from tilefit.kernels.triton_moe.ops import quantize_fp8_blocks, quantize_fp8_groups
import kernel_variants as kvar
from bench_triton_kernel import DEV, E_ALL, H, I_FULL, SHAPES, TOPK, routing
from bench_triton_kernel import problem as bf16_problem

OUT = os.environ.get("OUT", "/tmp")
T0 = time.time()
BUDGET = float(os.environ.get("KB_BUDGET", "400"))


def emit(**d):
    d["t"] = round(time.time() - T0, 1)
    # opened per line: importing the script or refusing its arguments writes no file
    with open(os.path.join(OUT, "kbench.jsonl"), "a") as log:
        log.write(json.dumps(d) + "\n")
    print(json.dumps(d), flush=True)


def ceilings():
    x = torch.empty(2 ** 29, dtype=torch.bfloat16, device=DEV).normal_()
    y = torch.empty_like(x)
    t_copy = do_bench(lambda: y.copy_(x), warmup=25, rep=200, return_mode="median") * 1e-3
    del x, y
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    t_mm = do_bench(lambda: a @ b, warmup=25, rep=200, return_mode="median") * 1e-3
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=DEV)
    t8 = do_bench(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                  warmup=25, rep=200, return_mode="median") * 1e-3
    return dict(bw=2 * 2 ** 30 / t_copy, bf16=2 * 8192 ** 3 / t_mm, fp8=2 * 8192 ** 3 / t8)


def seeded_ceilings(log):
    """Seed torch, measure the ceilings and log them with the versions and the GPU's name."""
    torch.manual_seed(0)
    c = ceilings()
    log(kind="ceilings", **{k: float(v) for k, v in c.items()}, torch=torch.__version__,
        triton=triton.__version__, gpu=torch.cuda.get_device_name())
    return c


def problem(shape, gemm, t, fp8):
    """bench_triton_kernel's bf16 problem, quantised to fp8-block when `fp8` (bytes recounted)."""
    p = bf16_problem(shape, gemm, t)
    p.update(arpt=p["a_rows_per_token"], a_s=None, b_s=None)
    if fp8:
        p["a"], p["a_s"] = quantize_fp8_groups(p["a"])
        p["b"], p["b_s"] = quantize_fp8_blocks(p["b"])
        out = 2 * p["rows"] * p["n"]
        p["bytes"] = (p["bytes"] - out) // 2 + out  # A and B at one byte per element, C in bf16
    return p


def large(ceil):
    """Batches 1024-4096: base vs TMA-B (and TMA-B + warp specialisation), events, L2 cleared."""
    bf16 = ["128,256,64,16,8,4", "128,256,64,16,8,3", "64,256,64,16,8,4", "64,128,64,16,4,3",
            "128,128,64,16,8,4", "64,256,64,1,4,4", "128,128,128,16,8,3", "64,128,128,16,4,4"]
    fp8 = ["64,128,128,16,4,4", "64,128,128,16,4,3", "128,128,128,16,8,3", "128,256,128,16,8,3",
           "64,256,128,16,8,3", "128,128,128,16,4,4"]
    for batch in (4096, 1024):
        for fp in (False, True):
            for shape in ("EP8", "TP8"):
                for gemm in ("gemm1", "gemm2"):
                    if time.time() - T0 > BUDGET:
                        emit(stop="budget")
                        return
                    p = problem(shape, gemm, batch, fp)
                    tw = p["w"] if gemm == "gemm2" else None
                    floor = max(p["bytes"] / ceil["bw"], p["flops"] / ceil["fp8" if fp else "bf16"])
                    ref = None
                    for s in (fp8 if fp else bf16):
                        cfg = parse_config(s, "fp8-block" if fp else "bf16")
                        al = moe_align(p["ids"], p["e"], cfg.block_m)
                        for variant in ("base", "tma", "tma_ws"):
                            try:
                                p["c"].zero_()
                                kvar.run_variant(variant, p, cfg, al, tw)
                                torch.cuda.synchronize()
                                out = p["c"].float().clone()
                                if ref is None:
                                    ref = out
                                err = ((out - ref).norm() / ref.norm()).item()
                                ms = do_bench(lambda: kvar.run_variant(variant, p, cfg, al, tw),
                                              warmup=10, rep=40, return_mode="median")
                                us = ms * 1e3
                                emit(kind="large", batch=batch, dtype="fp8-block" if fp else "bf16",
                                     shape=shape, gemm=gemm, config=s, variant=variant, us=round(us, 2),
                                     pct_floor=round(100 * floor * 1e6 / us, 1), err=round(err, 5),
                                     pad=round(al.num_padded / max(1, p["rows"]), 3),
                                     padded_tflops=round(2 * al.num_padded * p["n"] * p["k"] / (us * 1e-6) / 1e12, 1))
                            except Exception as exc:  # noqa: BLE001
                                emit(kind="large", batch=batch, shape=shape, gemm=gemm, config=s,
                                     variant=variant, error=f"{type(exc).__name__}: {str(exc)[:300]}")
                    del p
                    torch.cuda.empty_cache()


def small(ceil, batches=(1, 16, 64, 256), cfgs=None):
    """fp8-block batches 1-256: the product grid (BN >= 128) against BN 32/64 and BK 64."""
    cfgs = cfgs or [("base", "16,128,128,1,4,3"), ("base", "16,128,128,1,4,4"), ("base", "16,128,256,1,4,3"),
            ("small", "16,64,128,1,4,4"), ("small", "16,64,128,1,4,5"), ("small", "16,32,128,1,4,4"),
            ("small", "16,32,128,1,4,5"), ("small", "16,64,64,1,4,5"), ("small", "16,32,64,1,4,5"),
            ("small", "32,64,128,1,4,4"), ("small", "16,64,128,1,8,4")]
    for batch, shape, gemm, p, tw, routes, floor in _fp8_draws(ceil, batches):
        for variant, s in cfgs:
            cfg = MoEConfig(*map(int, s.split(",")))
            als = [moe_align(ids, p["e"], cfg.block_m) for ids in routes]
            row = dict(kind="small", batch=batch, shape=shape, gemm=gemm, config=s, variant=variant)
            try:
                us = _graph_us(lambda al: kvar.run_variant(variant, p, cfg, al, tw), als)
                emit(**row, us=round(us, 2), pct_floor=round(100 * floor * 1e6 / us, 1))
            except Exception as exc:  # noqa: BLE001
                emit(**row, error=f"{type(exc).__name__}: {str(exc)[:300]}")


def _fp8_draws(ceil, batches, reps=32):
    """fp8-block problems timed as CUDA-graph replays of `reps` launches, each with its own routing
    draw so the weights stream from DRAM: (batch, shape, gemm, problem, router weights or None,
    routings, floor per launch in seconds); stops at the budget."""
    for batch in batches:
        for shape in ("EP8", "TP8"):
            for gemm in ("gemm1", "gemm2"):
                if time.time() - T0 > BUDGET:
                    emit(stop="budget")
                    return
                p = problem(shape, gemm, batch, True)
                routes = [routing(batch, p["e"], seed=100 + r)[0] for r in range(reps)]
                yield (batch, shape, gemm, p, p["w"] if gemm == "gemm2" else None, routes,
                       _draws_floor(p, routes, gemm, ceil) / reps)
                del p
                torch.cuda.empty_cache()


def _graph_us(launch, aligns):
    """Microseconds per launch: one CUDA graph of launch(al) for every alignment, replayed."""
    for al in aligns[:2]:  # compile and warm outside the capture
        launch(al)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for al in aligns:
                launch(al)
    torch.cuda.synchronize()
    return do_bench(g.replay, warmup=5, rep=30, return_mode="median") * 1e3 / len(aligns)


def check():
    """moe_fp8_small (BK 64, BN 32/64) against the product kernel at BN 128, on the rows both write
    (rows of other ranks' experts are never written by either)."""
    p = problem("EP8", "gemm1", 64, True)
    al = moe_align(p["ids"], p["e"], 16)
    valid = p["ids"].reshape(-1) >= 0
    p["c"].zero_()
    kvar.launch_base(p, MoEConfig(16, 128, 128, 1, 4, 3), al, None)
    ref = p["c"].float()[valid].clone()
    for s in ("16,64,64,1,4,4", "16,32,128,1,4,4", "16,64,128,1,4,4"):
        p["c"].zero_()
        kvar.launch_small(p, MoEConfig(*map(int, s.split(","))), al, None)
        torch.cuda.synchronize()
        err = ((p["c"].float()[valid] - ref).norm() / ref.norm()).item()
        emit(kind="check", config=s, err=err, ok=err < 1e-2)


def draws(ceil):
    """One config at batch 4096: the tuner's draw vs ours, its launch path vs a bare one, events vs a graph."""
    import subprocess
    from tilefit.kernels.triton_moe.ops import grouped_gemm
    from tilefit.tune.targets.base import TuneShape
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    def smi():
        try:
            return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active",
                                   "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception as exc:  # noqa: BLE001
            return str(exc)

    cfg = parse_config("128,256,64,16,8,4")
    for shape_name, gemm in (("EP8", "gemm1"), ("TP8", "gemm2")):
        shape = TuneShape(gemm, SHAPES[shape_name][0], H, I_FULL // (1 if shape_name == "EP8" else 8),
                          TOPK, "bf16", E_ALL)
        tgt = TilefitMoETarget(gpu="h200")
        emit(kind="disc", what="smi-before", smi=smi())
        us_run = tgt.run(cfg, shape, 4096)
        emit(kind="disc", shape=shape_name, gemm=gemm, what="target.run", us=round(us_run, 2))
        tp = tgt._problem(shape, 4096)
        mine = problem(shape_name, gemm, 4096, False)
        tune_as_mine = dict(mine, a=tp["a"], b=tp["b"], ids=tp["ids"], c=tp["c"],
                            w=tp["topk_weights"], rows=int((tp["ids"] >= 0).sum()))
        big_b = dict(mine, b=mine["b"] * 12.5)
        for label, p in (("tune-data", tune_as_mine), ("my-data", mine), ("my-data-b/4", big_b)):
            al = moe_align(p["ids"], p["e"], cfg.block_m)
            tw = p["w"] if gemm == "gemm2" else None
            f_mine = lambda: kvar.launch_base(p, cfg, al, tw)  # noqa: E731
            f_ops = lambda: grouped_gemm(p["a"], p["b"], p["c"], al, cfg,  # noqa: E731
                                         a_rows_per_token=p["arpt"], topk_weights=tw)
            for how, fn in (("launch_base", f_mine), ("ops.grouped_gemm", f_ops)):
                fn()
                torch.cuda.synchronize()
                ev = do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, stream=s):
                        fn()
                torch.cuda.synchronize()
                gr = do_bench(lambda: g.replay(), warmup=10, rep=40, return_mode="median") * 1e3
                emit(kind="disc", shape=shape_name, gemm=gemm, data=label, how=how, events_us=round(ev, 2),
                     graph_us=round(gr, 2), pad=round(al.num_padded / p["rows"], 3), rows=p["rows"])
        emit(kind="disc", what="smi-after", smi=smi())
        del tgt, tp, mine, tune_as_mine, big_b
        torch.cuda.empty_cache()


def small2(ceil):
    """fp8-block batches 1 and 16: the product kernel with BN 32/64 and BK 256."""
    tiles = [f"16,{n},{k},1,4,{st}" for n, k in ((32, 256), (64, 256)) for st in (3, 4, 5)]
    cfgs = [("base", s) for s in tiles + ["16,32,128,1,4,5", "16,128,256,1,4,3"]]
    small(ceil, batches=(1, 16), cfgs=cfgs + [("small", "16,32,128,1,4,5")])


def persistent(ceil):
    """bf16 batches 4096 and 1024: the product kernel against a persistent loop over tiles (one or
    two programs per SM, the tile loop flattened into the K loop or not); events, L2 cleared."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cfgs = ["128,256,64,16,8,4", "128,256,64,16,8,3", "64,128,64,16,4,3", "64,256,64,1,4,4",
            "128,128,64,16,8,4"]
    for batch in (4096, 1024):
        for shape in ("EP8", "TP8"):
            for gemm in ("gemm1", "gemm2"):
                if time.time() - T0 > BUDGET:
                    emit(stop="budget")
                    return
                p = problem(shape, gemm, batch, False)
                tw = p["w"] if gemm == "gemm2" else None
                floor = max(p["bytes"] / ceil["bw"], p["flops"] / ceil["bf16"])
                valid = p["ids"].reshape(-1) >= 0
                for s in cfgs:
                    cfg = parse_config(s)
                    al = moe_align(p["ids"], p["e"], cfg.block_m)
                    runs = [("base", lambda: kvar.launch_base(p, cfg, al, tw))]
                    for per_sm in (1, 2):
                        for flat in (False, True):
                            runs.append((f"persistent x{per_sm}{' flat' if flat else ''}",
                                         lambda n=per_sm * sms, f=flat: kvar.launch_persistent(p, cfg, al, tw, n, f)))
                    ref = None
                    for name, fn in runs:
                        try:
                            p["c"].zero_()
                            fn()
                            torch.cuda.synchronize()
                            out = p["c"].float()[valid]
                            ref = out.clone() if ref is None else ref
                            err = ((out - ref).norm() / ref.norm()).item()
                            us = do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3
                            emit(kind="persistent", batch=batch, shape=shape, gemm=gemm, config=s,
                                 variant=name, us=round(us, 2), pct_floor=round(100 * floor * 1e6 / us, 1),
                                 err=round(err, 5))
                        except Exception as exc:  # noqa: BLE001
                            emit(kind="persistent", batch=batch, shape=shape, gemm=gemm, config=s,
                                 variant=name, error=f"{type(exc).__name__}: {str(exc)[:300]}")
                del p
                torch.cuda.empty_cache()


def splitk(ceil):
    """fp8-block batches 1 and 16: split-K (zeroed fp32 buffer, atomic adds, a cast) against the
    product kernel with BLOCK_SIZE_N 32; the buffer's zeroing and the cast are inside the timing.
    CUDA-graph replays of 32 launches, each with its own routing draw."""
    plans = [("base", "16,32,256,1,4,4", 1), ("base", "16,32,128,1,4,5", 1)]
    for s in ("16,32,128,1,4,4", "16,64,128,1,4,4", "16,32,256,1,4,4", "16,128,128,1,4,4"):
        for splits in (2, 4, 8):
            plans.append(("splitk", s, splits))
    for batch, shape, gemm, p, tw, routes, floor in _fp8_draws(ceil, (1, 16)):
        c32 = torch.zeros(p["c"].shape, dtype=torch.float32, device=DEV)
        valid = routes[0].reshape(-1) >= 0
        ref = None
        for variant, s, splits in plans:
            cfg = MoEConfig(*map(int, s.split(",")))
            if p["k"] % (splits * cfg.block_k):
                continue
            als = [moe_align(ids, p["e"], cfg.block_m) for ids in routes]

            def one(al, cfg=cfg, variant=variant, splits=splits):
                if variant == "base":
                    kvar.launch_base(p, cfg, al, tw)
                else:
                    kvar.launch_splitk(p, cfg, al, tw, splits, c32)
            row = dict(kind="splitk", batch=batch, shape=shape, gemm=gemm, config=s, variant=variant,
                       splits=splits)
            try:
                p["c"].zero_()
                one(als[0])
                torch.cuda.synchronize()
                out = p["c"].float()[valid]
                ref = out.clone() if ref is None else ref
                err = ((out - ref).norm() / ref.norm()).item()
                us = _graph_us(one, als)
                emit(**row, us=round(us, 2), pct_floor=round(100 * floor * 1e6 / us, 1), err=round(err, 5))
            except Exception as exc:  # noqa: BLE001
                emit(**row, error=f"{type(exc).__name__}: {str(exc)[:300]}")


def _draws_floor(p, routes, gemm, ceil, elem=1, mma="fp8"):
    """Summed roofline floor (seconds) of `routes` on problem `p`: the draws' real rows and experts,
    at `elem` bytes per operand element and the `mma` ceiling ("fp8" or "bf16")."""
    bytes_tot = flops_tot = 0
    for ids in routes:
        flat = ids.reshape(-1)
        local = flat >= 0
        rows = int(local.sum())
        active = int(torch.unique(flat[local]).numel())
        a_read = (int(torch.unique(torch.nonzero(local).reshape(-1) // TOPK).numel())
                  if gemm == "gemm1" else rows)
        bytes_tot += elem * (a_read * p["k"] + active * p["n"] * p["k"]) + 2 * rows * p["n"]
        flops_tot += 2 * rows * p["n"] * p["k"]
    return max(bytes_tot / ceil["bw"], flops_tot / ceil[mma])


if __name__ == "__main__":
    steps = {"check": check, "small": small, "small2": small2, "large": large, "draws": draws,
             "persistent": persistent, "splitk": splitk}
    what = sys.argv[1:] or ["check", "small", "small2", "large", "draws"]
    unknown = [w for w in what if w not in steps]
    if unknown:  # before the ceilings: a typo costs no GPU time
        print(f"bench_kernel_variants: unknown step(s) {', '.join(unknown)}; choose from "
              f"{', '.join(steps)}", file=sys.stderr)
        sys.exit(2)
    c = seeded_ceilings(emit)
    for w in what:
        steps[w]() if w == "check" else steps[w](c)
    emit(done=True)
