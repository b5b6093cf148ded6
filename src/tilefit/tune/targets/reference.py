"""Whether a tuned config computes the right thing: a spread sample of the fused-MoE kernel's
output rows against a float32 reference, one expert at a time on the device (a whole float32
weight tensor would not fit). The GPU worker checks every pick before it is written.

The sample is sorted by expert and sent to the device once, and the running maxima stay there
until the end: one synchronisation per check instead of two per expert (GLM-5 TP8, up to 256
experts sampled: 36 ms a check before, 32-33 ms after, on one H200 in session 9,
benchmarks/RESULTS.md). A NaN anywhere in the compared rows fails the check (the maxima carry it).
"""

from __future__ import annotations

from typing import Any

from tilefit.tune.targets.base import TuneShape

CHECK_ROWS = 256  # rows compared, spread over the assignments
# bf16 accumulates in fp32; the bf16 output rounding bounds the error (2^-8 relative).
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp8-block": 6e-2}


def compare_rows(p: dict[str, Any], shape: TuneShape) -> str | None:
    """None when the kernel's output `p["c"]` matches the reference within the dtype's tolerance
    (relative to the largest reference value), else what differs. `p`: the target's problem
    (activations `a`/`a_scale`, weights `b`/`b_scale`, CPU routing `ids_cpu`/`w_cpu`)."""
    import torch

    from tilefit.kernels.triton_moe import ops

    ids, w = p["ids_cpu"].reshape(-1), p["w_cpu"].reshape(-1)
    rows = torch.nonzero(ids >= 0).reshape(-1)
    if rows.numel() == 0:
        return None
    rows = rows[:: max(1, rows.numel() // CHECK_ROWS)]
    rows = rows[torch.argsort(ids[rows], stable=True)]  # by expert: one slice each
    experts, counts = torch.unique_consecutive(ids[rows], return_counts=True)
    dev = p["c"].device
    a_rows = (rows // shape.topk if shape.gemm == "gemm1" else rows).to(dev)
    weights, out_rows = w[rows].to(dev), rows.to(dev)
    a = p["a"] if p["a_scale"] is None else ops.dequantize(p["a"], p["a_scale"], 1, 128)
    err = torch.zeros((), device=dev)
    scale = torch.zeros((), device=dev)
    start = 0
    for e, n in zip(experts.tolist(), counts.tolist()):
        part = slice(start, start + n)
        start += n
        b = p["b"][e].float() if p["b_scale"] is None else \
            ops.dequantize(p["b"][e:e + 1], p["b_scale"][e:e + 1], 128, 128)[0]
        ref = a[a_rows[part]].float() @ b.T
        if shape.gemm == "gemm2":
            ref = ref * weights[part, None]
        got = p["c"][out_rows[part]].float()
        err = torch.maximum(err, (got - ref).abs().max())
        scale = torch.maximum(scale, ref.abs().max())
    err_f, scale_f = err.item(), scale.item()
    tol = TOLERANCE.get(shape.dtype, 2e-2)
    return None if err_f <= tol * (scale_f or 1.0) else \
        f"max error {err_f:.3g} > {tol} x {scale_f:.3g}"
