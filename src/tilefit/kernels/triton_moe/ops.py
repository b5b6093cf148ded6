"""Python entry points of our fused-MoE kernel (torch + triton, imported lazily by callers):
gemm1 (x @ w1^T for gate and up, N = 2I), the separate silu(gate)*up step, gemm2 (router weights
applied) and the top-k sum; plus fp8-block quantisation helpers and a float32 torch reference.

Shapes: x [T, H]; w1 [E, 2I, H]; w2 [E, H, I]; topk_ids, topk_weights [T, k]. fp8-block: weight scales
[E, N/128, K/128], activation scales [rows, K/128] (per token, per group of 128 along K).
"""

from __future__ import annotations

from typing import Any

from tilefit.kernels.triton_moe.align import Alignment, moe_align
from tilefit.kernels.triton_moe.config import FP8_BLOCK, MoEConfig, scale_aligned_k


def grouped_gemm(a: Any, b: Any, c: Any, align: Alignment, config: MoEConfig, *,
                 a_rows_per_token: int, topk_weights: Any = None,
                 a_scale: Any = None, b_scale: Any = None, row_scale: bool = False,
                 swap_ab: bool = False) -> Any:
    """c[row] = a[row // a_rows_per_token] @ b[expert(row)]^T (x topk weight) for every valid row.

    a [R, K], b [E, N, K], c [T*k, N]; align from moe_align with block_m == config.block_m.
    """
    import triton

    from tilefit.kernels.triton_moe.kernel import fused_moe_kernel

    if align.block_m != config.block_m:
        raise ValueError(f"alignment was padded to {align.block_m}, config has BLOCK_SIZE_M="
                         f"{config.block_m}")
    n, k = b.shape[1], b.shape[2]
    if a.shape[1] != k:
        raise ValueError(f"a has K={a.shape[1]}, b has K={k}")
    scaled = a_scale is not None
    # The b scale is read per column, so any BLOCK_SIZE_N works; a K step must not straddle two
    # scale groups unless it covers whole ones.
    if scaled and (not scale_aligned_k(config.block_k) or k % FP8_BLOCK):
        raise ValueError(f"fp8 block scales need K a multiple of {FP8_BLOCK} and BLOCK_SIZE_K a "
                         f"multiple or a divisor of {FP8_BLOCK} (K={k}, BLOCK_SIZE_K={config.block_k})")
    if align.num_padded == 0:
        return c
    grid = (triton.cdiv(align.num_padded, config.block_m) * triton.cdiv(n, config.block_n),)
    dummy = _dummy_f32(c.device)  # unused fp32 pointer arguments (the oracle compiles the same)
    fused_moe_kernel[grid](
        a, b, c,
        a_scale if scaled else dummy, b_scale if scaled else dummy,
        topk_weights if topk_weights is not None else dummy,
        align.sorted_ids, align.expert_ids,
        n, k, align.num_padded, align.num_valid, config.group_m,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1), b.stride(2),
        c.stride(0), c.stride(1),
        a_scale.stride(0) if scaled else 0, a_scale.stride(1) if scaled else 0,
        b_scale.stride(0) if scaled else 0, b_scale.stride(1) if scaled else 0,
        b_scale.stride(2) if scaled else 0,
        A_ROWS_PER_TOKEN=a_rows_per_token,
        MUL_ROUTED_WEIGHT=topk_weights is not None,
        BLOCK_SCALED=scaled, GROUP_K=FP8_BLOCK, GROUP_N=FP8_BLOCK, ROW_SCALE=row_scale and scaled,
        SWAP_AB=swap_ab,
        BLOCK_SIZE_M=config.block_m, BLOCK_SIZE_N=config.block_n, BLOCK_SIZE_K=config.block_k,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return c


_DUMMIES: dict[Any, Any] = {}


def _dummy_f32(device: Any) -> Any:
    import torch

    if device not in _DUMMIES:
        _DUMMIES[device] = torch.zeros(1, dtype=torch.float32, device=device)
    return _DUMMIES[device]


def silu_and_mul(x: Any, out: Any = None) -> Any:
    """[R, 2I] -> [R, I]: silu(x[:, :I]) * x[:, I:]."""
    import torch
    import triton

    from tilefit.kernels.triton_moe.kernel import silu_and_mul_kernel

    rows, two_i = x.shape
    i = two_i // 2
    out = torch.empty((rows, i), dtype=x.dtype, device=x.device) if out is None else out
    block = min(1024, triton.next_power_of_2(i))
    if rows:
        silu_and_mul_kernel[(rows, triton.cdiv(i, block))](x, out, i, x.stride(0), out.stride(0),
                                                           BLOCK=block)
    return out


def zero_rows(c: Any, rows: Any, *, block_m: int = 64, block_n: int = 128) -> Any:
    """c[rows, :] = 0 in place, in [block_m, block_n] tiles of coalesced row segments, as the
    engines' fused-MoE kernel zero-fills other ranks' rows (torch's index_fill_ on the same rows
    ran 4-6x slower on an H200); `rows` an int tensor of row indices on c's device."""
    import triton

    from tilefit.kernels.triton_moe.kernel import zero_rows_kernel

    n, cols = int(rows.numel()), c.shape[1]
    if n and cols:
        zero_rows_kernel[(triton.cdiv(n, block_m), triton.cdiv(cols, block_n))](
            c, rows, n, cols, c.stride(0), BLOCK_M=block_m, BLOCK_N=block_n)
    return c


def fused_moe(x: Any, w1: Any, w2: Any, topk_weights: Any, topk_ids: Any, config1: MoEConfig,
              config2: MoEConfig | None = None, *, w1_scale: Any = None, w2_scale: Any = None,
              expert_parallel: bool = False) -> Any:
    """The MoE layer's expert part: [T, H] -> [T, H] (fp8-block when w1_scale/w2_scale are given).

    With `expert_parallel`, topk_ids may hold -1 for assignments to other ranks' experts: those
    rows are never computed and contribute zero to the top-k sum (the caller all-reduces).
    """
    import torch

    config2 = config2 or config1
    t, topk = topk_ids.shape
    e, two_i, _ = w1.shape
    out_dtype = x.dtype if x.dtype in (torch.float16, torch.bfloat16, torch.float32) else torch.bfloat16
    fp8 = w1_scale is not None
    a1, a1_scale = (quantize_fp8_groups(x) if fp8 else (x, None))
    align1 = moe_align(topk_ids, e, config1.block_m)
    h1 = torch.empty((t * topk, two_i), dtype=out_dtype, device=x.device)
    grouped_gemm(a1, w1, h1, align1, config1, a_rows_per_token=topk, a_scale=a1_scale,
                 b_scale=w1_scale)
    act = silu_and_mul(h1)
    a2, a2_scale = (quantize_fp8_groups(act) if fp8 else (act, None))
    align2 = align1 if config2.block_m == config1.block_m else moe_align(topk_ids, e, config2.block_m)
    h2 = torch.empty((t * topk, w2.shape[1]), dtype=out_dtype, device=x.device)
    grouped_gemm(a2, w2, h2, align2, config2, a_rows_per_token=1,
                 topk_weights=topk_weights.reshape(-1).to(torch.float32), a_scale=a2_scale,
                 b_scale=w2_scale)
    rows = h2.view(t, topk, -1)
    if expert_parallel:  # other ranks' rows were never written: keep their garbage out of the sum
        rows = torch.where((topk_ids >= 0)[..., None], rows, torch.zeros((), dtype=rows.dtype, device=rows.device))
    return rows.sum(dim=1, dtype=torch.float32).to(out_dtype)


def quantize_fp8_groups(x: Any, group: int = FP8_BLOCK) -> tuple[Any, Any]:
    """Per-row, per-`group`-columns e4m3 quantisation: [R, K] -> (fp8 [R, K], fp32 scales [R, K/group])."""
    import torch

    r, k = x.shape
    xg = x.float().view(r, k // group, group)
    scale = xg.abs().amax(dim=-1).clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
    q = (xg / scale[..., None]).to(torch.float8_e4m3fn).view(r, k)
    return q, scale.contiguous()


def quantize_fp8_blocks(w: Any, block: int = FP8_BLOCK) -> tuple[Any, Any]:
    """128x128 block quantisation of weights: [E, N, K] -> (fp8 [E, N, K], fp32 [E, N/128, K/128])."""
    import torch

    e, n, k = w.shape
    wb = w.float().view(e, n // block, block, k // block, block)
    scale = wb.abs().amax(dim=(2, 4)).clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
    q = (wb / scale[:, :, None, :, None]).to(torch.float8_e4m3fn).view(e, n, k)
    return q, scale.contiguous()


def dequantize(q: Any, scale: Any, block_n: int, block_k: int) -> Any:
    """Inverse of the quantisers above, in float32 (scale broadcast over its blocks)."""
    s = scale.repeat_interleave(block_k, dim=-1)
    if block_n > 1:
        s = s.repeat_interleave(block_n, dim=-2)
    return q.float() * s


def reference_grouped_gemm(a: Any, b: Any, topk_ids: Any, *, a_rows_per_token: int,
                           topk_weights: Any = None) -> Any:
    """float32 reference of grouped_gemm: [T*k, N], rows of assignments to no local expert are NaN
    (grouped_gemm leaves them unwritten)."""
    import torch

    flat = topk_ids.reshape(-1)
    e, n, _ = b.shape
    out = torch.full((flat.numel(), n), float("nan"), dtype=torch.float32, device=a.device)
    rows = torch.nonzero((flat >= 0) & (flat < e)).reshape(-1)
    if rows.numel():
        x = a.float()[rows // a_rows_per_token]
        out[rows] = torch.einsum("rk,rnk->rn", x, b.float()[flat[rows].long()])
        if topk_weights is not None:
            out[rows] *= topk_weights.reshape(-1).float()[rows, None]
    return out


def reference_moe(x: Any, w1: Any, w2: Any, topk_weights: Any, topk_ids: Any) -> Any:
    """float32 torch reference of fused_moe for plain (already dequantised) weights."""
    import torch

    x, w1, w2 = x.float(), w1.float(), w2.float()
    out = torch.zeros_like(x[:, : w2.shape[1]])
    i = w1.shape[1] // 2
    for e in torch.unique(topk_ids).tolist():
        tok, slot = (topk_ids == e).nonzero(as_tuple=True)
        h = x[tok] @ w1[e].T
        act = torch.nn.functional.silu(h[:, :i]) * h[:, i:]
        out.index_add_(0, tok, (act @ w2[e].T) * topk_weights[tok, slot].float()[:, None])
    return out
