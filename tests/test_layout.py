"""Layout planner and routing statistics."""

from __future__ import annotations

import pytest

from tilefit.errors import UsageError
from tilefit.layout import Layout, plan_layer, routing_stats
from tilefit.models import load_model


def shapes(plan):
    return {g.name: (g.n, g.k, g.groups) for g in plan.gemms}


def test_glm5_tp8_vs_ep8_matches_the_seed():
    m = load_model("glm-5")
    tp8 = plan_layer(m, Layout(tp=8))
    ep8 = plan_layer(m, Layout(ep=8))
    assert tp8.local_experts == 256 and ep8.local_experts == 32
    assert shapes(tp8)["gemm1"] == (512, 6144, 256) and shapes(tp8)["gemm2"] == (6144, 256, 256)
    assert shapes(ep8)["gemm1"] == (4096, 6144, 32) and shapes(ep8)["gemm2"] == (6144, 2048, 32)
    # Same weights either way: each GPU holds 1/8 of all routed expert weights.
    routed = lambda p: sum(g.weight_bytes for g in p.routed)  # noqa: E731
    assert routed(tp8) == routed(ep8) == 256 * 3 * 6144 * 2048 * 2 // 8


def test_weight_bytes_count_scales():
    m = load_model("glm-5-fp8")
    g1 = plan_layer(m, Layout(ep=8)).gemms[0]
    per_expert = 4096 * 6144 + (4096 // 128) * (6144 // 128) * 4
    assert g1.weight_bytes == 32 * per_expert
    nv = plan_layer(load_model("glm-5-nvfp4"), Layout(ep=8)).gemms[0]
    assert nv.weight_bytes == 32 * (4096 * 6144 // 2 + 4096 * 6144 // 16)


def test_mixed_tp_ep_and_shared_expert():
    m = load_model("glm-5")
    plan = plan_layer(m, Layout(tp=2, ep=4))
    assert plan.layout.gpus == 8 and plan.local_experts == 64
    assert shapes(plan)["gemm1"] == (2048, 6144, 64)
    assert shapes(plan)["shared.gemm1"] == (512, 6144, 1)  # sharded over all 8 GPUs (attention TP8)
    dp = plan_layer(m, Layout(ep=8, dp=8))
    assert shapes(dp)["shared.gemm1"] == (4096, 6144, 1)  # attention DP8: replicated
    assert plan.weight_bytes_all_layers == plan.weight_bytes_per_layer * 75


@pytest.mark.parametrize("model, layout, message", [
    ("glm-5", Layout(tp=3), "does not divide"),
    ("glm-5", Layout(ep=3), "does not divide"),
    ("glm-5-fp8", Layout(tp=32), "scale block"),
])
def test_bad_layouts(model, layout, message):
    with pytest.raises(UsageError, match=message):
        plan_layer(load_model(model), layout)


@pytest.mark.parametrize("kw", [dict(tp=0), dict(ep=-1), dict(tp=10**7), dict(tp=True), dict(ep=8, dp=3)])
def test_layout_rejects_absurd_values(kw):
    with pytest.raises(UsageError):
        Layout(**kw)


def test_routing_means_are_exact_and_tails_are_sane():
    s = routing_stats(1024, 256, 8, 8)
    assert s.assignments_per_gpu_mean == 1024
    assert s.tokens_per_expert_mean == 32
    assert s.tokens_per_expert_p99 >= s.tokens_per_expert_max_mean > 32
    assert s.assignments_per_gpu_p99 > 1024
    assert routing_stats(1024, 256, 8, 8) == s  # fixed seed: reproducible


def test_routing_sampler_keeps_distinct_experts_per_token():
    # One token, k = E: every expert gets exactly one row, on every trial.
    s = routing_stats(1, 8, 8, 2, trials=50)
    assert s.tokens_per_expert_max_mean == 1 and s.tokens_per_expert_p99 == 1
    assert s.assignments_per_gpu_p99 == 4
    # Batch 1, top-1: the busiest expert has exactly one token.
    s = routing_stats(1, 16, 1, 1, trials=50)
    assert s.tokens_per_expert_p99 == 1 and s.active_experts_per_gpu_mean == pytest.approx(1.0)


def test_routing_mean_of_samples_matches_binomial_mean():
    import numpy as np  # noqa: F401  (the sampler's own dependency)

    s = routing_stats(4096, 128, 8, 1, trials=400)
    # E[max of 128 Binomial(4096, 1/16)] is about mean + 2.6 sigma = 256 + 2.6 * 15.5
    assert 280 < s.tokens_per_expert_max_mean < 310


@pytest.mark.parametrize("batch", [0, -5, 10**9])
def test_routing_rejects_bad_batches(batch):
    with pytest.raises(UsageError):
        routing_stats(batch, 256, 8, 8)


def test_shared_expert_sharding_respects_the_scale_block():
    with pytest.raises(UsageError, match="shared expert width"):
        plan_layer(load_model("glm-5-fp8"), Layout(tp=16, ep=16))


@pytest.mark.parametrize("tp, width, padded_from", [(4, 768, 720), (8, 384, 360)])
def test_gpt_oss_tp4_tp8_use_the_engines_padded_width(tp, width, padded_from):
    # 2880 / tp is not a multiple of the MXFP4 scale block 32; vLLM 0.33.0 and sglang 0.5.23 round
    # the per-rank width up (to 128, or 64 on triton_kernels: both give these widths), not refuse.
    plan = plan_layer(load_model("gpt-oss-120b"), Layout(tp=tp))
    g1, g2 = plan.routed
    assert (g1.n, g2.k, plan.padded_from) == (2 * width, width, padded_from)
