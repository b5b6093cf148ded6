"""`tilefit compare` (prediction): layout parsing, the model's monotonic behaviour, seed scenario."""

from __future__ import annotations

import pytest

from tilefit.errors import UsageError
from tilefit.hw.catalog import get_gpu
from tilefit.layout import Layout, plan_layer
from tilefit.models import load_model
from tilefit.perf.interconnect import default_interconnect, get_interconnect
from tilefit.perf.moe_layer import Assumptions, compute_dtype, layer_time
from tilefit.compare import parse_layouts


def test_parse_layouts():
    assert parse_layouts("tp8,ep8,tp2ep4", 8) == [(8, 1), (1, 8), (2, 4)]
    assert parse_layouts(None, 2) == [(2, 1), (1, 2)]
    with pytest.raises(UsageError, match="uses 4 GPUs"):
        parse_layouts("tp4", 8)
    with pytest.raises(UsageError, match="bad layout"):
        parse_layouts("pp8", 8)


def test_default_interconnects():
    assert default_interconnect(get_gpu("h200")).key == "nvlink4"
    assert default_interconnect(get_gpu("b200")).key == "nvlink5"
    assert default_interconnect(get_gpu("rtx-pro-6000")).key == "pcie5"
    assert default_interconnect(get_gpu("rtx-4090")).key == "pcie4"


def test_collectives():
    link = get_interconnect("nvlink4")
    assert link.all_reduce_us(1 << 20, 1) == 0
    small, big = link.all_reduce_us(1024, 8), link.all_reduce_us(64 << 20, 8)
    assert small == pytest.approx(link.latency_us, rel=0.01) and big > 100 * small / 10


def test_compute_dtype_falls_back_where_units_are_missing():
    assert compute_dtype(get_gpu("rtx-pro-6000"), "nvfp4") == "fp4"
    assert compute_dtype(get_gpu("h200"), "mxfp4") == "fp8"
    assert compute_dtype(get_gpu("a100"), "fp8-block") == "bf16"


def test_decode_batch1_tp_beats_ep_on_pcie_for_glm5_nvfp4():
    # The seed: GLM-5-NVFP4 on 8 RTX PRO 6000, TP8 10.36 vs EP8 9.79 tok/s single-stream.
    m, g = load_model("glm-5-nvfp4"), get_gpu("rtx-pro-6000")
    link = default_interconnect(g)
    tp = layer_time(plan_layer(m, Layout(tp=8)), g, 1, link)
    ep = layer_time(plan_layer(m, Layout(ep=8)), g, 1, link)
    assert tp.total_us < ep.total_us
    assert tp.comm_us == ep.comm_us  # both all-reduce the same [1, H] output
    # EP's busiest GPU reads whole experts; TP reads 1/8 of each active expert.
    assert ep.gemms[0].bytes > tp.gemms[0].bytes


def test_more_tokens_never_take_less_time():
    m, g = load_model("qwen3-30b-a3b"), get_gpu("h200")
    link = default_interconnect(g)
    for lay in (Layout(tp=2), Layout(ep=2)):
        plan = plan_layer(m, lay)
        times = [layer_time(plan, g, b, link).total_us for b in (1, 16, 64, 256, 1024, 4096)]
        assert times == sorted(times)


def test_alltoall_moves_topk_copies():
    m, g = load_model("glm-5"), get_gpu("h200")
    link = default_interconnect(g)
    plan = plan_layer(m, Layout(ep=8))
    a2a = layer_time(plan, g, 4096, link, Assumptions(ep_comm="alltoall"))
    ar = layer_time(plan, g, 4096, link)
    assert a2a.comm_kind.startswith("dispatch") and a2a.comm_us != ar.comm_us


def test_cli_compare(cli):
    r = cli("compare", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--gpus", "8", "--batch", "1", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert [x["layout"] for x in d["rows"]] == ["TP8", "EP8"]
    assert sum(x["winner"] for x in d["rows"]) == 1 and d["assumptions"]
    r = cli("compare", "--model", "glm-5", "--gpu", "h200", "--gpus", "8", "--layouts", "tp3")
    assert r.code == 2 and "uses 3 GPUs" in r.err
    r = cli("compare", "--model", "glm-5", "--gpu", "h200", "--gpus", "8", "--interconnect", "nvlnk4")
    assert r.code == 2 and "nvlink4" in r.err


def test_cli_compare_measure_on_cpu_stand_in(cli):
    # Orchestration only: float32 torch GEMMs and gloo collectives in 2 spawned processes.
    pytest.importorskip("torch")
    cfg = str(__import__("conftest").FIXTURES / "configs" / "tiny-moe")
    r = cli("compare", "--model", cfg, "--gpu", "h200", "--gpus", "2", "--batch", "1,8", "--measure",
            "--measure-backend", "torch", "--reps", "2", "--json")
    assert r.code == 0, r.err
    rows = r.json()["rows"]
    assert len(rows) == 4 and all(row["measured"]["gemm_us"] > 0 for row in rows)
    assert all(row["measured"]["comm_us"] is not None and row["measured"]["ranks"] == 2 for row in rows)
    for row in rows:  # EP all-reduces by default; the all-to-all is measured beside it
        m = row["measured"]
        assert m["comm_us"] == m["allreduce_us"] and m["total_us"] == m["gemm_us"] + m["comm_us"]
        assert (m["alltoall_us"] is not None) == (row["layout"] == "EP2")
        assert m["total_error"] == pytest.approx(row["total_us"] / m["total_us"] - 1)
    for b in (1, 8):
        assert sum(row["measured"]["winner"] for row in rows if row["batch"] == b) == 1


def test_cli_compare_measure_alltoall_on_cpu_stand_in(cli):
    pytest.importorskip("torch")
    cfg = str(__import__("conftest").FIXTURES / "configs" / "tiny-moe")
    r = cli("compare", "--model", cfg, "--gpu", "h200", "--gpus", "2", "--batch", "4", "--measure",
            "--measure-backend", "torch", "--reps", "2", "--ep-comm", "alltoall")
    assert r.code == 0, r.err
    assert "measured layer us" in r.out and "winner" in r.out
    ep = next(line for line in r.out.splitlines() if " EP2 " in f" {line} ")
    assert "not run" not in ep


def test_cli_compare_measure_without_gpu_is_a_usage_error(cli):
    r = cli("compare", "--model", "glm-5", "--gpu", "h200", "--gpus", "2", "--measure")
    assert r.code == 2 and ("GPU" in r.err or "torch" in r.err)


@pytest.mark.gpu
def test_measure_real_kernel_on_one_gpu():
    from tilefit.perf.measure import MeasureSpec, measure

    spec = MeasureSpec(hidden=1024, width=512, experts=16, top_k=2, tp=1, ep=2, batches=(1, 64), reps=5)
    rows = measure(spec, ranks=1)  # one GPU stands in for the busiest rank
    assert [r.batch for r in rows] == [1, 64]
    assert all(r.gemm_us > 0 and r.layer_us > 0 and r.comm_us("allreduce") is None for r in rows)


def test_layouts_in_either_order_and_clear_errors(cli):
    assert parse_layouts("ep4tp2", 8) == [(2, 4)]
    r = cli("compare", "--model", "glm-5", "--gpu", "h200", "--gpus", "3")
    assert r.code == 2 and "layout TP3 for 3 GPUs" in r.err and "--layouts" in r.err
    r = cli("compare", "--model", "glm-5", "--gpu", "h200", "--gpus", "8", "--layouts", " ")
    assert r.code == 2 and "empty" in r.err


def test_compare_marks_layouts_whose_weights_do_not_fit(cli):
    rows = cli("compare", "--model", "glm-5", "--gpu", "h200", "--gpus", "8", "--batch", "1", "--json").json()["rows"]
    assert all(r["weights_memory_share"] > 1 for r in rows)  # bf16 GLM-5 needs more than 8 x 141 GB


def test_seed_scenario_golden(cli):
    from conftest import check_golden

    r = cli("compare", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--gpus", "8", "--batch", "1,16,64,256")
    assert r.code == 0
    check_golden("compare_glm5_nvfp4_rtx_pro_6000_8.txt", r.out)
