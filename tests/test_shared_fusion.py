"""SGLang's shared-expert fusion (engines/sglang_shared.py, read from the sglang wheels 0.4.0-0.5.23):
when SGLang runs the shared expert inside the fused MoE, `plan`, `check` and `tune` see the GEMM it
runs (E = local + 1, every token routed to the shared expert) and the file name it looks up (E=257
for DeepSeek-V3 and GLM-5 under TP8, the name of the files the 0.5.9 wheel ships for H200)."""

from __future__ import annotations

import pytest

from tilefit.engines import get_engine
from tilefit.hw.catalog import get_gpu
from tilefit.layout.plan import Layout, plan_layer
from tilefit.models import load_model
from tilefit.tune.targets.base import TuneShape

H200 = get_gpu("h200").arch


def _fusion(model, layout=Layout(tp=8), *, engine="sglang", version=None, flags=None, arch=H200,
            runner="triton"):
    return get_engine(engine).shared_fusion(load_model(model), layout, arch, runner, version=version,
                                            flags=flags or {}).experts


@pytest.mark.parametrize("model, layout, version, flags, fused", [
    ("deepseek-v3", Layout(tp=8), None, {}, 1),
    ("glm-5-fp8", Layout(tp=8), None, {}, 1),
    ("glm-5-fp8", Layout(tp=8), "0.5.8", {}, 0),  # GlmMoeDsaForCausalLM first in 0.5.9
    ("glm-4.5-air-fp8", Layout(tp=4), None, {}, 1),  # the GLM-4 gate: any routed count
    ("glm-4.5-air-fp8", Layout(tp=4), "0.5.5", {}, 0),  # the 0.5.4.post1-0.5.5.post3 rewrite
    ("deepseek-v3", Layout(tp=1, ep=8), None, {}, 0),  # expert parallelism
    ("deepseek-v3", Layout(tp=1, ep=8), None, {"enforce_shared_experts_fusion": "true"}, 1),
    ("deepseek-v3", Layout(tp=1, ep=8), "0.5.11", {"enforce_shared_experts_fusion": "true"}, 0),
    ("deepseek-v3", Layout(tp=8), None, {"disable_shared_experts_fusion": "true"}, 0),
    ("deepseek-v3", Layout(tp=8), None, {"moe_a2a_backend": "deepep"}, 0),
    ("deepseek-v3", Layout(tp=8), None, {"enable_two_batch_overlap": "true"}, 0),
    ("deepseek-v3", Layout(tp=8), "0.5.10", {"enable_two_batch_overlap": "true"}, 1),  # check from 0.5.11
    ("kimi-k2", Layout(tp=8), None, {}, 0),  # 384 routed experts: quark checkpoints only
    ("qwen3-30b-a3b", Layout(tp=4), None, {}, 0),  # no shared expert
])
def test_which_deployments_fuse(model, layout, version, flags, fused):
    assert _fusion(model, layout, version=version, flags=flags) == fused


def test_vllm_fuses_nothing_and_other_runners_nothing():
    assert _fusion("deepseek-v3", engine="vllm") == 0
    assert _fusion("deepseek-v3", runner="flashinfer_trtllm") == 0
    assert _fusion("deepseek-v3", arch=get_gpu("a100").arch) == 1  # compute capability 8.0


def test_the_plan_of_a_fused_layer_has_the_shared_expert_among_the_experts():
    model = load_model("deepseek-v3")
    plain, fused = plan_layer(model, Layout(tp=8)), plan_layer(model, Layout(tp=8), fused_shared=1)
    assert (plain.local_experts, fused.local_experts) == (256, 257)
    assert [g.name for g in fused.gemms] == ["gemm1", "gemm2"] and fused.gemms[0].groups == 257
    assert fused.weight_bytes_per_layer == plain.weight_bytes_per_layer  # the same weights, moved


def test_tune_shape_routes_every_token_to_the_fused_shared_expert():
    from tilefit.tune.targets.draws import routing

    model = load_model("deepseek-v3")
    shape = TuneShape.of_layer(model, plan_layer(model, Layout(tp=8), 1), "fp8-block")
    assert (shape.experts, shape.topk, shape.total_experts, shape.shared) == (257, 9, 256, 1)
    assert shape.key().endswith(",shared=1") and shape.as_dict()["shared"] == 1
    ids, weights = routing(shape, 64, seed=3)
    assert ids.shape == weights.shape == (64, 9)
    assert (ids[:, -1] == 256).all() and (ids[:, :-1] < 256).all()
    assert shape.assignments(64) == 64 * 9
    assert TuneShape(**shape.as_dict()) == shape  # how a worker process rebuilds it


def test_check_looks_up_the_fused_file_name(cli):
    d = cli("check", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--engine", "sglang",
            "--json").json()
    assert d["checked"]["E"] == 257
    assert any(f["kind"] == "shared-experts-fused" for f in d["findings"])
    r = cli("check", "--model", "deepseek-v3", "--gpu", "h200", "--json", "--", "python", "-m",
            "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8",
            "--disable-shared-experts-fusion")
    assert r.code in (0, 1), r.err
    assert r.json()["checked"]["E"] == 256  # the launch command's switch is read
    d = cli("check", "--model", "deepseek-v3", "--gpu", "h200", "--ep", "8", "--engine", "sglang",
            "--json").json()
    assert d["checked"]["E"] == 32 and not any(f["kind"] == "shared-experts-fused" for f in d["findings"])
    assert cli("check", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--engine", "vllm",
               "--json").json()["checked"]["E"] == 256


def test_tune_emits_sglang_files_under_the_fused_name_and_refuses_a_mixed_emit(cli, tmp_path):
    base = ("tune", "--model", "deepseek-v3", "--tp", "8", "--target", "fake", "--batches", "1",
            "--compile-workers", "1", "--rounds", "1")
    r = cli(*base, "--emit", "sglang", "--out", str(tmp_path / "a"), "--json")
    assert r.code == 0, r.err
    names = [f.rsplit("/", 1)[-1] for f in r.json()["files"]]
    assert any(n.startswith("E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8") for n in names)
    assert "E=257" in r.json()["shared_experts_fused"]
    r = cli(*base, "--emit", "vllm,sglang", "--out", str(tmp_path / "b"))
    assert r.code == 2 and "two runs" in r.err and "Traceback" not in r.err
    r = cli(*base, "--emit", "vllm", "--out", str(tmp_path / "c"), "--json")
    assert r.code == 0 and any("E=256,N=256" in f for f in r.json()["files"])


def test_plan_with_an_engine_never_fails_on_a_runner_it_does_not_model(cli):
    # gpt-oss (mxfp4) on sglang and DeepSeek-V3 on vLLM with a B200: no fusion to follow, and
    # no backend question to fail on (plan has no --backend).
    for args in (("--model", "gpt-oss-120b", "--engine", "sglang", "--gpu", "h200"),
                 ("--model", "deepseek-v3", "--engine", "vllm", "--gpu", "b200")):
        r = cli("plan", *args, "--json")
        assert r.code == 0, r.err
        assert "shared_experts_fused" not in r.json()
    r = cli("plan", "--model", "deepseek-v3", "--tp", "8", "--engine", "sglang", "--gpu", "h200",
            "--a2a-backend", "deepep", "--json")
    assert r.code == 0 and r.json()["local_experts"] == 256  # DeepEP keeps it apart, as check says


def test_qwen3_next_fuses_under_tp_from_0_5_14():
    assert _fusion("qwen3-next-80b", Layout(tp=4)) == 1
    assert _fusion("qwen3-next-80b", Layout(tp=4), version="0.5.13") == 0
    assert _fusion("qwen3-next-80b", Layout(tp=4), flags={"moe_a2a_backend": "deepep"}) == 0


def test_check_proposes_a_tune_command_that_tune_accepts_for_a_fused_deployment(cli):
    d = cli("check", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--engine", "sglang",
            "--json").json()
    commands = [r["setting"] for f in d["findings"] for r in f.get("remedies", []) if r.get("setting")]
    assert any("--target tilefit --emit sglang" in c for c in commands), commands


def test_compare_times_the_shared_expert_inside_the_fused_gemms():
    from tilefit.perf.interconnect import default_interconnect
    from tilefit.perf.moe_layer import layer_time

    model, gpu = load_model("deepseek-v3"), get_gpu("h200")
    link = default_interconnect(gpu)
    plain = layer_time(plan_layer(model, Layout(tp=8)), gpu, 256, link)
    fused = layer_time(plan_layer(model, Layout(tp=8), 1), gpu, 256, link)
    assert [g.name for g in plain.gemms] == ["gemm1", "gemm2", "shared.gemm1", "shared.gemm2"]
    assert [g.name for g in fused.gemms] == ["gemm1", "gemm2"]
    assert fused.gemms[0].rows == 256 * 9 and fused.gemms[0].active_groups > plain.gemms[0].active_groups


def test_compare_with_sglang_follows_its_fusion(cli):
    args = ("compare", "--model", "deepseek-v3", "--gpu", "h200", "--gpus", "8", "--batch", "256",
            "--json")
    with_engine = cli(*args, "--engine", "sglang").json()
    without = cli(*args).json()
    tp8 = [r for r in with_engine["rows"] if r["layout"] == "TP8"][0]
    assert [g["name"] for g in tp8["gemms"]] == ["gemm1", "gemm2"]
    assert len([r for r in without["rows"] if r["layout"] == "TP8"][0]["gemms"]) == 4
