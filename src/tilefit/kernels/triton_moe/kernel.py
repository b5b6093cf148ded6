"""The Triton kernels: a grouped GEMM over expert-sorted, BLOCK_SIZE_M-padded token blocks, and the
separate silu(gate) * up activation between gemm1 and gemm2.

Data flow (T = tokens, k = top-k, E = experts, N = output width, K = reduction width):
  sorted_ids [P]  rows of the flattened (token, k) assignments, grouped by expert, padded with P_pad
                  sentinels (= T*k) so every expert's run is a multiple of BLOCK_SIZE_M
  expert_ids [P / BLOCK_SIZE_M]  the expert of each padded block
  A [T or T*k, K] gathered through sorted_ids; B [E, N, K]; C [T*k, N]
One program computes one [BLOCK_SIZE_M, BLOCK_SIZE_N] tile of C for one expert block.
This module imports triton at top level: import it only from code that needs the kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl


# num_valid (= T*k) changes with every batch: left unspecialised, one compiled kernel serves every
# batch size (a precompiled config is then a cache hit at any batch; see tune.targets.tilefit_moe).
# GROUP_SIZE_M is a runtime argument, unspecialised too: it only enters the program-id arithmetic,
# which divides by the runtime column count anyway, so the four GROUP_SIZE_M values of a tile share
# one compiled kernel (a tuning run compiles a tile once, not once per value). The engines' kernels
# take it as a constexpr (vLLM 0.33.0 fused_moe.py l.341, SGLang 0.5.23 fused_moe_triton_kernels.py
# l.367), which changes a few integer instructions per program, not the main loop: measured on the
# H200, the two ran within 0.985-1.003x of each other (benchmarks/RESULTS.md, session 6).
@triton.jit(do_not_specialize=["num_valid", "GROUP_SIZE_M"])
def fused_moe_kernel(
    a_ptr, b_ptr, c_ptr,
    a_scale_ptr, b_scale_ptr,  # fp8 only: [A rows, K/GROUP_K] fp32 and [E, N/GROUP_N, K/GROUP_K]
    topk_weights_ptr,  # [T*k] fp32, used when MUL_ROUTED_WEIGHT
    sorted_ids_ptr, expert_ids_ptr,
    N, K, num_padded, num_valid,  # num_valid = T*k: ids >= it are padding
    GROUP_SIZE_M,  # row blocks per column sweep (see the grouped ordering below)
    stride_am, stride_ak,
    stride_be, stride_bn, stride_bk,
    stride_cm, stride_cn,
    stride_asm, stride_ask,
    stride_bse, stride_bsn, stride_bsk,
    A_ROWS_PER_TOKEN: tl.constexpr,  # k for gemm1 (A is [T, K]), 1 for gemm2 (A is [T*k, K])
    MUL_ROUTED_WEIGHT: tl.constexpr,
    BLOCK_SCALED: tl.constexpr,  # fp8 with GROUP_K x GROUP_N block scales
    GROUP_K: tl.constexpr,
    GROUP_N: tl.constexpr,
    ROW_SCALE: tl.constexpr,  # fp8-block: one weight scale per tile when BLOCK_SIZE_N <= GROUP_N
    SWAP_AB: tl.constexpr,  # compute each step as B^T A^T ([BLOCK_SIZE_N, BLOCK_SIZE_M]), see _mma
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(num_padded, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    # Grouped ordering: GROUP_SIZE_M row blocks share each column sweep, for L2 reuse of B.
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    row_ids = tl.load(sorted_ids_ptr + offs_m, mask=offs_m < num_padded, other=num_valid)
    row_mask = row_ids < num_valid
    a_rows = (row_ids // A_ROWS_PER_TOKEN).to(tl.int64)
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)

    # Wrapping N keeps B loads unmasked; the wrapped columns are never stored.
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    if BLOCK_SCALED:
        # One scale per GROUP_K slice of K and GROUP_N slice of N. The b scale is read per column
        # (offs_n // GROUP_N), so any BLOCK_SIZE_N works. A BLOCK_SIZE_K that is a multiple of
        # GROUP_K takes one dot per group per K step, each scaled by its own a and b scales; one
        # that divides GROUP_K takes one dot per step, scaled by the group the step lies in.
        if BLOCK_SIZE_K >= GROUP_K:
            offs_k = tl.arange(0, GROUP_K)
        else:
            offs_k = tl.arange(0, BLOCK_SIZE_K)
        as_ptrs = a_scale_ptr + a_rows * stride_asm
        if ROW_SCALE and BLOCK_SIZE_N <= GROUP_N:
            # The tile's columns lie in one scale group (N is a multiple of GROUP_N), so each K
            # group's scale is one product per row: SGLang's form. Otherwise one per column: vLLM's.
            bs_ptrs = b_scale_ptr + expert * stride_bse + (pid_n * BLOCK_SIZE_N // GROUP_N) * stride_bsn
        else:
            bs_ptrs = b_scale_ptr + expert * stride_bse + (offs_n // GROUP_N) * stride_bsn
    else:
        offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = (b_ptr + expert * stride_be + offs_k[:, None] * stride_bk
              + offs_n[None, :] * stride_bn)

    if SWAP_AB:
        acc = tl.zeros((BLOCK_SIZE_N, BLOCK_SIZE_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        if BLOCK_SCALED and BLOCK_SIZE_K >= GROUP_K:
            for g in tl.static_range(BLOCK_SIZE_K // GROUP_K):
                k_left = K - kb * BLOCK_SIZE_K - g * GROUP_K
                a = tl.load(a_ptrs + g * GROUP_K * stride_ak,
                            mask=row_mask[:, None] & (offs_k[None, :] < k_left), other=0.0)
                b = tl.load(b_ptrs + g * GROUP_K * stride_bk, mask=offs_k[:, None] < k_left,
                            other=0.0)
                # A ragged last step's groups past K (K=384, BLOCK_SIZE_K=256) load no operand
                # but would read their scales past the scale rows' end, which may hold a NaN:
                # they read the last group's scales, times a dot of zeros.
                k_group = tl.minimum(kb * (BLOCK_SIZE_K // GROUP_K) + g, tl.cdiv(K, GROUP_K) - 1)
                a_s = tl.load(as_ptrs + k_group * stride_ask, mask=row_mask, other=0.0)
                b_s = tl.load(bs_ptrs + k_group * stride_bsk)
                acc += _scaled(_mma(a, b, SWAP_AB), a_s, b_s, ROW_SCALE and BLOCK_SIZE_N <= GROUP_N,
                               SWAP_AB)
        else:
            k_left = K - kb * BLOCK_SIZE_K
            a = tl.load(a_ptrs, mask=row_mask[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            if BLOCK_SCALED:  # BLOCK_SIZE_K divides GROUP_K: the whole step is in one group
                k_group = kb * BLOCK_SIZE_K // GROUP_K
                a_s = tl.load(as_ptrs + k_group * stride_ask, mask=row_mask, other=0.0)
                b_s = tl.load(bs_ptrs + k_group * stride_bsk)
                acc += _scaled(_mma(a, b, SWAP_AB), a_s, b_s, ROW_SCALE and BLOCK_SIZE_N <= GROUP_N,
                               SWAP_AB)
            else:
                acc += _mma(a, b, SWAP_AB)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk

    if SWAP_AB:
        acc = tl.trans(acc)
    if MUL_ROUTED_WEIGHT:
        w = tl.load(topk_weights_ptr + row_ids, mask=row_mask, other=0.0)
        acc = acc * w[:, None]
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + row_ids.to(tl.int64)[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_mask[:, None] & (offs_cn[None, :] < N))


@triton.jit
def _mma(a, b, SWAP: tl.constexpr):
    """A [BM, BK] x B [BK, BN], or with SWAP as B^T A^T [BN, BM]: the tensor cores then take
    BLOCK_SIZE_N as the MMA's M, the swap-AB path vLLM (>= 0.25) and SGLang run fp8 tiles with
    BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64 through on sm90."""
    if SWAP:
        return tl.dot(tl.trans(b), tl.trans(a))
    else:
        return tl.dot(a, b)


@triton.jit
def _scaled(part, a_s, b_s, PER_ROW: tl.constexpr, SWAP: tl.constexpr):
    """One K group's partial product times its scales: a_s per row of A, b_s one scalar (PER_ROW)
    or one per column of B; `part` is [BM, BN], or [BN, BM] with SWAP."""
    if SWAP:
        if PER_ROW:
            return part * (a_s * b_s)[None, :]
        else:
            return part * b_s[:, None] * a_s[None, :]
    else:
        if PER_ROW:
            return part * (a_s * b_s)[:, None]
        else:
            return part * a_s[:, None] * b_s[None, :]


@triton.jit
def silu_and_mul_kernel(x_ptr, out_ptr, I, stride_xm, stride_om, BLOCK: tl.constexpr):
    """out[m, :] = silu(x[m, :I]) * x[m, I:2I], one program per (row, BLOCK columns)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < I
    gate = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_xm + I + cols, mask=mask, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_om + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def zero_rows_kernel(c_ptr, rows_ptr, n_rows, N, stride_cm, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):
    """c[rows[i], :] = 0, one program per (BLOCK_M listed rows, BLOCK_N columns): the zero tiles
    the engines' fused-MoE kernel stores for other ranks' (token, k) pairs under EP."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    in_rows = offs_m < n_rows
    rows = tl.load(rows_ptr + offs_m, mask=in_rows, other=0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    zeros = tl.zeros((BLOCK_M, BLOCK_N), dtype=c_ptr.dtype.element_ty)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], zeros,
             mask=in_rows[:, None] & (cols[None, :] < N))
