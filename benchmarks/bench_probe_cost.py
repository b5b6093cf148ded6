"""Where a search probe's time goes on the GPU worker (issue 17: the fast run is GPU-bound, and a
probe of a graph-timed batch took ~16.5 ms of worker time for ~6 ms of replay budget on the H200,
benchmarks/RESULTS.md session 7).

For a few GLM-5 shapes, batch sizes and configs, in this process (no worker pool): the wall time
of `TilefitMoETarget.probe` and of its parts, each the median of REPEATS after a warm call:
  build    the launch closures (problem, alignment, weight copies: cached after the first)
  eager    one launch outside capture (of the first closure, as gpu_timing does since session 9),
           then a device synchronize
  capture  torch.cuda.graph capture of the probe's launches (it synchronizes and empties the
           caching allocator first), and the same capture with capture_begin/capture_end on a
           side stream without the emptying ("capture_raw")
  replay   the timed replays (the probe's graph budget, `probe_graph_ms`)
and for event-timed batches the wall time of do_bench on the probe's budget.

Usage: PYTHONPATH=src python3 benchmarks/bench_probe_cost.py [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPEATS = 7
CASES = (  # (layout, gemm, batch, config as M N K GROUP_M warps stages)
    ("ep8", "gemm1", 1, (16, 64, 256, 1, 4, 5)),
    ("ep8", "gemm2", 64, (16, 128, 128, 1, 4, 3)),
    ("ep8", "gemm1", 256, (16, 128, 128, 1, 4, 5)),
    ("tp8", "gemm1", 8, (16, 64, 128, 1, 4, 4)),
    ("tp8", "gemm2", 128, (16, 64, 128, 1, 4, 4)),
    ("ep8", "gemm1", 1024, (64, 128, 128, 1, 8, 4)),
    ("ep8", "gemm2", 4096, (128, 256, 64, 1, 8, 4)),
)


def _ms(fn: Any) -> tuple[float, Any]:
    import torch

    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - t), out


def _capture_raw(launches: list[Any], count: int) -> Any:
    import torch

    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.capture_begin()
        for _ in range(count):
            for launch in launches:
                launch()
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    return graph


def case(target: Any, layout: str, gemm: str, batch: int, cfg: tuple[int, ...]) -> dict[str, Any]:
    import torch
    from dataclasses import replace

    from triton.testing import do_bench
    from tune_results import layer_shape  # benchmarks/

    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.tune.targets import gpu_timing

    shape = replace(layer_shape(layout, "bf16"), gemm=gemm)
    config = MoEConfig(*cfg)
    target.probe(config, shape, batch)  # compile, caches, first graph
    parts: dict[str, list[float]] = {}

    def add(name: str, ms: float) -> None:
        parts.setdefault(name, []).append(ms)

    from tilefit.tune.targets.tilefit_moe import PROBE_MIN_REPLAYS

    for _ in range(REPEATS):
        add("probe", _ms(lambda: target.probe(config, shape, batch))[0])
        if target.timing(shape, batch) == "cuda-graph":
            ms, launches = _ms(lambda: [target._launch(config, shape, batch, w)
                                        for w in target.rotated_weights(shape)])
            add("build", ms)
            add("eager", _ms(lambda: launches[0]())[0])
            count = max(1, -(-target.probe_launches // len(launches)))

            def capture() -> Any:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(count):
                        for f in launches:
                            f()
                return g
            ms, graph = _ms(capture)
            add("capture", ms)
            ms, raw = _ms(lambda: _capture_raw(launches, count))
            add("capture_raw", ms)
            add("replay", _ms(lambda: gpu_timing.replay_us(launches, target.probe_graph_ms,
                                                           PROBE_MIN_REPLAYS,
                                                           target.probe_launches))[0])
            del graph, raw
        else:
            launch = target._launch(config, shape, batch)
            add("do_bench", _ms(lambda: do_bench(launch, warmup=target.probe_warmup_ms,
                                                 rep=target.probe_rep_ms,
                                                 return_mode="median"))[0])
    return {"layout": layout, "gemm": gemm, "batch": batch, "config": list(cfg),
            "timing": target.timing(shape, batch), "budget_ms": budget,
            **{k: round(statistics.median(v), 3) for k, v in parts.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="append the JSON lines here too")
    args = p.parse_args()
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    target = TilefitMoETarget(gpu="h200")
    for layout, gemm, batch, cfg in CASES:
        line = json.dumps(case(target, layout, gemm, batch, cfg))
        print(line, flush=True)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
