"""sglang's default --mem-fraction-static by release (memory/sglang_reserve.py names the wheels and
lines each rule was read from). Figures are the rules as read, on an H200 (143,771 MiB), an H100
(81,559 MiB) and an L40S (46,068 MiB); the real logs are checked in test_memory_fractions.py."""

from __future__ import annotations

import pytest

from tilefit.engines.sglang_prefill import Model, capture_sizes, configured_sizes
from tilefit.hw.catalog import get_gpu
from tilefit.launch import parse_launch
from tilefit.memory import MemoryRequest, Parallel, Settings, rules_for
from tilefit.memory.base import LaunchFlags, from_launch
from tilefit.memory.sglang_reserve import reserve
from tilefit.models.architecture import load_architecture

GQA, MLA = "qwen3-30b-a3b", "deepseek-v3"


def _req(model, gpu, version, parallel=Parallel(tp=1), flags=(), off=False, env=(), **settings):
    launch = LaunchFlags(flags=tuple(flags), env=tuple(env), disable_cuda_graph=off)
    return MemoryRequest(load_architecture(model), get_gpu(gpu), "sglang", parallel,
                         Settings(launch=launch, **settings), version)


def _parts(req):
    s = rules_for("sglang").defaults(req)
    return dict(reserve(req, req.gpu.memory_bytes / 2**20, s.chunked_prefill, s.cuda_graph_max_bs).parts)


def _fraction(*args, **kwargs):
    return rules_for("sglang").defaults(_req(*args, **kwargs)).mem_fraction


@pytest.mark.parametrize("version, h200, h100", [
    ("0.5.9", 0.907, 0.835),  # 512 + 8192 x 1.5 + 256 x 2 + 128 = 13,440 MB
    ("0.5.10", 0.903, 0.830), ("0.5.14", 0.903, 0.830),  # + 58 piecewise sizes x 8 MB
    ("0.5.15", 0.903, 0.830), ("0.5.23", 0.903, 0.830), (None, 0.903, 0.830),  # breakable, same count
])
def test_a_gqa_model_on_one_gpu(version, h200, h100):
    assert _fraction(GQA, "h200", version) == h200 and _fraction(GQA, "h100", version) == h100


@pytest.mark.parametrize("version, want", [
    ("0.5.9", 0.897),  # 14,848 MB: 512 + 12,288 + 512 x 2 + 1,024
    ("0.5.10", 0.886), ("0.5.14", 0.886),  # + 1,536 MB for MLA prefill graphs (piecewise)
    ("0.5.15", 0.897), ("0.5.17", 0.897),  # breakable refuses MLA (0.5.17: MLA without DSA)
    ("0.5.18", 0.886), ("0.5.23", 0.886),
])
def test_an_mla_model_at_tp8(version, want):
    assert _fraction(MLA, "h200", version, Parallel(tp=8)) == want


def test_the_count_uses_sizes_before_the_mla_cap_and_the_dp_split():
    # MLA: a flat 1.5 GB whatever the cap; GQA: 8 MB per size of the whole chunk, before DP attention
    # halves it (the re-clamp runs after the memory settings).
    assert _parts(_req(MLA, "b200", "0.5.23", Parallel(tp=8)))["prefill graphs"] == 1536
    dp = _parts(_req(GQA, "h200", "0.5.23", Parallel(tp=2, dp=2, dp_attention=True)))
    assert dp["prefill graphs"] == 8 * len(capture_sizes(8192))
    assert "prefill graphs" not in _parts(_req(GQA, "h200", "0.5.16", Parallel(tp=2, dp=2, dp_attention=True)))


def test_disabling_cuda_graphs_by_release():
    # To 0.5.13 --disable-cuda-graph left the piecewise graphs (and the decode term) counted;
    # 0.5.14 drops the prefill term; from 0.5.15 the decode term goes too.
    assert set(_parts(_req(GQA, "h200", "0.5.12", off=True))) >= {"decode graphs", "prefill graphs"}
    p14 = _parts(_req(GQA, "h200", "0.5.14", off=True))
    assert "decode graphs" in p14 and "prefill graphs" not in p14
    p15 = _parts(_req(GQA, "h200", "0.5.15", off=True))
    assert "decode graphs" not in p15 and "prefill graphs" not in p15
    assert "prefill graphs" not in _parts(_req(GQA, "h200", "0.5.23", flags=[("disable_prefill_cuda_graph", "true")]))
    assert "prefill graphs" not in _parts(_req(GQA, "h200", "0.5.12", flags=[("disable_piecewise_cuda_graph", "true")]))


@pytest.mark.parametrize("version, role, decode, prefill", [
    ("0.5.12", "prefill", True, False),  # piecewise off for PD; decode term unconditional
    ("0.5.16", "prefill", False, False),  # sglang sets --disable-cuda-graph on prefill servers
    ("0.5.19", "prefill", False, True),  # role-aware: prefill servers keep prefill graphs
    ("0.5.23", "decode", True, False),
])
def test_pd_roles(version, role, decode, prefill):
    parts = _parts(_req(GQA, "h200", version, flags=[("disaggregation_mode", role)]))
    assert ("decode graphs" in parts) == decode and ("prefill graphs" in parts) == prefill


def test_a_decode_server_sizes_activations_by_its_batch():
    parts = _parts(_req(GQA, "h200", "0.5.23", flags=[("disaggregation_mode", "decode")], max_running_requests=4096))
    assert parts["base + activations"] == 512 + 4096 * 1.5


def test_deepep_and_dp_attention():
    parts = _parts(_req(MLA, "h200", "0.5.23", Parallel(tp=8, ep=8, dp=8, dp_attention=True, a2a_backend="deepep")))
    assert parts["DP attention"] == 512 * 8 * 4.5  # 3 + 1.5 per batch and rank over a batch of 300
    assert parts["breakable graphs with DeepEP"] == 1024 and parts["DeepEP buffers"] == 2048
    old = _parts(_req(MLA, "h200", "0.5.14", Parallel(tp=8, ep=8, dp=8, dp_attention=True, a2a_backend="deepep")))
    assert "DeepEP buffers" not in old and "prefill graphs" not in old  # DP attention: no piecewise


def test_deepep_aligns_the_breakable_grid_to_multiples_of_eight():
    sizes = configured_sizes("0.5.17", Model(False, False, False), {"moe_a2a_backend": "deepep"}, chunked_prefill=8192)
    assert len(sizes) == 38 and sizes[-1] == 2048 and all(s % 8 == 0 for s in sizes)
    assert len(configured_sizes("0.5.16", Model(False, False, False), {}, chunked_prefill=8192)) == 58


def test_context_length_clamps_the_count_in_0_5_13_to_0_5_16():
    a = _parts(_req(GQA, "h200", "0.5.14", context_length=4096))["prefill graphs"]
    b = _parts(_req(GQA, "h200", "0.5.17", context_length=4096))["prefill graphs"]
    assert a == 8 * len(capture_sizes(4096)) and b == 8 * len(capture_sizes(8192))


def test_speculative_decoding_before_0_5_14():
    eagle = [("speculative_algorithm", "EAGLE")]
    assert _parts(_req(GQA, "h200", "0.5.9", flags=eagle))["speculative decoding (EAGLE)"] == 2048
    p10 = _parts(_req(GQA, "h200", "0.5.10", flags=eagle))
    assert p10["speculative decoding (EAGLE)"] == 4096 and "prefill graphs" not in p10  # 0.5.10: no piecewise
    assert "speculative decoding (EAGLE)" not in _parts(_req(GQA, "h200", "0.5.14", flags=eagle))


def test_opt_in_piecewise_before_0_5_10():
    on = [("enable_piecewise_cuda_graph", "true")]
    assert _parts(_req(GQA, "h200", "0.5.6", flags=on))["prefill graphs (opt-in piecewise)"] == 4096 // 4
    assert _parts(_req(GQA, "h200", "0.5.7", flags=on))["prefill graphs (opt-in piecewise)"] == 8192 // 8
    assert _parts(_req(GQA, "h200", "0.5.9", flags=on))["prefill graphs"] == 58 * 8
    assert "prefill graphs" not in _parts(_req(GQA, "h200", "0.5.9"))


def test_post_capture_kv_sizing_replaces_the_reserve():
    env = [("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING", "1")]
    assert _parts(_req(GQA, "h100", "0.5.23", env=env)) == {"post-capture base": 1536, "tp x pp / 8 GB": 128}
    assert _parts(_req(GQA, "h100", "0.5.17", env=env))["post-capture base"] == 512
    assert "post-capture base" not in _parts(_req(MLA, "h200", "0.5.23", Parallel(tp=8), env=env))
    assert "post-capture base" not in _parts(_req(GQA, "h100", "0.5.15", env=env))  # not before 0.5.16
    assert "post-capture base" not in _parts(_req(GQA, "h100", "0.5.23", env=env, chunked_prefill=-1))


def test_running_request_cap_from_0_5_22():
    assert rules_for("sglang").defaults(_req(GQA, "h200", "0.5.22", max_running_requests=64)).cuda_graph_max_bs == 64
    assert rules_for("sglang").defaults(_req(GQA, "h200", "0.5.21", max_running_requests=64)).cuda_graph_max_bs == 256


def test_the_launch_command_feeds_the_reserve():
    spec = parse_launch(["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "8",
                         "--disaggregation-mode", "decode", "--moe-a2a-backend", "deepep",
                         "--cuda-graph-bs", "1", "2", "64"])
    parallel, settings = from_launch(spec)
    assert parallel.a2a_backend == "deepep" and settings.cuda_graph_max_bs == 64
    assert settings.launch.mapping()["disaggregation_mode"] == "decode"
