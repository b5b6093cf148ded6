"""The zero rows an engine's fused MoE writes for other ranks' (token, k) pairs under EP with
replicated tokens, in compare's prediction: their bytes at copy bandwidth, added to the GEMMs the
engine writes them in, under EP with all-reduce only (measured on an H200: RESULTS.md, session 13)."""

from __future__ import annotations

import pytest

from tilefit.hw.catalog import get_gpu
from tilefit.layout import Layout, plan_layer
from tilefit.layout.routing import routing_stats
from tilefit.models import load_model
from tilefit.perf.interconnect import default_interconnect
from tilefit.perf.moe_layer import Assumptions, layer_time

BOTH = dict(zero_gemms=("gemm1", "gemm2"), zero_why="both GEMMs write zeros (a test's stand-in)")


def _times(layout, batch, a):
    m, g = load_model("glm-5"), get_gpu("h200")
    return m, g, layer_time(plan_layer(m, layout), g, batch, default_interconnect(g), a)


@pytest.mark.parametrize("batch", [16, 1024, 4096])
def test_zero_rows_add_their_bytes_at_copy_bandwidth_to_each_gemm_that_writes_them(batch):
    m, g, plain = _times(Layout(ep=8), batch, Assumptions())
    _, _, zero = _times(Layout(ep=8), batch, Assumptions(**BOTH))
    local = routing_stats(batch, m.num_experts, m.top_k, 8).assignments_per_gpu_max_mean
    remote = batch * m.top_k - local
    a = Assumptions()
    for p, z in zip(plain.gemms, zero.gemms):
        if p.name.startswith("shared"):  # the shared expert's dense GEMMs see only this rank's rows
            assert z == p
            continue
        want = remote * {"gemm1": 2 * m.expert_width, "gemm2": m.hidden_size}[p.name] * 2 / (
            g.mem_bandwidth_gbps * 1e3 * a.bandwidth_efficiency)
        assert p.zero_us == 0 and z.zero_us == pytest.approx(want)
        assert z.time_us == pytest.approx(p.time_us + want) and z.bytes == p.bytes
    # GLM-5 EP8 at batch 4096: 7 of 8 pairs are other ranks'; gemm2 writes 6144-wide rows
    if batch == 4096:
        assert zero.gemms[1].zero_us > 0.25 * plain.gemms[1].time_us


def test_only_the_gemms_the_engine_names_and_only_under_ep_with_all_reduce():
    _, _, t = _times(Layout(ep=8), 1024, Assumptions(zero_gemms=("gemm1",), zero_why="gemm1 only"))
    assert t.gemms[0].zero_us > 0 and t.gemms[1].zero_us == 0
    _, _, tp = _times(Layout(tp=8), 1024, Assumptions(**BOTH))
    assert all(g.zero_us == 0 for g in tp.gemms)
    _, _, a2a = _times(Layout(ep=8), 1024, Assumptions(ep_comm="alltoall", **BOTH))
    assert all(g.zero_us == 0 for g in a2a.gemms)
    assert any("counted at copy bandwidth" in line for line in Assumptions(**BOTH).lines())
    assert not any("copy bandwidth" in line for line in Assumptions().lines())


# The engines' facts (each read from the wheels named in engines/sglang.py and engines/vllm.py).
@pytest.mark.parametrize("engine,runner,version,flags,want", [
    ("sglang", "triton", "0.5.10", None, ("gemm1", "gemm2")),
    ("sglang", "triton", None, None, ("gemm1", "gemm2")),  # the newest read, 0.5.23
    ("sglang", "triton", "0.5.23", {"enable_fused_moe_sum_all_reduce": "true"}, ("gemm1",)),
    ("sglang", "triton", "0.5.13", {"enable_fused_moe_sum_all_reduce": "true"}, ("gemm1", "gemm2")),
    ("sglang", "flashinfer_cutlass", None, None, ()),
    ("vllm", "TRITON", "0.9.0", None, ("gemm1", "gemm2")),
    ("vllm", "TRITON", "0.12.0", None, ("gemm1", "gemm2")),
    ("vllm", "TRITON", "0.13.0", None, ("gemm2",)),
    ("vllm", "TRITON", "0.14.0", None, ("gemm1", "gemm2")),
    ("vllm", "TRITON", "0.30.0", None, ("gemm1", "gemm2")),
    ("vllm", "TRITON", "0.31.0", None, ()),
    ("vllm", "TRITON", None, None, ()),  # 0.33.0 drops other ranks' pairs, as tilefit's alignment
    ("vllm", "FLASHINFER_CUTLASS", "0.20.0", None, ()),
    ("trtllm", "CUTLASS", None, None, ()),
])
def test_which_engine_versions_write_zero_rows(engine, runner, version, flags, want):
    from tilefit.engines import get_engine

    z = get_engine(engine).ep_zero_rows(load_model("glm-5"), runner, version=version, flags=flags)
    assert z.gemms == want and bool(z.why) == bool(want)


def test_the_fused_sum_keeps_gemm2_zero_rows_for_a_top2_model():
    from tilefit.engines import get_engine

    mixtral = load_model("mixtral-8x7b")
    assert mixtral.top_k == 2
    z = get_engine("sglang").ep_zero_rows(mixtral, "triton", version="0.5.23",
                                          flags={"enable_fused_moe_sum_all_reduce": "true"})
    assert z.gemms == ("gemm1", "gemm2")


def test_compare_counts_sglangs_zero_rows_under_ep_from_a_launch_command(cli):
    # GLM-5-FP8 EP8 under SGLang as its operators launch it (tp 8 + ep 8 on one node)
    cmd = ["--", "python", "-m", "sglang.launch_server", "--model-path", "zai-org/GLM-5-FP8",
           "--tp", "8", "--ep", "8"]
    r = cli("compare", "--gpu", "h200", "--batch", "4096", "--json", *cmd)
    assert r.code == 0, r.err
    d = r.json()
    rows = {x["layout"]: x for x in d["rows"]}
    ep = {g["name"]: g["zero_us"] for g in rows["EP8"]["gemms"]}
    assert ep["gemm1"] > 0 and ep["gemm2"] > ep["gemm1"]  # gemm2's rows are hidden-wide
    assert all(g["zero_us"] == 0 for g in rows["TP8"]["gemms"])
    assert any("writes zeros" in line for line in d["assumptions"])
    r = cli("compare", "--gpu", "h200", "--batch", "4096", "--json", *cmd,
            "--enable-fused-moe-sum-all-reduce")
    assert r.code == 0, r.err
    ep2 = {g["name"]: g["zero_us"] for g in {x["layout"]: x for x in r.json()["rows"]}["EP8"]["gemms"]}
    assert ep2["gemm1"] == pytest.approx(ep["gemm1"]) and ep2["gemm2"] == 0


ZERO = r"""
import torch
from tilefit.kernels.triton_moe.ops import zero_rows
torch.manual_seed(0)
c = torch.randn(37, 200, dtype=torch.bfloat16)
rows = torch.tensor([0, 5, 6, 36, 17], dtype=torch.int64)
want = c.clone()
want[rows] = 0
zero_rows(c, rows, block_m=4, block_n=64)
assert torch.equal(c, want)
zero_rows(c, rows[:0])
print("same")
"""


def test_zero_rows_kernel_zeroes_exactly_the_listed_rows():
    # Triton's interpreter on the CPU (TRITON_INTERPRET before triton is imported: a child process)
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    pytest.importorskip("triton")
    src = Path(__file__).resolve().parents[1] / "src"
    proc = subprocess.run([sys.executable, "-c", ZERO], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(src), "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0 and proc.stdout.split() == ["same"], proc.stderr[-2000:]


def test_a_deepep_launch_dispatches_tokens_so_no_zero_rows_and_an_all_to_all(cli):
    # sglang with --moe-a2a-backend deepep sends each token's top-k copies to the experts' ranks:
    # no replicated tokens (no zero rows), and compare models EP's communication as an all-to-all
    cmd = ["--", "python", "-m", "sglang.launch_server", "--model-path", "zai-org/GLM-5-FP8",
           "--tp", "8", "--ep", "8", "--moe-a2a-backend", "deepep"]
    r = cli("compare", "--gpu", "h200", "--batch", "4096", "--json", *cmd)
    assert r.code == 0, r.err
    ep = next(x for x in r.json()["rows"] if x["layout"] == "EP8")
    assert ep["comm_kind"].startswith("dispatch") and all(g["zero_us"] == 0 for g in ep["gemms"])
    r = cli("compare", "--gpu", "h200", "--batch", "4096", "--json", "--ep-comm", "allreduce", *cmd)
    ep = next(x for x in r.json()["rows"] if x["layout"] == "EP8")
    assert ep["comm_kind"] == "all-reduce"  # the user's --ep-comm wins
