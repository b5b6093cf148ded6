"""The fp8-block kernel (e4m3, 128x128 weight scales, per-token-per-128 activation scales) on a GPU,
over every BLOCK_SIZE_N x BLOCK_SIZE_K pair of its grid: BLOCK_SIZE_N 32/64 read the scale of their
128-wide group per column, BLOCK_SIZE_K 64 takes one dot per step inside a scale group, 128/256
one dot per group. Each is compared with float32 math on the dequantised operands. A config the
shared-memory model says does not fit (64x256x256 at 3 stages on sm90) must be refused by the JIT
for exactly the model's bytes; it then runs at 2 stages.

The interpreter (tests/test_triton_kernel.py) has no fp8: these run only where CUDA is.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tilefit.kernels.triton_moe.config import MoEConfig, grid_axes  # noqa: E402

AXES = grid_axes("fp8-block")
PAIRS = list(itertools.product(AXES["BLOCK_SIZE_N"], AXES["BLOCK_SIZE_K"]))
# K = 640 = 5 scale groups: BLOCK_SIZE_K 256 ends on a half-filled step, 64 on a group's second half.
T, TOPK, E, N, K = 37, 4, 8, 384, 640


def _case(seed: int):
    from tilefit.kernels.triton_moe.ops import quantize_fp8_blocks, quantize_fp8_groups

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(T, K, generator=gen)
    # weights whose 128x128 blocks differ in magnitude up to 40x, so a wrong scale index shows
    mag = torch.rand(E, N // 128, K // 128, generator=gen) * 4 + 0.1
    w = torch.randn(E, N, K, generator=gen) * mag.repeat_interleave(128, 1).repeat_interleave(128, 2)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(T)])
    ids[ids == 5] = 6  # expert 5 gets no token
    dev = "cuda"
    a, a_s = quantize_fp8_groups(x.to(dev).bfloat16())
    b, b_s = quantize_fp8_blocks(w.to(dev))
    return a, a_s, b, b_s, ids.to(dev)


@pytest.mark.gpu
@pytest.mark.parametrize("block_m", [16, 64])
@pytest.mark.parametrize("block_n,block_k", PAIRS)
@pytest.mark.parametrize("scales, swap_ab", [("column", False), ("row", False), ("column", True),
                                              ("row", True)])
def test_fp8_block_grouped_gemm_matches_dequantised_reference(block_m, block_n, block_k, scales, swap_ab):
    from triton.runtime.errors import OutOfResources

    from tilefit.hw.catalog import arch_for_cc
    from tilefit.kernels.triton_moe import FAMILY, smem
    from tilefit.kernels.triton_moe.align import moe_align
    from tilefit.kernels.triton_moe.ops import dequantize, grouped_gemm, reference_grouped_gemm

    a, a_s, b, b_s, ids = _case(block_n * 1000 + block_k)
    c = torch.full((T * TOPK, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    align = moe_align(ids, E, block_m)
    arch = arch_for_cc(*torch.cuda.get_device_capability())
    deep = MoEConfig(block_m, block_n, block_k, 1, 4, 3)
    if swap_ab and not smem.swapped(deep, "fp8-block", True):
        pytest.skip(f"{deep.label()} is not a tile the engines swap")
    if swap_ab and arch is not None and arch.cc[0] != 9:
        pytest.skip(f"the engines swap on sm90 only; this GPU is {arch.name}")
    fitting = [s for s in (3, 2) if arch is None
               or FAMILY.verdict(replace(deep, num_stages=s), arch, "fp8-block", scales=scales,
                                         swap_ab=swap_ab).fits]
    if 3 not in fitting:
        # e.g. 64x256x256 at 3 stages on sm90: the JIT refuses it for the bytes the model says
        with pytest.raises(OutOfResources) as refused:
            grouped_gemm(a, b, c, align, deep, a_rows_per_token=TOPK, a_scale=a_s, b_scale=b_s,
                         row_scale=scales == "row", swap_ab=swap_ab)
        assert refused.value.required == smem.total_bytes(deep, arch, "fp8-block", scales, swap_ab)
    if not fitting:
        pytest.skip(f"{deep.label()} does not fit {arch.name} even at 2 stages")
    cfg = replace(deep, num_stages=fitting[0])
    grouped_gemm(a, b, c, align, cfg, a_rows_per_token=TOPK, a_scale=a_s, b_scale=b_s,
                 row_scale=scales == "row", swap_ab=swap_ab)
    ref = reference_grouped_gemm(dequantize(a, a_s, 1, 128), dequantize(b, b_s, 128, 128), ids,
                                 a_rows_per_token=TOPK)
    assert torch.isfinite(c).all()
    err = ((c.float() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, (cfg.label(), err)  # bf16 output rounding is ~2e-3


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["16,64,64,1,4,4", "16,32,128,1,4,3", "64,64,64,16,4,3",
                                    "128,256,64,16,8,3"])
def test_fp8_block_fused_moe_with_the_new_tiles_matches_the_128_tiles(config):
    """The whole layer (gemm1, silu*up, requantise, gemm2, top-k sum) with a new tile against the
    same layer with 16x128x128, and both against float32 math on the unquantised weights."""
    from tilefit.kernels.triton_moe.config import parse_config
    from tilefit.kernels.triton_moe.ops import fused_moe, quantize_fp8_blocks, reference_moe

    gen = torch.Generator().manual_seed(3)
    t, h, i, e, k = 29, 512, 256, 8, 4
    x = torch.randn(t, h, generator=gen).cuda().bfloat16()
    w1 = (torch.randn(e, 2 * i, h, generator=gen) / h ** 0.5).cuda()
    w2 = (torch.randn(e, h, i, generator=gen) / i ** 0.5).cuda()
    ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)]).cuda()
    wts = torch.rand(t, k, generator=gen).cuda()
    q1, s1 = quantize_fp8_blocks(w1)
    q2, s2 = quantize_fp8_blocks(w2)
    new = parse_config(config, "fp8-block")
    out = fused_moe(x, q1, q2, wts, ids, new, w1_scale=s1, w2_scale=s2).float()
    base = fused_moe(x, q1, q2, wts, ids, MoEConfig(16, 128, 128, 1, 4, 3), w1_scale=s1,
                     w2_scale=s2).float()
    ref = reference_moe(x, w1, w2, wts, ids)
    assert ((out - base).norm() / base.norm()).item() < 1e-2
    assert ((out - ref).norm() / ref.norm()).item() < 0.1  # e4m3 weights and activations
