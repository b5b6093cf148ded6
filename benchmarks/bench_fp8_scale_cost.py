"""What the fp8 block scales cost tilefit's kernel at large batches: the same tiles timed as
(1) fp8-block, as tuned (one dot per 128-wide K group, its result scaled by the row's and the
column block's scales before it is added), (2) fp8 with the scales left out (the dot accumulates
in place, the same bytes are read), and (3) bf16. If (2) runs near the memory/compute bound and
(1) does not, the per-group scaling, not the loads, is what holds fp8-block back
(benchmarks/tune_padding.py: fp8-block at batch 4096 ran at 43-49% of its padded bound). Tiles
with BLOCK_SIZE_K 128 and BLOCK_SIZE_N dividing 128 also run kernel_variants.moe_fp8_small with its
row scale (one scale per row and K step, and the same applied one step late), checked against (1)'s output.

GPU only. `PYTHONPATH=src:benchmarks python benchmarks/bench_fp8_scale_cost.py --out results.jsonl` (GLM-5, EP8 and TP8,
both GEMMs, batches 1024 and 4096; do_bench medians, L2 cleared, the target's own inputs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_results import layer_shape  # noqa: E402

TILES = ("64x128x128 w4 s4", "64x128x128 w4 s3", "128x128x128 w8 s3", "64x256x128 w8 s3",
         "128x256x128 w8 s3")


def config(label: str):
    from tilefit.kernels.triton_moe.config import MoEConfig

    tile, w, s = label.split()
    m, n, k = (int(x) for x in tile.split("x"))
    return MoEConfig(m, n, k, 1, int(w[1:]), int(s[1:]))


def rowscale(cfg, shape, prob, align, scaled, do_bench) -> dict:
    """kernel_variants.moe_fp8_small with its row scale on the same problem (one scale per row and K step; with
    `late`, applied one step late): its time, and its largest difference from the product kernel's
    output on the rows both write, relative to that output's largest magnitude."""
    import torch

    from kernel_variants import launch_small

    g1 = shape.gemm == "gemm1"
    p = {"a": prob["a"], "b": prob["b"], "c": prob["c"], "a_s": prob["a_scale"], "b_s": prob["b_scale"],
         "n": shape.nk[0], "k": shape.nk[1], "arpt": shape.topk if g1 else 1}
    tw = None if g1 else prob["topk_weights"]
    rows = align.sorted_ids[align.sorted_ids < align.num_valid].long()
    scaled()
    want = prob["c"][rows].float()
    out = {}
    for late in (False, True):
        name = "fp8_rowscale_late" if late else "fp8_rowscale"
        launch_small(p, cfg, align, tw, row_scale=True, late=late)
        got = prob["c"][rows].float()
        out[name + "_err"] = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
        out[name + "_us"] = do_bench(lambda: launch_small(p, cfg, align, tw, row_scale=True, late=late), warmup=5, rep=25) * 1e3
    torch.cuda.synchronize()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layouts", default="ep8,tp8")
    p.add_argument("--batches", default="1024,4096")
    p.add_argument("--tiles", default=",".join(TILES),
                   help="comma-separated 'MxNxK wW sS' tiles (default: %(default)s)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    import torch
    from triton.testing import do_bench

    from tilefit.kernels.triton_moe import ops
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    target = TilefitMoETarget(gpu="h200")
    with open(args.out, "a", encoding="utf-8") as out:
        for layout in args.layouts.split(","):
            for job in ("gemm1", "gemm2"):
                fp8 = layer_shape(layout, "fp8-block").with_gemm(job)
                bf16 = layer_shape(layout, "bf16").with_gemm(job)
                for batch in (int(b) for b in args.batches.split(",")):
                    for label in args.tiles.split(","):
                        cfg = config(label)
                        row = {"layout": layout, "job": job, "batch": batch, "tile": label}
                        try:
                            scaled = target._launch(cfg, fp8, batch)
                            prob = target._problem(fp8, batch)
                            align = target._aligns[(fp8, batch, cfg.block_m)]
                            g1 = job == "gemm1"

                            def unscaled(prob=prob, align=align, cfg=cfg, g1=g1):
                                return ops.grouped_gemm(prob["a"], prob["b"], prob["c"], align, cfg,
                                                        a_rows_per_token=fp8.topk if g1 else 1,
                                                        topk_weights=None if g1 else prob["topk_weights"])
                            row["fp8_block_us"] = do_bench(scaled, warmup=5, rep=25) * 1e3
                            row["fp8_unscaled_us"] = do_bench(unscaled, warmup=5, rep=25) * 1e3
                            if cfg.block_k == 128 and 128 % cfg.block_n == 0:
                                row.update(rowscale(cfg, fp8, prob, align, scaled, do_bench))
                            row["bf16_us"] = do_bench(target._launch(cfg, bf16, batch), warmup=5,
                                                      rep=25) * 1e3
                        except Exception as e:  # noqa: BLE001 - a tile that does not fit: say so
                            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                        torch.cuda.synchronize()
                        print(json.dumps(row), flush=True)
                        out.write(json.dumps(row) + "\n")
                        out.flush()


if __name__ == "__main__":
    main()
