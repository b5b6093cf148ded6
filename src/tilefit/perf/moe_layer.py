"""Predicted time of one MoE layer on the busiest GPU of a layout: grouped GEMMs + communication.

GEMM time is max(memory time, compute time) plus a launch cost. Memory: the weights of every expert
that receives a token, plus activations in and out. Compute: the kernel's tiles (KernelModel: the
Triton fused-MoE kernel's BLOCK_M x BLOCK_N, or the CUTLASS tactics FlashInfer can launch) in waves
over the SMs (wave quantisation and per-expert padding included). Under EP the busiest GPU
sets the pace; where the engine's kernel writes zeros to the rows of the (token, k) pairs other
ranks' experts take (`Assumptions.zero_gemms`, an engine fact), those bytes are added at copy
bandwidth after the GEMM's own time (measured so on an H200: benchmarks/RESULTS.md, session 13).
Communication: TP (and EP with replicated tokens) all-reduce the layer output; EP with
attention DP sends top-k token copies out and back (all-to-all). Every constant is in `Assumptions`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from tilefit.dtypes import mma_dtype
from tilefit.hw.catalog import GPU
from tilefit.layout.plan import GemmShape, LayerPlan
from tilefit.layout.routing import expected_active_experts, routing_stats
from tilefit.perf.interconnect import Interconnect

@dataclass(frozen=True, slots=True)
class KernelModel:
    """The grouped-GEMM kernel a layer runs, as the time model sees it: the tile sizes it can use
    along the token rows (the smallest that covers an expert's rows is taken, as an autotuner or
    the engine's default config would), the tile along the output columns, and the sustained share
    of the tensor-core peak its tile loop reaches."""

    family: str  # "triton-moe" | "flashinfer-cutlass"
    token_tiles: tuple[int, ...]
    tile_n: int
    mma_efficiency: float
    source: str  # where the tiles and the efficiency come from

    def block_m(self, rows_per_group: float) -> int:
        for bm in self.token_tiles:
            if rows_per_group <= bm:
                return bm
        return self.token_tiles[-1]

    def line(self) -> str:
        return (f"kernel: {self.family}, token tiles {'/'.join(map(str, self.token_tiles))} (by rows per "
                f"expert) x {self.tile_n} columns, in waves over the SMs; tensor cores at "
                f"{self.mma_efficiency:.0%} of dense peak ({self.source})")


# The Triton fused-MoE kernel of vLLM and sglang: BLOCK_SIZE_M 16..128 by rows per expert (their
# default configs grow BLOCK_SIZE_M with the batch), BLOCK_SIZE_N 128. 75% is an assumption.
TRITON_MOE = KernelModel("triton-moe", (16, 32, 64, 128), 128, 0.75,
                         "BLOCK_SIZE_M/N of the engines' default configs; efficiency assumed, not measured")


@dataclass(frozen=True, slots=True)
class Assumptions:
    bandwidth_efficiency: float = 0.90  # copy bandwidth / datasheet (H200 measured 4.3 of 4.8 TB/s)
    launch_us: float = 4.0  # per kernel launch (outside CUDA graphs; inside them, less)
    activation_bytes: int = 2  # bf16 activations in and out
    ep_comm: str = "allreduce"  # "allreduce": every EP rank gets every token; "alltoall": dispatch/combine
    ep_comm_why: str = ""  # the engine's flag or default that says so (engines.types.EpComm.why)
    kernel: KernelModel = TRITON_MOE
    # GEMMs whose output rows of other ranks' (token, k) pairs the engine zero-fills under EP with
    # replicated tokens, and why (the engine's ep_zero_rows)
    zero_gemms: tuple[str, ...] = ()
    zero_why: str = ""

    def lines(self) -> list[str]:
        return [
            f"memory at {self.bandwidth_efficiency:.0%} of datasheet bandwidth; {self.launch_us:g} us per "
            f"kernel launch",
            self.kernel.line(),
            "uniform random top-k routing; the busiest GPU (mean over the sampler's trials) sets the pace",
            "EP communication: " + ("all-reduce of the layer output (tokens replicated to every EP rank)"
                                   if self.ep_comm == "allreduce" else
                                   "dispatch + combine all-to-all of top-k token copies")
            + (f"; {self.ep_comm_why}" if self.ep_comm_why else ""),
            "MoE layers only: attention, norms and the router are not modelled",
        ] + ([f"EP with replicated tokens: {self.zero_why}; counted at copy bandwidth"]
             if self.zero_gemms and self.ep_comm == "allreduce" else [])


@dataclass(frozen=True, slots=True)
class GemmTime:
    name: str
    rows: float  # token rows this GPU multiplies
    active_groups: float  # experts with at least one row
    bytes: float
    flops: float
    memory_us: float
    compute_us: float
    time_us: float
    zero_us: float = 0.0  # zeros written to other ranks' rows (in time_us)

    @property
    def bound(self) -> str:
        return "memory" if self.memory_us >= self.compute_us else "compute"


@dataclass(frozen=True, slots=True)
class LayerTime:
    layout: str
    gpus: int
    batch: int
    gemms: tuple[GemmTime, ...]
    comm_kind: str
    comm_us: float

    @property
    def gemm_us(self) -> float:
        return sum(g.time_us for g in self.gemms)

    @property
    def total_us(self) -> float:
        return self.gemm_us + self.comm_us

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(gemm_us=self.gemm_us, total_us=self.total_us)
        return d


def compute_dtype(gpu: GPU, weight_dtype: str) -> str:
    """The tensor-core path a weight format runs on: narrow formats fall back to bf16 where the
    part has no such units (e.g. mxfp4 on Hopper runs as W4A16 with bf16 math)."""
    want = "fp4" if weight_dtype in ("nvfp4", "mxfp4") else "fp8" if mma_dtype(weight_dtype) == "fp8" else "bf16"
    for d in (want, "fp8" if want == "fp4" else want, "bf16"):
        if gpu.peak_tflops(d):
            return d
    return "bf16"


def gemm_time(gpu: GPU, shape: GemmShape, rows: float, active: float, per_group_weight_bytes: float,
              dtype: str, a: Assumptions, zero_rows: float = 0.0) -> GemmTime:
    """Time of one grouped GEMM that multiplies `rows` rows spread over `active` groups and writes
    zeros to `zero_rows` more rows of its output."""
    bytes_per_us = gpu.mem_bandwidth_gbps * 1e3 * a.bandwidth_efficiency
    zero_us = zero_rows * shape.n * a.activation_bytes / bytes_per_us
    if rows <= 0 or active <= 0:
        return GemmTime(shape.name, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, zero_us, zero_us)
    rows_per_group = rows / active
    k = a.kernel
    bm = k.block_m(rows_per_group)
    tiles = active * math.ceil(rows_per_group / bm) * math.ceil(shape.n / k.tile_n)
    waves = math.ceil(tiles / gpu.sm_count)
    peak = gpu.peak_tflops(dtype) or gpu.peak_tflops("bf16") or 1.0
    per_sm_flops_per_us = peak * 1e6 / gpu.sm_count * k.mma_efficiency
    compute_us = waves * (2 * bm * k.tile_n * shape.k) / per_sm_flops_per_us
    nbytes = active * per_group_weight_bytes + rows * (shape.k + shape.n) * a.activation_bytes
    memory_us = nbytes / bytes_per_us
    flops = 2 * rows * shape.n * shape.k
    return GemmTime(shape.name, rows, active, nbytes, flops, memory_us, compute_us,
                    max(memory_us, compute_us) + zero_us + a.launch_us, zero_us)


def layer_time(plan: LayerPlan, gpu: GPU, batch: int, link: Interconnect, a: Assumptions = Assumptions()
               ) -> LayerTime:
    """Predicted time of one MoE layer at `batch` tokens on the busiest GPU of `plan`'s layout."""
    m, lay = plan.model, plan.layout
    local, fused = plan.local_experts - plan.fused_shared, plan.fused_shared
    rows = (routing_stats(batch, m.num_experts, m.top_k, lay.ep).assignments_per_gpu_max_mean
            if lay.ep > 1 else batch * m.top_k)
    # Distinct experts hit by `rows` assignments spread uniformly over the GPU's local experts; a
    # shared expert the engine runs inside the fused MoE takes every token (LayerPlan.fused_shared).
    active = expected_active_experts(rows, local, local, 1) + (fused if batch else 0)
    rows += batch * fused
    dtype = compute_dtype(gpu, m.weight_dtype)
    # Under EP with replicated tokens every rank sees all batch * top_k pairs; the ones routed to
    # other ranks' experts are zero rows where the engine writes them.
    remote = max(batch * m.top_k - (rows - batch * fused), 0.0) \
        if lay.ep > 1 and a.ep_comm == "allreduce" else 0.0
    gemms = []
    for g in plan.gemms:
        if g.name.startswith("shared"):
            gemms.append(gemm_time(gpu, g, batch, 1, g.weight_bytes, dtype, a))
        else:
            zero = remote if g.name in a.zero_gemms else 0.0
            gemms.append(gemm_time(gpu, g, rows, active, g.weight_bytes / g.groups, dtype, a, zero))
    out_bytes = batch * m.hidden_size * a.activation_bytes
    if lay.ep > 1 and a.ep_comm == "alltoall":
        per_gpu = batch / lay.gpus * m.top_k * m.hidden_size * a.activation_bytes
        comm_kind, comm = "dispatch+combine all-to-all", 2 * link.all_to_all_us(per_gpu, lay.gpus)
    else:
        comm_kind, comm = "all-reduce", link.all_reduce_us(out_bytes, lay.gpus)
    return LayerTime(lay.label(), lay.gpus, batch, tuple(gemms), comm_kind if lay.gpus > 1 else "none", comm)
