"""What the GPU targets time on: the seeded top-k routing of a batch (the same draw for every
config and every run) and the activations' 16-bit dtype for a tuning shape."""

from __future__ import annotations

from typing import Any

from tilefit.tune.targets.base import TuneShape


def half_dtype(shape: TuneShape) -> Any:
    """torch's dtype for the shape's activations and outputs (fp8 runs produce bf16)."""
    import torch

    return torch.float16 if shape.dtype == "fp16" else torch.bfloat16


# Draws of a small batch's routing before a rank with no local row is accepted (see `routing`).
EMPTY_REDRAWS = 64


def routing(shape: TuneShape, batch: int, seed: int, *, local: bool = True) -> tuple[Any, Any]:
    """Uniform random top-k with a fixed seed: ([batch, topk] int32 ids, [batch, topk] weights).
    Each token takes topk distinct experts of total_experts; with `local`, ids past this rank's
    experts are -1 (dropped by the alignment, as under EP), else they stay global. Fused shared
    experts (shape.shared) are appended to every token's picks. On the CPU.

    Under EP a small batch can route no token to this rank (Qwen3-235B EP8 at batch 1: 16 of 128
    experts local, 8 picked, 34% of draws): the kernel then has nothing to do, every config times
    alike (0.2-0.3 us on an H200) and the pick means nothing. Such a draw is drawn again from the
    same generator (the same seed gives the same routing) until a row is local, so batch sizes
    are tuned on the case where the rank works; a first draw with a local row is kept as it is."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    local_routed, picks = shape.routed
    for _ in range(EMPTY_REDRAWS):
        ids = torch.rand(batch, shape.total_experts, generator=g).topk(picks, dim=1).indices
        if not local:
            break
        ids = torch.where(ids < local_routed, ids, torch.full_like(ids, -1))
        if bool((ids >= 0).any()) or shape.shared:
            break
    if shape.shared:  # fused shared experts (ids after the routed ones): every token, every batch
        fused = torch.arange(local_routed, shape.experts, dtype=ids.dtype)
        ids = torch.cat([ids, fused.expand(batch, shape.shared)], dim=1)
    ids = ids.to(torch.int32)
    weights = torch.rand(batch, shape.topk, generator=g).softmax(dim=1)
    return ids, weights
