"""SGLang's prefill CUDA graphs and tune's graph limit: prefill batches run the MoE inside captured
graphs up to a maximum that depends on the release, the model's attention and the launch flags
(engines/sglang_prefill.py names the wheels each rule was read from, 0.5.10-0.5.23). Expected
figures are the rules as read there, on an H200 (143,771 MiB: chunked_prefill_size 8192, decode
graphs up to 512 at tp >= 4); launch commands are the corpus's (tests/fixtures/launch)."""

from __future__ import annotations

import tomllib

import pytest

from conftest import FIXTURES
from tilefit.engines.sglang_prefill import Model, capture_sizes, prefill_graphs
from tilefit.hw.catalog import get_gpu
from tilefit.launch import parse_launch
from tilefit.models.architecture import load_architecture
from tilefit.tune import graph_limit

H200 = get_gpu("h200")


def test_capture_sizes_follow_sglangs_grid():
    assert len(capture_sizes(8192)) == 58 and capture_sizes(8192)[-1] == 8192
    assert len(capture_sizes(2048)) == 42 and capture_sizes(2048)[:4] == [4, 8, 12, 16]
    assert capture_sizes(3000)[-1] == 2816  # the largest grid size at or under the maximum
    assert capture_sizes(3) == []


def _default(model: str, version: str) -> int:
    return graph_limit.from_engines(("sglang",), load_architecture(model), H200, 8, 1, version).batch


@pytest.mark.parametrize("version, want", [
    ("0.5.10", 2048), ("0.5.14", 2048),  # piecewise; MLA capped at 2048
    ("0.5.15", 512), ("0.5.16", 512), ("0.5.17", 512),  # breakable refuses MLA: decode graphs only
    ("0.5.18", 2048), ("0.5.22", 2048),  # MLA allowed, still capped at 2048
    ("0.5.23", 8192),  # min(8192, chunked_prefill_size)
])
def test_an_mla_model_by_release(version, want):
    assert _default("deepseek-v3", version) == want


@pytest.mark.parametrize("version, want", [
    ("0.5.12", 512),  # GlmMoeDsa on the piecewise blacklist
    ("0.5.13", 2048), ("0.5.16", 512),
    ("0.5.17", 2048),  # 0.5.17 refuses MLA without DSA only
    ("0.5.23", 8192),
])
def test_a_dsa_model_by_release(version, want):
    assert _default("glm-5", version) == want


@pytest.mark.parametrize("version", ["0.5.10", "0.5.14", "0.5.16", "0.5.23"])
def test_a_gqa_model_captures_up_to_the_prefill_chunk(version):
    assert _default("qwen3-235b-a22b", version) == 8192


def test_the_limit_names_both_graphs():
    g = graph_limit.from_engines(("sglang",), load_architecture("glm-5"), H200, 8, 8, "0.5.23")
    assert "breakable CUDA graphs up to 8192 tokens" in g.source and "decode" in g.source
    old = graph_limit.from_engines(("sglang",), load_architecture("glm-5"), H200, 8, 8, "0.5.16")
    assert old.batch == 512 and "MLA attention" in old.source


def _corpus(name: str):
    data = tomllib.loads((FIXTURES / "launch" / f"{name}.toml").read_text())
    return parse_launch(data["command"])


def _from_launch(spec, version, model=None):
    return graph_limit.from_launch(spec, load_architecture(model or spec.model), H200, version)


def test_speculative_decoding_turned_the_piecewise_graph_off_in_0_5_10_only():
    spec = _corpus("sglang-13")  # GLM-4.6-FP8, tp 8, EAGLE (sglang docs)
    first = _from_launch(spec, "0.5.10", "glm-4.6")
    assert first.batch < 8192 and "speculative decoding" in first.source
    assert _from_launch(spec, "0.5.11", "glm-4.6").batch == 8192


def test_deepep_normal_and_disable_cuda_graph_leave_no_graph():
    spec = _corpus("sglang-8")  # DeepSeek-V3-0324, DeepEP normal, --disable-cuda-graph (#5190)
    for version in ("0.5.12", "0.5.14", "0.5.23"):
        assert _from_launch(spec, version, "deepseek-v3").batch == 0


def test_dp_attention_gives_decode_graphs_only():
    spec = _corpus("sglang-15")  # DeepSeek-V3.2-Exp, tp 8, ep 8, dp 8, DP attention (sglang docs)
    g = _from_launch(spec, "0.5.23", "deepseek-v3.2")
    assert g.batch < 2048 and "DP-attention rank" in g.source
    assert "DP attention" in _from_launch(spec, "0.5.14", "deepseek-v3.2").source


def _flags(version, *flags, model=Model(False, False, False), chunk=8192, pp=1, off=False):
    f = parse_launch(["python", "-m", "sglang.launch_server", "--model-path", "m", *flags]).flags()
    return prefill_graphs(version, model, f, pp=pp, chunked_prefill=chunk, disable_cuda_graph=off)


def test_flags_that_turn_prefill_graphs_off():
    assert _flags("0.5.23", "--disable-prefill-cuda-graph").max_tokens == 0
    assert _flags("0.5.13", "--disable-prefill-cuda-graph").max_tokens == 8192  # not a 0.5.13 flag
    assert _flags("0.5.19", "--disable-piecewise-cuda-graph").max_tokens == 0
    assert _flags("0.5.23", "--cuda-graph-backend-prefill", "disabled").max_tokens == 0
    assert _flags("0.5.12", off=True).max_tokens == 8192  # --disable-cuda-graph left piecewise on
    assert _flags("0.5.14", off=True).max_tokens == 0


@pytest.mark.parametrize("version, flags, want", [
    ("0.5.16", ("--moe-a2a-backend", "deepep"), 0),
    ("0.5.17", ("--moe-a2a-backend", "deepep"), 8192),
    ("0.5.23", ("--moe-a2a-backend", "mooncake"), 0),
    ("0.5.16", ("--enable-two-batch-overlap",), 8192),
    ("0.5.17", ("--enable-two-batch-overlap",), 0),
    ("0.5.23", ("--enable-two-batch-overlap", "--cuda-graph-backend-prefill", "breakable"), 8192),
    ("0.5.14", ("--enable-torch-compile",), 0),
    ("0.5.23", ("--enable-torch-compile",), 8192),
    ("0.5.16", ("--dcp-size", "2"), 0),
])
def test_automatic_rules_by_release(version, flags, want):
    assert _flags(version, *flags).max_tokens == want


def test_explicit_sizes_and_maxima():
    assert _flags("0.5.23", "--cuda-graph-max-bs-prefill", "1024").max_tokens == 1024
    assert _flags("0.5.23", "--cuda-graph-bs-prefill", "4", "8", "600").max_tokens == 600
    assert _flags("0.5.12", "--piecewise-cuda-graph-max-tokens", "4096").max_tokens == 4096
    assert _flags("0.5.23", pp=2).max_tokens == 0
    assert _flags("0.5.9").max_tokens == 0  # not read


def test_tune_graph_times_sglang_prefill_batches(monkeypatch, tmp_path):
    from tilefit.cli import tune_cmd
    from tilefit.cli.main import build_parser

    monkeypatch.setattr(tune_cmd, "_local_gpus", lambda: ([0], "NVIDIA H200"))
    args = build_parser().parse_args(["tune", "--out", str(tmp_path), "--", "python3", "-m",
                                      "sglang.launch_server", "--model-path", "zai-org/GLM-5",
                                      "--tp", "8", "--ep", "8"])
    req = tune_cmd.build_request(args)
    assert dict(req.target.kwargs)["graph_max_batch"] == 8192
