"""Memory the engines take at start-up besides weights and the KV cache, with the basis of each.

Exact where a formula is the engine's own; otherwise an estimate that says what it rests on.
Figures are per GPU. T = tokens in the largest prefill chunk, B = largest CUDA-graph batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilefit.memory.base import GIB, Figure, Placement, Settings
from tilefit.models.architecture import Architecture

if TYPE_CHECKING:
    from tilefit.memory.base import MemoryRequest

MIB = 2**20

# What cudaMemGetInfo reports as total sits below the driver's nvidia-smi total: vLLM prints
# total_gpu_memory 79.11-79.33 GiB on an H100 80GB (81,559 MiB = 79.65 GiB), 139.81 GiB on an
# H200 (143,771 MiB = 140.40 GiB), 23.58 GiB on an RTX 3090 (24,576 MiB = 24.00 GiB).
DRIVER_RESERVE = int(0.45 * GIB)
# CUDA context, cuBLAS handles and torch's start-up allocations before any weight: sglang's
# "Load weight begin. avail mem=94.01 GB" after 0.39 GB of torch.distributed on 4 x RTX PRO 6000
# (sglang issue #40558) leaves 0.74 GiB of the CUDA total for them.
CONTEXT_BYTES = int(0.75 * GIB)


def usable_total(gpu) -> Figure:  # noqa: ANN001 - a catalog GPU
    return Figure("driver_reserve", DRIVER_RESERVE, "estimate: CUDA's total is 0.3-0.6 GiB below nvidia-smi's "
                  "(vLLM's total_gpu_memory on H100, H200, RTX 3090)")


def cuda_context(gpu) -> Figure:  # noqa: ANN001 - a catalog GPU
    return Figure("cuda_context", CONTEXT_BYTES, "estimate: CUDA context and torch start-up, 0.74 GiB in "
                  "sglang issue #40558")


def dist_init(world: int) -> Figure:
    """NCCL communicators and custom all-reduce buffers, as sglang prints them ("Init torch
    distributed ends. mem usage=..."): 0.39 GB at TP4 (sglang #40558); 1.1-2.0 GB at TP8
    (sglang #29562, PR #26083, PR #11716)."""
    if world <= 1:
        return Figure("nccl", 0, "exact: one GPU, no communicator")
    b = int((0.39 if world <= 4 else 1.3) * GIB)
    return Figure("nccl", b, f"estimate: NCCL + custom all-reduce at {world} GPUs "
                  "(sglang prints 0.39 GB at TP4, 1.1-2.0 GB at TP8)")


def absorbed_mla_copies(arch: Architecture, p: Placement, where: str) -> tuple[Figure, ...]:
    """MLA decode absorbs kv_b_proj into per-head W_UK / W_UV copies kept in bf16 beside it."""
    a = arch.attention
    if not a.is_mla:
        return ()
    heads = -(-a.heads // p.attn_tp)
    per_layer = heads * a.kv_lora_rank * (a.qk_nope_head_dim + a.v_head_dim) * 2
    return (Figure("attention", per_layer * arch.num_layers, f"bf16 W_UK/W_UV copies of kv_b_proj ({where})"),)


def moe_workspace(arch: Architecture, p: Placement, tokens: int) -> Figure:
    """The fused-MoE intermediate of the largest chunk: tokens x top-k rows of gate+up output and
    of the activation, bf16 (the Triton and CUTLASS MoE kernels both stage these; FlashInfer's
    autotuner profiles its tactics at the same token counts, so its buffers peak at this too)."""
    m = arch.moe
    width = -(-m.expert_width // p.expert_tp)
    rows = tokens * m.top_k
    b = rows * (2 * width + width + m.hidden_size) * 2
    return Figure("moe_workspace", b, f"estimate: {tokens} tokens x top-{m.top_k} x (3 x {width} + H) bf16")


def activations(arch: Architecture, p: Placement, tokens: int) -> Figure:
    """Peak activations of one prefill chunk outside the MoE: residual + QKV/attention output +
    the dense MLP of the chunk, bf16, and fp32 logits of the chunk's last tokens."""
    a, h = arch.attention, arch.hidden_size
    heads = -(-a.heads // p.attn_tp)
    qkv = heads * (a.head_dim * 2 + a.v_head_dim)
    dense = 3 * -(-arch.dense_width // p.dense_shards) if arch.dense_layers else 0
    b = tokens * (4 * h + qkv + dense) * 2
    return Figure("activations", b, f"estimate: {tokens}-token chunk x (4H + local QKV/O + dense MLP) bf16")


def cuda_graphs(arch: Architecture, max_bs: int) -> Figure:
    """sglang reserves 2 MB per captured batch size (server_args.py 0.5.9); MLA models need more:
    6.22 GB for DeepSeek-V3 TP8 up to batch 256 on H200 (sglang PR #5893), ~24 MB per batch."""
    per = 24 * MIB if arch.attention.is_mla else 2 * MIB
    return Figure("cuda_graphs", int(256 * MIB + max_bs * per),
                  f"estimate: graphs up to batch {max_bs}, {per // MIB} MiB per batch "
                  + ("(6.22 GB at batch 256 for DeepSeek-V3 TP8, sglang PR #5893)" if arch.attention.is_mla
                     else "(sglang's per-batch reserve, server_args.py 0.5.9)"))


def runtime_needs(req: "MemoryRequest", p: Placement, s: Settings) -> tuple[Figure, ...]:
    """What an engine needs outside the KV pool once it is allocated: CUDA graphs, the
    activations and MoE staging of the largest prefill chunk, DeepEP buffers when used."""
    chunk = s.chunked_prefill or 8192
    out = [cuda_graphs(req.arch, s.cuda_graph_max_bs or 160), activations(req.arch, p, chunk),
           moe_workspace(req.arch, p, chunk)]
    if req.parallel.a2a_backend == "deepep":
        out.append(deepep_buffers(req.arch))
    return tuple(out)


def deepep_buffers(arch: Architecture) -> Figure:
    """DeepEP's NVLink/RDMA buffers, sized by its size hints from the hidden size and the
    dispatch token budget; about 1-3 GiB per GPU for H = 4096-7168 in public deployments."""
    b = int(max(1.0, arch.hidden_size / 7168 * 2.0) * GIB)
    return Figure("deepep_buffers", b, "estimate: DeepEP normal + low-latency buffers, ~2 GiB at H=7168 "
                  "(DeepEP get_*_buffer_size_hint)")
