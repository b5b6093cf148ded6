"""A performance model of the fused-MoE grouped GEMM: the roofline floor, and a predicted time per
config (roofline + wave quantisation + occupancy from the SMEM footprint) to rank configs.

Device figures come from the GPU catalog (tilefit.hw), or from the ceilings a run measured
(tune/ceilings.py). The model reads a config through the target's `config_space.tile` (a `Tile`),
never a family's config type. The floor is what any kernel must pay:
max(useful flops / peak, bytes that must move / bandwidth), summed over the job's GEMMs. The
prediction only orders first trials for the fast strategy; the tuner measures every answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tilefit.dtypes import elem_bytes, mma_dtype
from tilefit.layout.routing import expected_active_experts
from tilefit.tune.targets.base import Routed, Tile, TuneShape

ELEM_BYTES = elem_bytes(("bf16", "fp16", "fp8-block"))
OUT_BYTES = 2  # bf16/fp16 output
SCALE_BLOCK = 128  # fp8-block scales: one fp32 per 128x128 weight block

# Ranking heuristics (not hardware facts): cost of a shallow pipeline, and of too many or too few
# accumulator elements per thread. They break ties between configs the roofline rates alike.
PIPELINE_COST = {1: 1.35, 2: 1.12, 3: 1.03}
ACC_PER_THREAD_HIGH = 128  # fp32 accumulators per thread beyond which registers spill
ACC_PER_THREAD_LOW = 8
SPILL_COST, UNDERFILL_COST = 1.4, 1.08
# A K step of fewer than 128 bytes per row (fp8 BLOCK_SIZE_K 64) ran 1.03-1.61x slower than 128 (1.4x
# typical) on an H200, batches 1-256, EP8 and TP8 (benchmarks/RESULTS.md, issue 17 session 5).
NARROW_K_BYTES, NARROW_K_COST = 128, 1.4


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    sm_count: int
    bandwidth: float  # bytes/s
    flops: float  # dense tensor-core flop/s for the dtype
    smem_per_sm: int
    max_threads_per_sm: int
    regs_per_sm: int

    @classmethod
    def from_gpu(cls, gpu: Any, dtype: str) -> Device:
        peak = gpu.peak_tflops(mma_dtype(dtype)) or gpu.peak_tflops("bf16")
        if not peak:
            raise ValueError(f"the catalog has no {dtype} peak for {gpu.name}")
        a = gpu.arch
        return cls(gpu.name, gpu.sm_count, gpu.mem_bandwidth_gbps * 1e9, peak * 1e12,
                   a.smem_per_sm, a.max_threads_per_sm, a.regs_per_sm)


def _gemm_dims(shape: TuneShape) -> list[tuple[int, int]]:
    g1, g2 = (2 * shape.width, shape.hidden), (shape.hidden, shape.width)
    return {"gemm1": [g1], "gemm2": [g2], "both": [g1, g2]}[shape.gemm]


def active_experts(shape: TuneShape, batch: int) -> float:
    """Expected local experts with at least one token: each token picks its routed experts among
    total_experts, and every token reaches the fused shared ones (TuneShape.shared)."""
    local, picks = shape.routed
    return expected_active_experts(batch, local, shape.total_experts, picks) + (shape.shared if batch else 0)


def _bytes_and_flops(shape: TuneShape, batch: int, n: int, k: int,
                     routed: Routed | None = None) -> tuple[float, float]:
    elem = ELEM_BYTES.get(shape.dtype, 2)
    rows = shape.assignments(batch) if routed is None else routed.rows
    experts = active_experts(shape, batch) if routed is None else routed.experts
    weights = experts * n * k * elem
    if shape.dtype == "fp8-block":
        weights += experts * math.ceil(n / SCALE_BLOCK) * math.ceil(k / SCALE_BLOCK) * 4
    a_rows = batch if (n, k) == (2 * shape.width, shape.hidden) else rows
    moved = weights + a_rows * k * elem + rows * n * OUT_BYTES
    return moved, 2.0 * rows * n * k


def floor_us(shape: TuneShape, batch: int, dev: Device, routed: Routed | None = None) -> float:
    """Roofline floor in microseconds: no kernel of this job can be faster. `routed`: the timed
    draw's rows and experts (default: their expectation under uniform routing)."""
    total = 0.0
    for n, k in _gemm_dims(shape):
        moved, flops = _bytes_and_flops(shape, batch, n, k, routed)
        total += max(moved / dev.bandwidth, flops / dev.flops)
    return total * 1e6


def predict_us(tile: Tile, shape: TuneShape, batch: int, dev: Device, smem_bytes: int) -> float:
    """Predicted time of a config whose tile is `tile` (any value with those attributes)."""
    bm, bn, bk = tile.block_m, tile.block_n, tile.block_k
    warps, stages = tile.num_warps, tile.num_stages
    threads = warps * 32
    per_sm = dev.max_threads_per_sm // threads
    if smem_bytes > 0:
        per_sm = min(per_sm, dev.smem_per_sm // smem_bytes)
    acc = bm * bn / threads  # fp32 accumulators per thread
    per_sm = max(1, min(per_sm, dev.regs_per_sm // (threads * max(64, int(acc) + 64))))
    slots = dev.sm_count * per_sm
    rows = shape.assignments(batch)
    active = max(active_experts(shape, batch), min(1.0, rows))
    per_expert = rows / active if active else 0.0
    blocks_m = active * math.ceil(max(per_expert, 1e-9) / bm)
    total = 0.0
    for n, k in _gemm_dims(shape):
        moved, _ = _bytes_and_flops(shape, batch, n, k)
        tiles = blocks_m * math.ceil(n / bn)
        waves = math.ceil(tiles / slots)
        # Compute: every slot of every wave does a whole padded tile, in wave-quantised steps.
        tile_flops = 2.0 * bm * bn * k
        compute = waves * per_sm * tile_flops / (dev.flops / dev.sm_count)
        # Memory: too few tiles in flight cannot draw the whole bandwidth.
        in_flight = min(tiles, slots)
        memory = moved / (dev.bandwidth * min(1.0, in_flight / dev.sm_count))
        # K loop granularity: a BK that overshoots K wastes the tail.
        k_waste = math.ceil(k / bk) * bk / k
        total += max(compute * k_waste, memory)
    cost = PIPELINE_COST.get(stages, 1.0)
    if bk * ELEM_BYTES.get(shape.dtype, 2) < NARROW_K_BYTES:
        cost *= NARROW_K_COST
    if acc > ACC_PER_THREAD_HIGH:
        cost *= SPILL_COST * acc / ACC_PER_THREAD_HIGH
    elif acc < ACC_PER_THREAD_LOW:
        cost *= UNDERFILL_COST
    return total * cost * 1e6
