"""SGLang's optional fused-MoE kernel paths, written for measurement beside tilefit's kernel
(bench_sglang_paths.py, bench_launch_forms.py; measured on an H200 in benchmarks/RESULTS.md
"Session 13"; docs/engine-facts.md lists the facts with lines).

What SGLang's fused_moe_kernel does that tilefit's kernel does not (read in the sglang wheels named):
- even_Ks (0.4.10 through 0.5.23): when K is a multiple of BLOCK_SIZE_K the K masks are left out of
  the A and B loads (`K % config["BLOCK_SIZE_K"] == 0` in invoke_fused_moe_kernel);
- USE_TMA (from 0.5.4.post2, not in 0.5.4.post1): a tuned config file may carry "USE_TMA": true.
  On the up projection (gemm1's file) the weights load through a TMA descriptor over [E, N, K]
  with block [1, BLOCK_SIZE_N, BLOCK_SIZE_K]; on the down projection (the `_down` file) gemm1 writes
  its output in the expert-sorted, block-padded order (c_sorted), so gemm2 loads A as whole
  [BLOCK_SIZE_M, BLOCK_SIZE_K] tiles through a descriptor (no gather) and B through one too;
  SGLang's kernel asserts block-scaled fp8 for the descriptor A load; the variant below also
  runs it for bf16, to show what that path would give;
- PDL (from 0.5.19, absent in 0.5.18; sm90 and newer): every launch is a programmatic dependent
  launch; the kernel waits on the previous grid first (gdc_wait) and lets the next one launch
  at its start when A has at most 512 rows, at its end otherwise.
The kernel below takes each as a constexpr; the product kernel's tile order, row gather and
epilogue are shared through kernel_variants. Not imported by tilefit.
"""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernel_variants import _rows, _tile


@triton.jit(do_not_specialize=["num_valid"])
def moe_sg(
    a_ptr, a_desc, b_ptr, b_desc, c_ptr, a_scale_ptr, b_scale_ptr, topk_weights_ptr,
    sorted_ids_ptr, expert_ids_ptr,
    N, K, num_padded, num_valid, grid_rows,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
    stride_asm, stride_ask, stride_bse, stride_bsn, stride_bsk,
    A_ROWS_PER_TOKEN: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr, BLOCK_SCALED: tl.constexpr,
    GROUP_K: tl.constexpr, GROUP_N: tl.constexpr,
    A_TMA: tl.constexpr, B_TMA: tl.constexpr, C_SORTED: tl.constexpr, EVEN_K: tl.constexpr,
    USE_GDC: tl.constexpr, GDC_EARLY: tl.constexpr, EP_ZEROS: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    if USE_GDC:
        tl.extra.cuda.gdc_wait()
        if GDC_EARLY:
            tl.extra.cuda.gdc_launch_dependents()
    # the tile order runs over the grid's rows (the engine's sorted-ids buffer, grid_rows >=
    # num_padded); programs past the padded rows return at once, as the engines' do
    pid_m, pid_n = _tile(tl.program_id(0), grid_rows, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    if pid_m * BLOCK_SIZE_M >= num_padded:
        return
    row_ids, row_mask, a_rows, expert = _rows(pid_m, sorted_ids_ptr, expert_ids_ptr, num_padded,
                                              num_valid, A_ROWS_PER_TOKEN, BLOCK_SIZE_M)
    if EP_ZEROS:  # another rank's expert (-1): zeros to its rows, every column of the tile
        if expert == -1:
            offs_z = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            z_ptrs = c_ptr + row_ids.to(tl.int64)[:, None] * stride_cm + offs_z[None, :] * stride_cn
            tl.store(z_ptrs, tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=c_ptr.dtype.element_ty),
                     mask=row_mask[:, None] & (offs_z[None, :] < N))
            return
    slots = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)).to(tl.int64)  # sorted positions
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    if BLOCK_SCALED:
        if A_TMA:  # the activation's scales were written in sorted order with it
            as_ptrs = a_scale_ptr + slots * stride_asm
        else:
            as_ptrs = a_scale_ptr + a_rows * stride_asm
        if BLOCK_SIZE_N > GROUP_N:
            bs_ptrs = b_scale_ptr + expert * stride_bse + (offs_n // GROUP_N) * stride_bsn
        else:
            bs_ptrs = b_scale_ptr + expert * stride_bse + (pid_n * BLOCK_SIZE_N // GROUP_N) * stride_bsn
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_SIZE_K):
        if A_TMA:
            a = a_desc.load([pid_m * BLOCK_SIZE_M, k0])
        elif EVEN_K:
            a = tl.load(a_ptrs, mask=row_mask[:, None], other=0.0)
        else:
            a = tl.load(a_ptrs, mask=row_mask[:, None] & (offs_k[None, :] < K - k0), other=0.0)
        if B_TMA:
            b = b_desc.load([expert.to(tl.int32), pid_n * BLOCK_SIZE_N, k0])
            b = b.reshape(BLOCK_SIZE_N, BLOCK_SIZE_K).T
        elif EVEN_K:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k0, other=0.0)
        if BLOCK_SCALED:
            kg = k0 // GROUP_K
            a_s = tl.load(as_ptrs + kg * stride_ask, mask=row_mask, other=0.0)
            b_s = tl.load(bs_ptrs + kg * stride_bsk)
            if BLOCK_SIZE_N > GROUP_N:
                acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
            else:
                acc += tl.dot(a, b) * (a_s * b_s)[:, None]
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if MUL_ROUTED_WEIGHT:
        acc = acc * tl.load(topk_weights_ptr + row_ids, mask=row_mask, other=0.0)[:, None]
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    rows_out = slots if C_SORTED else row_ids.to(tl.int64)
    c_ptrs = c_ptr + rows_out[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_mask[:, None] & (offs_cn[None, :] < N))
    if USE_GDC and not GDC_EARLY:
        tl.extra.cuda.gdc_launch_dependents()


_ALLOCATOR = []


def _tma_allocator():
    if not _ALLOCATOR:
        triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda",
                                                                     dtype=torch.int8))
        _ALLOCATOR.append(True)


def sorted_operand(a, a_s, al, arpt):
    """(A, its scales) gathered into the expert-sorted, block-padded order gemm1 writes under
    c_sorted: row i holds the activation of sorted slot i (padding slots repeat row 0; their
    products are never stored)."""
    ids = al.sorted_ids.long()
    src = torch.where(ids < al.num_valid, ids // arpt, torch.zeros_like(ids))
    return a[src].contiguous(), None if a_s is None else a_s[src].contiguous()


def launch_sg(p, cfg, al, tw, *, a_tma=False, b_tma=False, c_sorted=False, even_k=True,
              gdc=False, gdc_early=False, a_sorted=None, c_out=None, grid_rows=None,
              ep_zeros=False):
    """One launch of moe_sg on the benchmark's problem dict `p` (a, b, c, a_s, b_s, n, k, arpt).
    `a_sorted` = (A, scales) in sorted order for a_tma; `c_out` the [num_padded, N] output for c_sorted;
    `grid_rows` the engine's sorted-ids buffer the grid covers (default: the padded rows);
    `ep_zeros` blocks of expert -1 write zeros (the alignment from sglang_align)."""
    a, b, a_s, b_s = p["a"], p["b"], p["a_s"], p["b_s"]
    c = c_out if c_sorted else p["c"]
    sc = a_s is not None
    d = torch.zeros(1, device=a.device)
    a_desc = b_desc = None
    if a_tma or b_tma:
        _tma_allocator()
    if a_tma:
        a, a_s = a_sorted
        a_desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [cfg.block_m, cfg.block_k])
    if b_tma:
        key = (id(b), cfg.block_n, cfg.block_k)
        b_desc = p.setdefault("bdesc", {}).get(key)
        if b_desc is None:
            b_desc = p["bdesc"][key] = TensorDescriptor(b, list(b.shape), list(b.stride()),
                                                         [1, cfg.block_n, cfg.block_k])
    rows = al.num_padded if grid_rows is None else grid_rows
    grid = (triton.cdiv(rows, cfg.block_m) * triton.cdiv(p["n"], cfg.block_n),)
    extra = {"launch_pdl": True} if gdc else {}
    moe_sg[grid](
        a, a_desc, b, b_desc, c, a_s if sc else d, b_s if sc else d, tw if tw is not None else d,
        al.sorted_ids, al.expert_ids, p["n"], p["k"], al.num_padded, al.num_valid, rows,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1),
        a_s.stride(0) if sc else 0, a_s.stride(1) if sc else 0,
        b_s.stride(0) if sc else 0, b_s.stride(1) if sc else 0, b_s.stride(2) if sc else 0,
        A_ROWS_PER_TOKEN=1 if a_tma else p["arpt"], MUL_ROUTED_WEIGHT=tw is not None,
        BLOCK_SCALED=sc, GROUP_K=128, GROUP_N=128, A_TMA=a_tma, B_TMA=b_tma, C_SORTED=c_sorted,
        EVEN_K=even_k, USE_GDC=gdc, GDC_EARLY=gdc_early, EP_ZEROS=ep_zeros,
        BLOCK_SIZE_M=cfg.block_m,
        BLOCK_SIZE_N=cfg.block_n, BLOCK_SIZE_K=cfg.block_k, GROUP_SIZE_M=cfg.group_m,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **extra)


def sglang_buffer(numel, experts, block_m):
    """Rows of SGLang's sorted-ids buffer, which its grid covers (moe_align_block_size.py l.115-120
    in 0.5.23): numel*BLOCK_SIZE_M when numel < experts, else numel + experts*(BLOCK_SIZE_M-1),
    rounded up to 4; `experts` = local experts + 1 (the -1 bucket) under EP, else E."""
    rows = numel * block_m if numel < experts else numel + experts * (block_m - 1)
    return -(-rows // 4) * 4


def sglang_align(ids, e_local, block_m, ep):
    """(alignment, grid rows) as SGLang launches gemm1/gemm2: under EP another rank's expert (-1)
    is a bucket of its own that comes first, its blocks marked -1 (they write zeros)."""
    from tilefit.kernels.triton_moe.align import Alignment, moe_align
    if not ep:
        al = moe_align(ids, e_local, block_m)
        return al, sglang_buffer(ids.numel(), e_local, block_m)
    al = moe_align(torch.where(ids < 0, torch.zeros_like(ids), ids + 1), e_local + 1, block_m)
    al = Alignment(al.sorted_ids, al.expert_ids - 1, al.num_padded, al.num_valid, block_m)
    return al, sglang_buffer(ids.numel(), e_local + 1, block_m)


def vllm_naive_align(ids, block_m):
    """vLLM's naive block assignment (0.14.0+, no expert map and T*top_k*4 <= E): every (token,
    expert) pair is a block of its own, one row in it; the grid is cut to T*top_k blocks."""
    from tilefit.kernels.triton_moe.align import Alignment
    flat = ids.reshape(-1)
    n = flat.numel()
    sorted_ids = torch.full((n * block_m,), n, dtype=torch.int32, device=ids.device)
    sorted_ids[::block_m] = torch.arange(n, dtype=torch.int32, device=ids.device)
    return Alignment(sorted_ids, flat.to(torch.int32), n * block_m, n, block_m)
