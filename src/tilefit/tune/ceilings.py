"""The GPU's two ceilings, measured once at the start of a tuning run (a few seconds): the
device-to-device copy bandwidth (bytes read + written) and the dense MMA rate for the tuned dtype
(bf16/fp16: torch.matmul; fp8 and fp8-block: torch._scaled_mm on e4m3). The run's floor ("% of floor") uses
these; the catalog's figures are reported beside them. Random data, never zeros (zeros multiply
faster on the tensor cores and would raise the ceiling).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from tilefit.dtypes import mma_dtype
from tilefit.tune.perfmodel import Device

COPY_BYTES = 1 << 30  # four times more than any L2 today, so the copy streams from DRAM
MMA_SIZE = 8192  # one square product large enough to fill every SM


@dataclass(frozen=True, slots=True)
class Ceilings:
    copy_gbps: float  # device-to-device copy, bytes read + written per second / 1e9
    mma_tflops: float  # dense MMA rate for `dtype`
    dtype: str
    mma_how: str  # what was timed for the MMA rate
    catalog_gbps: float
    catalog_tflops: float
    seconds: float  # what measuring cost

    def device(self, base: Device) -> Device:
        """`base` (the catalog's figures) with the measured bandwidth and MMA rate."""
        return replace(base, bandwidth=self.copy_gbps * 1e9, flops=self.mma_tflops * 1e12)

    def as_dict(self) -> dict[str, Any]:
        return {"copy_gbps": self.copy_gbps, "mma_tflops": self.mma_tflops, "dtype": self.dtype,
                "mma_how": self.mma_how, "catalog_gbps": self.catalog_gbps,
                "catalog_tflops": self.catalog_tflops, "seconds": self.seconds}

    def line(self) -> str:
        return (f"measured ceilings: copy {self.copy_gbps:,.0f} GB/s (catalog "
                f"{self.catalog_gbps:,.0f}), {self.dtype} MMA {self.mma_tflops:,.0f} TFLOP/s "
                f"(catalog {self.catalog_tflops:,.0f}; {self.mma_how})")


def measure(base: Device, dtype: str, index: int = 0) -> Ceilings:
    """Time the copy and the MMA on CUDA device `index` (median of triton's do_bench); the MMA is
    `dtype`'s tensor-core path (fp8 and fp8-block: an e4m3 GEMM)."""
    dtype = mma_dtype(dtype)
    import torch
    from triton.testing import do_bench

    t0 = time.monotonic()
    with torch.cuda.device(index):
        src = torch.randint(0, 255, (COPY_BYTES,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
        copy = 2 * COPY_BYTES / (ms * 1e-3)
        del src, dst
        mma, how = _mma_rate(torch, do_bench, dtype)
        torch.cuda.empty_cache()
    return Ceilings(copy / 1e9, mma / 1e12, dtype, how, base.bandwidth / 1e9, base.flops / 1e12,
                    round(time.monotonic() - t0, 3))


def _mma_rate(torch: Any, do_bench: Any, dtype: str) -> tuple[float, str]:
    n = MMA_SIZE
    flops = 2.0 * n ** 3
    if dtype == "fp8":
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
        one = torch.ones((), device="cuda")

        def run() -> Any:
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        how = f"torch._scaled_mm e4m3 {n}^3"
    else:
        half = torch.float16 if dtype == "fp16" else torch.bfloat16
        a = torch.randn(n, n, device="cuda", dtype=half)
        b = torch.randn(n, n, device="cuda", dtype=half)

        def run() -> Any:
            return a @ b
        how = f"torch.matmul {dtype} {n}^3"
    ms = do_bench(run, warmup=25, rep=200, return_mode="median")
    return flops / (ms * 1e-3), how
