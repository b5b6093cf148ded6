"""Token-to-expert alignment: sort the (token, k) assignments by expert and pad each expert's run of
rows to a multiple of BLOCK_SIZE_M, so that every block of the grouped GEMM belongs to one expert.

topk_ids [T, k] -> sorted_ids [P] (flat assignment index t*k + j, or the sentinel T*k for padding),
expert_ids [P / BLOCK_SIZE_M]. Experts that receive no token get no block at all; ids outside
[0, E) (another rank's experts under expert parallelism, marked -1) are dropped. Pure torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Alignment:
    sorted_ids: Any  # [P] int32
    expert_ids: Any  # [P / block_m] int32
    num_padded: int  # P
    num_valid: int  # T * k
    block_m: int


def moe_align(topk_ids: Any, num_experts: int, block_m: int) -> Alignment:
    """Expert-sorted, block-padded row order for `topk_ids` [T, k] (any device)."""
    import torch

    flat_all = topk_ids.reshape(-1).to(torch.int64)
    num_valid = flat_all.numel()
    dev = flat_all.device
    local = torch.nonzero((flat_all >= 0) & (flat_all < num_experts)).reshape(-1)
    flat = flat_all[local]
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_m - 1) // block_m * block_m  # 0 for experts with no token
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    # A stable sort keeps each expert's assignments in token order.
    order = torch.sort(flat, stable=True).indices
    experts_sorted = flat[order]
    first_of_expert = torch.cumsum(counts, 0) - counts
    rank = torch.arange(flat.numel(), device=dev) - first_of_expert[experts_sorted]
    num_padded = int(pad_end[-1].item()) if num_experts else 0
    sorted_ids = torch.full((num_padded,), num_valid, dtype=torch.int32, device=dev)
    sorted_ids[pad_start[experts_sorted] + rank] = local[order].to(torch.int32)
    blocks_per_expert = padded // block_m
    expert_ids = torch.repeat_interleave(
        torch.arange(num_experts, device=dev, dtype=torch.int32), blocks_per_expert)
    return Alignment(sorted_ids, expert_ids, num_padded, num_valid, block_m)
