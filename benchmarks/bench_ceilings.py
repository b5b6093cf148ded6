"""Which stream reads the GPU's memory fastest (issue 17, "a floor people can trust").

`tilefit tune` measures the device-to-device copy rate (bytes read + written) at its start and
takes it as the bandwidth in the floor. In session 9's H200 runs the tuned bf16 kernel read
GLM-5's expert weights at up to 4.55 TB/s in graph replays where the copy measured 4.22 TB/s:
rows read 107% of a "floor". A weight-streaming GEMM mostly reads; this script times, on a
1 GiB buffer (several times any L2), the copy as `ceilings.py` does, torch's sum, cuBLAS reading
a 1 GiB bf16 weight in a skinny GEMM (torch's linear at M = 1, 16, 64), and a Triton kernel that
only reads (each program sums its slice; BLOCK elements a step, several configs),
and prints one JSON line per stream: GB/s of bytes moved, the median of `REPEATS` do_bench runs.

Usage: PYTHONPATH=src python3 benchmarks/bench_ceilings.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

BYTES = 1 << 30


def _read_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def read_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr, STEPS: tl.constexpr):
        base = tl.program_id(0).to(tl.int64) * BLOCK * STEPS
        acc = tl.zeros([BLOCK], dtype=tl.int32)
        for i in range(STEPS):
            offs = base + i * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, mask=offs < n, other=0)
        tl.store(out_ptr + tl.program_id(0), tl.sum(acc))
    return read_sum


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    import torch
    import triton
    from triton.testing import do_bench

    src = torch.randint(-2**31, 2**31 - 1, (BYTES // 4,), dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    n = src.numel()
    streams: dict[str, tuple[Any, float]] = {
        "copy (ceilings.py)": (lambda: dst.copy_(src), 2.0 * BYTES),
        "torch.sum int32": (lambda: src.sum(), float(BYTES)),
        "torch.sum bf16": (lambda: src.view(torch.bfloat16).sum(), float(BYTES)),
    }
    # cuBLAS streaming a 1 GiB bf16 weight through a skinny GEMM, as a decode step's linear does.
    w = torch.randn(65536, 8192, device="cuda", dtype=torch.bfloat16)
    for m in (1, 16, 64):
        a = torch.randn(m, 8192, device="cuda", dtype=torch.bfloat16)
        streams[f"cuBLAS linear bf16 M={m}"] = (
            lambda a=a: torch.nn.functional.linear(a, w), float(w.numel() * 2 + a.numel() * 2))
    kernel = _read_kernel()
    for block, steps, warps in ((1024, 8, 4), (2048, 8, 8), (4096, 4, 8), (4096, 16, 8),
                                (8192, 8, 16), (2048, 32, 4)):
        grid = (triton.cdiv(n, block * steps),)
        out = torch.empty(grid[0], dtype=torch.int32, device="cuda")

        def run(block: int = block, steps: int = steps, warps: int = warps, grid: Any = grid,
                out: Any = out) -> Any:
            return kernel[grid](src, out, n, BLOCK=block, STEPS=steps, num_warps=warps)
        streams[f"triton read {block}x{steps} w{warps}"] = (run, float(BYTES))
    for name, (fn, moved) in streams.items():
        ms = [do_bench(fn, warmup=25, rep=200, return_mode="median") for _ in range(args.repeats)]
        rates = [moved / (m * 1e-3) / 1e9 for m in ms]
        print(json.dumps({"stream": name, "gbps_median": round(statistics.median(rates), 1),
                          "gbps": [round(r, 1) for r in rates],
                          "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                          "triton": triton.__version__}), flush=True)


if __name__ == "__main__":
    main()
