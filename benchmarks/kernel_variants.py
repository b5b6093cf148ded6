"""Two experimental variants of tilefit's fused-MoE kernel (src/tilefit/kernels/triton_moe/kernel.py),
kept beside the benchmark that measured them (bench_kernel_variants.py; RESULTS.md, "Kernel variants"):

- moe_tma_b: the weights (B) through a TMA tensor descriptor over [E*N, K] instead of pointer loads,
  optionally with Triton's warp specialisation of the K loop (tl.range(warp_specialize=True));
- moe_fp8_small: fp8-block with BLOCK_SIZE_K <= GROUP_K, one dot per K step and the scale group read
  from the K offset (the product kernel loops over the 128-wide groups inside a K step instead).
  With ROW_SCALE, one scale per row and K step where the tile's columns share a weight scale,
  optionally applied one step late (session 10, bench_fp8_scale_cost.py; measured as
  "moe_fp8_rowscale", a kernel of its own then, the same computation). SGLang's
  fused-MoE kernel scales this way when BLOCK_SIZE_N <= group_n (fused_moe_triton_kernels.py, read
  in 0.5.10-0.5.23); vLLM's scales per column like the product kernel (fused_moe.py, 0.11.1-0.33.0).

Not imported by tilefit: the measurements decide what moves into the product kernel.
"""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from tilefit.kernels.triton_moe.kernel import fused_moe_kernel


# -- the product kernel's tile addressing and epilogue, shared by the variants below --------------

@triton.jit
def _tile(tile, num_padded, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
          GROUP_SIZE_M: tl.constexpr):
    """(pid_m, pid_n) of output tile `tile` in the product kernel's grouped order."""
    num_pid_m = tl.cdiv(num_padded, BLOCK_SIZE_M)
    num_pid_in_group = GROUP_SIZE_M * tl.cdiv(N, BLOCK_SIZE_N)
    first_pid_m = (tile // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
    return (first_pid_m + ((tile % num_pid_in_group) % group_size_m),
            (tile % num_pid_in_group) // group_size_m)


@triton.jit
def _rows(pid_m, sorted_ids_ptr, expert_ids_ptr, num_padded, num_valid,
          A_ROWS_PER_TOKEN: tl.constexpr, BLOCK_SIZE_M: tl.constexpr):
    """Block pid_m's row ids, their mask, the A rows they read and their expert (int64)."""
    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    row_ids = tl.load(sorted_ids_ptr + offs_m, mask=offs_m < num_padded, other=num_valid)
    return (row_ids, row_ids < num_valid, (row_ids // A_ROWS_PER_TOKEN).to(tl.int64),
            tl.load(expert_ids_ptr + pid_m).to(tl.int64))


@triton.jit
def _epilogue(acc, c_ptr, row_ids, row_mask, topk_weights_ptr, pid_n, N, stride_cm, stride_cn,
              MUL_ROUTED_WEIGHT: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    """(acc with the router weight applied, output pointers, store mask)."""
    if MUL_ROUTED_WEIGHT:
        acc = acc * tl.load(topk_weights_ptr + row_ids, mask=row_mask, other=0.0)[:, None]
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + row_ids.to(tl.int64)[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    return acc, c_ptrs, row_mask[:, None] & (offs_cn[None, :] < N)


@triton.jit(do_not_specialize=["num_valid"])
def moe_tma_b(
    a_ptr, b_desc, c_ptr, a_scale_ptr, b_scale_ptr, topk_weights_ptr,
    sorted_ids_ptr, expert_ids_ptr,
    N, K, num_padded, num_valid,
    stride_am, stride_ak, stride_cm, stride_cn,
    stride_asm, stride_ask, stride_bse, stride_bsn, stride_bsk,
    A_ROWS_PER_TOKEN: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr, BLOCK_SCALED: tl.constexpr,
    GROUP_K: tl.constexpr, GROUP_N: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr, WS: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    pid_m, pid_n = _tile(tl.program_id(0), num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    row_ids, row_mask, a_rows, expert = _rows(pid_m, sorted_ids_ptr, expert_ids_ptr, num_padded,
                                              num_valid, A_ROWS_PER_TOKEN, BLOCK_SIZE_M)
    b_row0 = (expert * N + pid_n * BLOCK_SIZE_N).to(tl.int32)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    if BLOCK_SCALED:
        as_ptrs = a_scale_ptr + a_rows * stride_asm
        bs_ptrs = b_scale_ptr + expert * stride_bse + (offs_n // GROUP_N) * stride_bsn
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kb in tl.range(0, tl.cdiv(K, BLOCK_SIZE_K), num_stages=LOOP_STAGES, warp_specialize=WS):
        a = tl.load(a_ptrs + kb * BLOCK_SIZE_K * stride_ak, mask=row_mask[:, None], other=0.0)
        b = b_desc.load([b_row0, kb * BLOCK_SIZE_K])
        if BLOCK_SCALED:
            kg = (kb * BLOCK_SIZE_K) // GROUP_K
            a_s = tl.load(as_ptrs + kg * stride_ask, mask=row_mask, other=0.0)
            b_s = tl.load(bs_ptrs + kg * stride_bsk)
            acc += tl.dot(a, b.T) * a_s[:, None] * b_s[None, :]
        else:
            acc = tl.dot(a, b.T, acc)
    acc, c_ptrs, c_mask = _epilogue(acc, c_ptr, row_ids, row_mask, topk_weights_ptr, pid_n, N,
                                    stride_cm, stride_cn, MUL_ROUTED_WEIGHT, BLOCK_SIZE_N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit(do_not_specialize=["num_valid"])
def moe_fp8_small(
    a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, topk_weights_ptr,
    sorted_ids_ptr, expert_ids_ptr,
    N, K, num_padded, num_valid,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
    stride_asm, stride_ask, stride_bse, stride_bsn, stride_bsk,
    A_ROWS_PER_TOKEN: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr,
    GROUP_K: tl.constexpr, GROUP_N: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr, ROW_SCALE: tl.constexpr = False, LATE: tl.constexpr = False,
):
    """fp8 block-scaled with BLOCK_SIZE_K <= GROUP_K (one dot per K step, scale group from the offset).

    ROW_SCALE (BLOCK_SIZE_N dividing GROUP_N): the tile's columns share one weight scale per K
    step, so the step's scale is one value per row (a_s * b_s) and the update one multiply-add
    per element (the product kernel: two multiplies and an add). LATE (with ROW_SCALE): the step's
    dot result is scaled and added one step later, so the next dot does not wait on it."""
    pid_m, pid_n = _tile(tl.program_id(0), num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    row_ids, row_mask, a_rows, expert = _rows(pid_m, sorted_ids_ptr, expert_ids_ptr, num_padded,
                                              num_valid, A_ROWS_PER_TOKEN, BLOCK_SIZE_M)
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    as_ptrs = a_scale_ptr + a_rows * stride_asm
    if ROW_SCALE:
        bs_ptrs = b_scale_ptr + expert * stride_bse + ((pid_n * BLOCK_SIZE_N) % N // GROUP_N) * stride_bsn
    else:
        bs_ptrs = b_scale_ptr + expert * stride_bse + (offs_n // GROUP_N) * stride_bsn
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    prev = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    prev_s = tl.zeros((BLOCK_SIZE_M,), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=row_mask[:, None], other=0.0)
        b = tl.load(b_ptrs)
        kg = (kb * BLOCK_SIZE_K) // GROUP_K
        a_s = tl.load(as_ptrs + kg * stride_ask, mask=row_mask, other=0.0)
        b_s = tl.load(bs_ptrs + kg * stride_bsk)
        if ROW_SCALE:
            d = tl.dot(a, b)
            if LATE:
                acc += prev * prev_s[:, None]
                prev = d
                prev_s = a_s * b_s
            else:
                acc += d * (a_s * b_s)[:, None]
        else:
            acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if LATE:
        acc += prev * prev_s[:, None]
    acc, c_ptrs, c_mask = _epilogue(acc, c_ptr, row_ids, row_mask, topk_weights_ptr, pid_n, N,
                                    stride_cm, stride_cn, MUL_ROUTED_WEIGHT, BLOCK_SIZE_N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit(do_not_specialize=["num_valid"])
def moe_persistent(
    a_ptr, b_ptr, c_ptr, topk_weights_ptr, sorted_ids_ptr, expert_ids_ptr,
    N, K, num_padded, num_valid, num_progs,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
    A_ROWS_PER_TOKEN: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr, FLATTEN: tl.constexpr,
):
    """bf16/fp16 only: `num_progs` programs loop over the output tiles (same grouped order as the
    product kernel), so the next tile's first loads overlap this tile's epilogue when flattened."""
    num_tiles = tl.cdiv(num_padded, BLOCK_SIZE_M) * tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    for tile in tl.range(tl.program_id(0), num_tiles, num_progs, flatten=FLATTEN):
        pid_m, pid_n = _tile(tile, num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
        row_ids, row_mask, a_rows, expert = _rows(pid_m, sorted_ids_ptr, expert_ids_ptr, num_padded,
                                                  num_valid, A_ROWS_PER_TOKEN, BLOCK_SIZE_M)
        offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
        a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + expert * stride_be + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for kb in range(0, k_tiles):
            a = tl.load(a_ptrs + kb * BLOCK_SIZE_K * stride_ak, mask=row_mask[:, None], other=0.0)
            b = tl.load(b_ptrs + kb * BLOCK_SIZE_K * stride_bk)
            acc = tl.dot(a, b, acc)
        acc, c_ptrs, c_mask = _epilogue(acc, c_ptr, row_ids, row_mask, topk_weights_ptr, pid_n, N,
                                        stride_cm, stride_cn, MUL_ROUTED_WEIGHT, BLOCK_SIZE_N)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit(do_not_specialize=["num_valid"])
def moe_fp8_splitk(
    a_ptr, b_ptr, c32_ptr, a_scale_ptr, b_scale_ptr, topk_weights_ptr,
    sorted_ids_ptr, expert_ids_ptr,
    N, K, num_padded, num_valid, k_per_split,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
    stride_asm, stride_ask, stride_bse, stride_bsn, stride_bsk,
    A_ROWS_PER_TOKEN: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr,
    GROUP_K: tl.constexpr, GROUP_N: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
):
    """fp8-block split-K for tiny batches: program (tile, s) sums K in [s*k_per_split, ...) and adds
    its partial product into a zeroed fp32 buffer (BLOCK_SIZE_K a multiple of GROUP_K)."""
    split = tl.program_id(1)
    pid_m, pid_n = _tile(tl.program_id(0), num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, 1)
    row_ids, row_mask, a_rows, expert = _rows(pid_m, sorted_ids_ptr, expert_ids_ptr, num_padded,
                                              num_valid, A_ROWS_PER_TOKEN, BLOCK_SIZE_M)
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, GROUP_K)
    k0 = split * k_per_split
    as_ptrs = a_scale_ptr + a_rows * stride_asm
    bs_ptrs = b_scale_ptr + expert * stride_bse + (offs_n // GROUP_N) * stride_bsn
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + (k0 + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kb in range(0, k_per_split // BLOCK_SIZE_K):
        for g in tl.static_range(BLOCK_SIZE_K // GROUP_K):
            a = tl.load(a_ptrs + g * GROUP_K * stride_ak, mask=row_mask[:, None], other=0.0)
            b = tl.load(b_ptrs + g * GROUP_K * stride_bk)
            kg = (k0 + kb * BLOCK_SIZE_K) // GROUP_K + g
            a_s = tl.load(as_ptrs + kg * stride_ask, mask=row_mask, other=0.0)
            b_s = tl.load(bs_ptrs + kg * stride_bsk)
            acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    acc, c_ptrs, c_mask = _epilogue(acc, c32_ptr, row_ids, row_mask, topk_weights_ptr, pid_n, N,
                                    stride_cm, stride_cn, MUL_ROUTED_WEIGHT, BLOCK_SIZE_N)
    tl.atomic_add(c_ptrs, acc, mask=c_mask, sem="relaxed")


# -- launchers: p is the benchmark's problem dict (a, b, c, a_s, b_s, n, k, arpt), al an Alignment --

def launch_base(p, cfg, al, tw):
    a, b, c, a_s, b_s = p["a"], p["b"], p["c"], p["a_s"], p["b_s"]
    sc = a_s is not None
    d = torch.zeros(1, device="cuda")
    grid = (triton.cdiv(al.num_padded, cfg.block_m) * triton.cdiv(p["n"], cfg.block_n),)
    fused_moe_kernel[grid](
        a, b, c, a_s if sc else d, b_s if sc else d, tw if tw is not None else d,
        al.sorted_ids, al.expert_ids, p["n"], p["k"], al.num_padded, al.num_valid, cfg.group_m,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1),
        a_s.stride(0) if sc else 0, a_s.stride(1) if sc else 0,
        b_s.stride(0) if sc else 0, b_s.stride(1) if sc else 0, b_s.stride(2) if sc else 0,
        A_ROWS_PER_TOKEN=p["arpt"], MUL_ROUTED_WEIGHT=tw is not None, BLOCK_SCALED=sc,
        GROUP_K=128, GROUP_N=128, ROW_SCALE=False, SWAP_AB=False, BLOCK_SIZE_M=cfg.block_m,
        BLOCK_SIZE_N=cfg.block_n,
        BLOCK_SIZE_K=cfg.block_k, num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def launch_small(p, cfg, al, tw, row_scale=False, late=False):
    a, b, c, a_s, b_s = p["a"], p["b"], p["c"], p["a_s"], p["b_s"]
    if 128 % cfg.block_k or p["k"] % 128 or (row_scale or late) and 128 % cfg.block_n:
        raise ValueError("moe_fp8_small needs BLOCK_SIZE_K dividing 128 and K % 128 == 0; its row "
                         "scale BLOCK_SIZE_N dividing 128")
    d = torch.zeros(1, device=a.device)
    grid = (triton.cdiv(al.num_padded, cfg.block_m) * triton.cdiv(p["n"], cfg.block_n),)
    moe_fp8_small[grid](
        a, b, c, a_s, b_s, tw if tw is not None else d, al.sorted_ids, al.expert_ids,
        p["n"], p["k"], al.num_padded, al.num_valid,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1),
        a_s.stride(0), a_s.stride(1), b_s.stride(0), b_s.stride(1), b_s.stride(2),
        A_ROWS_PER_TOKEN=p["arpt"], MUL_ROUTED_WEIGHT=tw is not None, GROUP_K=128, GROUP_N=128,
        BLOCK_SIZE_M=cfg.block_m, BLOCK_SIZE_N=cfg.block_n, BLOCK_SIZE_K=cfg.block_k,
        GROUP_SIZE_M=cfg.group_m, ROW_SCALE=row_scale or late, LATE=late,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def launch_tma(p, cfg, al, tw, ws):
    a, b, c, a_s, b_s = p["a"], p["b"], p["c"], p["a_s"], p["b_s"]
    sc = a_s is not None
    d = torch.zeros(1, device="cuda")
    key = (id(b), cfg.block_n, cfg.block_k)
    desc = p.setdefault("desc", {}).get(key)
    if desc is None:
        e, n, k = b.shape
        desc = TensorDescriptor(b.view(e * n, k), [e * n, k], [k, 1], [cfg.block_n, cfg.block_k])
        p["desc"][key] = desc
    grid = (triton.cdiv(al.num_padded, cfg.block_m) * triton.cdiv(p["n"], cfg.block_n),)
    moe_tma_b[grid](
        a, desc, c, a_s if sc else d, b_s if sc else d, tw if tw is not None else d,
        al.sorted_ids, al.expert_ids, p["n"], p["k"], al.num_padded, al.num_valid,
        a.stride(0), a.stride(1), c.stride(0), c.stride(1),
        a_s.stride(0) if sc else 0, a_s.stride(1) if sc else 0,
        b_s.stride(0) if sc else 0, b_s.stride(1) if sc else 0, b_s.stride(2) if sc else 0,
        A_ROWS_PER_TOKEN=p["arpt"], MUL_ROUTED_WEIGHT=tw is not None, BLOCK_SCALED=sc,
        GROUP_K=128, GROUP_N=128, BLOCK_SIZE_M=cfg.block_m, BLOCK_SIZE_N=cfg.block_n,
        BLOCK_SIZE_K=cfg.block_k, GROUP_SIZE_M=cfg.group_m, WS=ws, LOOP_STAGES=cfg.num_stages,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def run_variant(variant, p, cfg, al, tw):
    if variant == "base":
        launch_base(p, cfg, al, tw)
    elif variant == "small":
        launch_small(p, cfg, al, tw)
    else:
        launch_tma(p, cfg, al, tw, variant == "tma_ws")


def launch_persistent(p, cfg, al, tw, progs, flatten):
    a, b, c = p["a"], p["b"], p["c"]
    d = torch.zeros(1, device="cuda")
    tiles = triton.cdiv(al.num_padded, cfg.block_m) * triton.cdiv(p["n"], cfg.block_n)
    grid = (max(1, min(tiles, progs)),)
    moe_persistent[grid](
        a, b, c, tw if tw is not None else d, al.sorted_ids, al.expert_ids,
        p["n"], p["k"], al.num_padded, al.num_valid, grid[0],
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1),
        A_ROWS_PER_TOKEN=p["arpt"], MUL_ROUTED_WEIGHT=tw is not None,
        BLOCK_SIZE_M=cfg.block_m, BLOCK_SIZE_N=cfg.block_n, BLOCK_SIZE_K=cfg.block_k,
        GROUP_SIZE_M=cfg.group_m, FLATTEN=flatten, num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def launch_splitk(p, cfg, al, tw, splits, c32):
    a, b, a_s, b_s = p["a"], p["b"], p["a_s"], p["b_s"]
    d = torch.zeros(1, device="cuda")
    k_per = p["k"] // splits
    c32.zero_()
    grid = (triton.cdiv(al.num_padded, cfg.block_m) * triton.cdiv(p["n"], cfg.block_n), splits)
    moe_fp8_splitk[grid](
        a, b, c32, a_s, b_s, tw if tw is not None else d, al.sorted_ids, al.expert_ids,
        p["n"], p["k"], al.num_padded, al.num_valid, k_per,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c32.stride(0), c32.stride(1),
        a_s.stride(0), a_s.stride(1), b_s.stride(0), b_s.stride(1), b_s.stride(2),
        A_ROWS_PER_TOKEN=p["arpt"], MUL_ROUTED_WEIGHT=tw is not None, GROUP_K=128, GROUP_N=128,
        BLOCK_SIZE_M=cfg.block_m, BLOCK_SIZE_N=cfg.block_n, BLOCK_SIZE_K=cfg.block_k,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    p["c"].copy_(c32)  # the cast to the output dtype the product kernel writes directly
