"""Our fused-MoE kernel against a float32 torch reference, on the CPU through Triton's interpreter.

The interpreter is switched on only inside a child process (this file run as a script), so that
TRITON_INTERPRET never reaches the oracle tests, which compile for real targets. Sizes are tiny.
Triton 3.6's interpreter gets bf16 tl.dot wrong, so fp16 and fp32 run here; bf16/fp8 run on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tilefit.kernels.triton_moe.align import moe_align  # noqa: E402

# (name, T, H, I, E, k, routing) -- routing shapes the expert histogram.
CASES = {
    "mixed": dict(T=9, H=64, I=32, E=6, k=2, routing="mixed", cfg=(16, 32, 32, 1, 4, 2)),
    "one_hot_expert": dict(T=12, H=64, I=64, E=4, k=2, routing="hot", cfg=(32, 64, 64, 16, 4, 3)),
    "single_token": dict(T=1, H=32, I=32, E=8, k=2, routing="random", cfg=(16, 32, 32, 1, 4, 2)),
    "ragged_k_n": dict(T=5, H=48, I=40, E=3, k=3, routing="random", cfg=(16, 32, 32, 1, 4, 2)),
}


def _routing(kind: str, t: int, e: int, k: int, gen) -> "torch.Tensor":
    ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)])
    if kind == "mixed":  # expert 1 hot, expert 3 empty, expert 4 gets exactly one token
        ids[:, 0] = 1
        ids[ids == 3] = 2
        ids[ids == 4] = 5
        ids[0, 1] = 4
        ids[ids[:, 0] == ids[:, 1], 1] = 0
    elif kind == "hot":  # every token's first choice is expert 0
        ids[:, 0] = 0
        ids[ids[:, 1] == 0, 1] = 1
    return ids


def _run_case(name: str, dtype_name: str) -> dict:
    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.kernels.triton_moe.ops import fused_moe, reference_moe

    c = CASES[name]
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()) % 1000)  # str hash() varies per process
    t, h, i, e, k = c["T"], c["H"], c["I"], c["E"], c["k"]
    x = torch.randn(t, h, generator=gen).to(dtype)
    w1 = (torch.randn(e, 2 * i, h, generator=gen) / h ** 0.5).to(dtype)
    w2 = (torch.randn(e, h, i, generator=gen) / i ** 0.5).to(dtype)
    ids = _routing(c["routing"], t, e, k, gen)
    w = torch.rand(t, k, generator=gen)
    out = fused_moe(x, w1, w2, w, ids, MoEConfig(*c["cfg"]))
    ref = reference_moe(x, w1, w2, w, ids)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    return {"err": err, "finite": bool(torch.isfinite(out).all())}


def _run_block_scaled() -> dict:
    """The fp8 block-scale path with fp16 operands: the interpreter has no fp8, the logic is the same."""
    from tilefit.kernels.triton_moe.align import moe_align
    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.kernels.triton_moe.ops import dequantize, grouped_gemm

    gen = torch.Generator().manual_seed(7)
    t, k_top, e, n, kk = 6, 2, 3, 256, 512
    a = torch.randn(t, kk, generator=gen).half()
    b = torch.randn(e, n, kk, generator=gen).half()
    a_s = torch.rand(t, kk // 128, generator=gen) + 0.5
    b_s = torch.rand(e, n // 128, kk // 128, generator=gen) + 0.5
    ids = torch.stack([torch.randperm(e, generator=gen)[:k_top] for _ in range(t)])
    errs = {}
    # BLOCK_SIZE_K 128/256 take one dot per scale group, 64/32 one dot per step inside a group;
    # BLOCK_SIZE_N 32/64 read the b scale of their 128-wide group per column, or (row_scale,
    # SGLang's form) once per tile; BLOCK_SIZE_N 256 spans two groups and stays per column.
    # swap_ab computes each step as B^T A^T (the engines' sm90 path), in both scale forms.
    af = dequantize(a, a_s, 1, 128)
    bf = dequantize(b, b_s, 128, 128)
    ref = torch.stack([af[r // k_top] @ bf[ids.reshape(-1)[r]].T for r in range(t * k_top)])
    for cfg in [MoEConfig(16, 128, 128, 1, 4, 2), MoEConfig(16, 128, 256, 1, 4, 2),
                MoEConfig(16, 64, 64, 1, 4, 2), MoEConfig(16, 32, 128, 1, 4, 2),
                MoEConfig(32, 64, 32, 1, 4, 2), MoEConfig(16, 256, 64, 1, 4, 2)]:
        for row, swap in ((False, False), (True, False), (False, True), (True, True)):
            if swap and cfg.block_n < 64:
                continue
            al = moe_align(ids, e, cfg.block_m)
            c = torch.full((t * k_top, n), float("nan"), dtype=torch.float32)
            grouped_gemm(a, b, c, al, cfg, a_rows_per_token=k_top, a_scale=a_s, b_scale=b_s,
                         row_scale=row, swap_ab=swap)
            label = cfg.label() + (" row" if row else "") + (" swap" if swap else "")
            errs[label] = ((c - ref).norm() / ref.norm()).item()
    # K = 3 scale groups with BLOCK_SIZE_K 256: the last step's second group lies past K. The
    # scales are views into NaN-padded buffers, so a scale read past a row's end shows as NaN.
    kk = 384
    a3, b3 = a[:, :kk].contiguous(), b[:, :, :kk].contiguous()
    a_pad = torch.full((t, 4), float("nan"))
    b_pad = torch.full((e, n // 128, 4), float("nan"))
    a_pad[:, :3], b_pad[:, :, :3] = a_s[:, :3], b_s[:, :, :3]
    a_s3, b_s3 = a_pad[:, :3], b_pad[:, :, :3]
    cfg = MoEConfig(16, 128, 256, 1, 4, 2)
    c = torch.full((t * k_top, n), float("nan"), dtype=torch.float32)
    grouped_gemm(a3, b3, c, moe_align(ids, e, cfg.block_m), cfg, a_rows_per_token=k_top,
                 a_scale=a_s3, b_scale=b_s3)
    af, bf = dequantize(a3, a_s3, 1, 128), dequantize(b3, b_s3, 128, 128)
    ref = torch.stack([af[r // k_top] @ bf[ids.reshape(-1)[r]].T for r in range(t * k_top)])
    errs["ragged K=384 " + cfg.label()] = ((c - ref).norm() / ref.norm()).item()
    return errs


def _run_ep_gemm2() -> dict:
    """gemm2 under expert parallelism: other ranks' assignments (-1) stay unwritten; weights applied."""
    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.kernels.triton_moe.ops import grouped_gemm, reference_grouped_gemm

    gen = torch.Generator().manual_seed(11)
    t, k, e, n, kk = 7, 3, 4, 48, 40
    ids = torch.randint(-1, e, (t, k), generator=gen)
    ids[0] = torch.tensor([-1, -1, -1])  # a token with no local expert at all
    ids[1, 0] = 2
    a = torch.randn(t * k, kk, generator=gen).half()
    b = torch.randn(e, n, kk, generator=gen).half()
    w = torch.rand(t, k, generator=gen)
    cfg = MoEConfig(16, 32, 32, 1, 4, 2)
    c = torch.full((t * k, n), float("nan"), dtype=torch.float32)
    grouped_gemm(a, b, c, moe_align(ids, e, cfg.block_m), cfg, a_rows_per_token=1,
                 topk_weights=w.reshape(-1))
    ref = reference_grouped_gemm(a, b, ids, a_rows_per_token=1, topk_weights=w)
    local = (ids.reshape(-1) >= 0)
    return {"nan_where_expected": bool(torch.equal(c.isnan(), ref.isnan())),
            "some_local": int(local.sum()), "some_remote": int((~local).sum()),
            "err": ((c[local] - ref[local]).norm() / ref[local].norm()).item()}


def _run_ep_fused() -> dict:
    """fused_moe on two expert-parallel ranks (-1 = the other rank's expert): the sum of the two
    partial outputs equals the whole layer."""
    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.kernels.triton_moe.ops import fused_moe, reference_moe

    gen = torch.Generator().manual_seed(5)
    t, h, i, e, k = 6, 32, 32, 4, 2
    x = torch.randn(t, h, generator=gen)
    w1 = torch.randn(e, 2 * i, h, generator=gen) / h ** 0.5
    w2 = torch.randn(e, h, i, generator=gen) / i ** 0.5
    ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)])
    w = torch.rand(t, k, generator=gen)
    cfg = MoEConfig(16, 32, 32, 1, 4, 2)
    half = e // 2
    parts = []
    for rank in range(2):
        lid = ids - rank * half
        lid = torch.where((lid >= 0) & (lid < half), lid, torch.full_like(lid, -1))
        sl = slice(rank * half, (rank + 1) * half)
        parts.append(fused_moe(x, w1[sl], w2[sl], w, lid, cfg, expert_parallel=True))
    ref = reference_moe(x, w1, w2, w, ids)
    out = parts[0] + parts[1]
    return {"finite": bool(out.isfinite().all()), "err": ((out - ref).norm() / ref.norm()).item()}


def _interpreter_numpy_problem() -> str | None:
    """Triton 3.6's interpreter int()s one-element arrays, which numpy 2.4 made an error (the test
    extra pins numpy < 2.4; a GPU machine's own environment may not)."""
    import numpy

    major, minor = (int(p) for p in numpy.__version__.split(".")[:2])
    if (major, minor) >= (2, 4):
        return (f"numpy {numpy.__version__} here; Triton 3.6's interpreter needs numpy < 2.4 "
                f"(pip install 'numpy<2.4', as the test extra does)")
    return None


def _in_interpreter(*argv: str) -> dict:
    problem = _interpreter_numpy_problem()
    if problem:
        pytest.skip(problem)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, __file__, *argv], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_fused_moe_matches_reference(name, dtype):
    r = _in_interpreter("case", name, dtype)
    assert r["finite"]
    # fp16 operands, fp32 accumulation: well under 1e-2; fp32 dots in the interpreter are exact-ish.
    assert r["err"] < (5e-3 if dtype == "float16" else 1e-5), r


def test_block_scaled_path_matches_dequantised_reference():
    errs = _in_interpreter("scaled")
    assert len(errs) == 23 and all(v < 2e-3 for v in errs.values()), errs


def test_expert_parallel_gemm2_applies_weights_and_skips_remote_rows():
    r = _in_interpreter("ep")
    assert r["nan_where_expected"] and r["some_local"] > 0 and r["some_remote"] > 0
    assert r["err"] < 5e-3, r


def test_expert_parallel_fused_moe_ranks_sum_to_the_whole_layer():
    r = _in_interpreter("ep_fused")
    assert r["finite"] and r["err"] < 1e-5, r


def test_interpreter_does_not_leak_into_this_process():
    assert os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


@pytest.mark.parametrize("block_m", [16, 32, 64])
def test_align_pads_each_expert_and_skips_empty_ones(block_m):
    gen = torch.Generator().manual_seed(block_m)
    t, k, e = 37, 4, 10
    ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)])
    ids[ids == 7] = 2  # expert 7 receives nothing
    al = moe_align(ids, e, block_m)
    assert al.num_padded % block_m == 0 and al.num_valid == t * k
    counts = torch.bincount(ids.reshape(-1), minlength=e)
    assert al.expert_ids.numel() == int(((counts + block_m - 1) // block_m).sum())
    assert 7 not in al.expert_ids.tolist()
    flat = ids.reshape(-1)
    valid = al.sorted_ids[al.sorted_ids < t * k].long()
    assert sorted(valid.tolist()) == list(range(t * k))  # every assignment exactly once
    block_of = torch.arange(al.num_padded) // block_m
    for pos in range(al.num_padded):
        row = int(al.sorted_ids[pos])
        if row < t * k:
            assert int(flat[row]) == int(al.expert_ids[block_of[pos]])


def test_align_drops_other_ranks_experts():
    ids = torch.tensor([[0, -1], [5, 1], [-1, -1], [1, 0]])  # E=2 local experts; -1 and 5 elsewhere
    al = moe_align(ids, 2, 16)
    valid = sorted(int(r) for r in al.sorted_ids if r < ids.numel())
    assert valid == [0, 3, 6, 7]
    assert al.expert_ids.tolist() == [0, 1]


if __name__ == "__main__":  # the child process, with TRITON_INTERPRET=1 set by the parent
    if sys.argv[1] == "case":
        print(json.dumps(_run_case(sys.argv[2], sys.argv[3])))
    elif sys.argv[1] == "ep":
        print(json.dumps(_run_ep_gemm2()))
    elif sys.argv[1] == "ep_fused":
        print(json.dumps(_run_ep_fused()))
    else:
        print(json.dumps(_run_block_scaled()))
