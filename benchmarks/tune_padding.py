"""Where the large-batch rows' time goes: the roofline floor counts each routed row once, but the
kernel computes whole BLOCK_SIZE_M tiles per expert, so an expert with 129 rows under a 128-row
tile does the MMA work of 256. For each row of bench_tune result files this prints, from the run's
own routing draw (the target's seed) and measured ceilings (copy bandwidth, MMA rate):

  memory us     weights + activations + output at the measured copy rate (the floor's memory part)
  compute us    the routed rows' MMA work at the measured rate (the floor's compute part)
  padded us     the MMA work of the picked config's whole M tiles
  pad           padded / routed rows
  % of bound    max(memory, padded) / time: how close the pick runs to the bound its own tiles set

No GPU: `python benchmarks/tune_padding.py benchmarks/results/tune_v9/ep8_bf16_r9g.json
[--batches 1024,4096]`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_results import MODEL, layer_shape  # noqa: E402


def expert_rows(shape, batch: int, seed: int) -> list[int]:
    """Rows each local expert gets in the timed routing draw."""
    from tilefit.tune.targets.draws import routing

    ids = routing(shape, batch, seed)[0].reshape(-1).tolist()
    counts = [0] * shape.experts
    for e in ids:
        if e >= 0:
            counts[e] += 1
    return counts


def padded_rows(counts: list[int], block_m: int) -> int:
    return sum(math.ceil(c / block_m) * block_m for c in counts)


def analyse(path: str, batches: tuple[int, ...] | None) -> list[dict]:
    from tilefit.hw.catalog import get_gpu
    from tilefit.tune.ceilings import Ceilings
    from tilefit.tune.perfmodel import Device, floor_us
    from tilefit.tune.targets.base import Routed
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    d = json.loads(Path(path).read_text())
    dtype = "fp8-block" if d["dtype"] == "fp8" else d["dtype"]
    layer = layer_shape(d["layout"], dtype, d.get("model", MODEL))
    measured = Ceilings(**d["ceilings"]).device(Device.from_gpu(get_gpu("h200"), dtype))
    memory_only = replace(measured, flops=math.inf)
    compute_only = replace(measured, bandwidth=math.inf)
    seed = TilefitMoETarget(gpu="h200").seed
    out = []
    for r in d["rows"]:
        if batches and r["batch"] not in batches or not r.get("config_dict"):
            continue
        shape = layer.with_gemm(r["job"])
        counts = expert_rows(shape, r["batch"], seed)
        routed = Routed(sum(counts), sum(1 for c in counts if c))
        mem = floor_us(shape, r["batch"], memory_only, routed)
        comp = floor_us(shape, r["batch"], compute_only, routed)
        pad = padded_rows(counts, r["config_dict"]["BLOCK_SIZE_M"]) / max(1, routed.rows)
        bound = max(mem, comp * pad)
        out.append({"file": Path(path).name, "job": r["job"], "batch": r["batch"], "config": r["config"],
                    "time_us": r["time_us"], "memory_us": mem, "compute_us": comp, "pad": pad,
                    "padded_us": comp * pad, "pct_of_floor": 100 * max(mem, comp) / r["time_us"],
                    "pct_of_bound": 100 * bound / r["time_us"]})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", metavar="JSON", help="bench_tune result files")
    p.add_argument("--batches", type=lambda t: tuple(int(x) for x in t.split(",")), default=None)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = [row for path in args.results for row in analyse(path, args.batches)]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("| file | gemm | batch | config | time us | memory us | compute us | pad | padded us "
          "| % of floor | % of bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['file']} | {r['job']} | {r['batch']} | {r['config']} | {r['time_us']:.1f} | "
              f"{r['memory_us']:.1f} | {r['compute_us']:.1f} | {r['pad']:.3f} | {r['padded_us']:.1f} | "
              f"{r['pct_of_floor']:.1f} | {r['pct_of_bound']:.1f} |")


if __name__ == "__main__":
    main()
