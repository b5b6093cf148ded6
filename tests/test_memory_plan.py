"""Unit tests of the memory plan: placement rules, KV layouts, verdicts and remedies, CLI."""

from __future__ import annotations

import pytest
from conftest import check_golden

from tilefit.errors import UsageError
from tilefit.hw.catalog import get_gpu
from tilefit.memory import MemoryRequest, Parallel, Settings, plan_memory, rules_for
from tilefit.memory.kv import normalize_kv_dtype
from tilefit.memory.render import as_dict
from tilefit.memory.weights import weights_per_gpu
from tilefit.models.architecture import load_architecture

GIB = 2**30


def plan(model, gpu, engine, parallel, **settings):
    return plan_memory(MemoryRequest(load_architecture(model), get_gpu(gpu), engine, parallel, Settings(**settings)))


def kinds(p):
    return {f.kind: f.bytes for f in p.weights}


def test_mla_latent_is_the_same_on_every_tp_rank():
    arch = load_architecture("deepseek-v3")
    sg = rules_for("sglang")
    for tp in (1, 8, 16):
        kv = sg.kv_layout(arch, sg.placement(arch, Parallel(tp=tp)), Settings(kv_dtype="bf16"))
        assert kv.bytes_per_token == 61 * (512 + 64) * 2


def test_gqa_kv_heads_split_over_attention_tp_and_replicated_beyond():
    arch = load_architecture("qwen3-235b-a22b")  # 4 KV heads of 128
    sg = rules_for("sglang")
    per = [sg.kv_layout(arch, sg.placement(arch, Parallel(tp=tp)), Settings(kv_dtype="bf16")).bytes_per_token
           for tp in (1, 2, 4, 8)]
    assert per == [94 * 4 * 256 * 2, 94 * 2 * 256 * 2, 94 * 256 * 2, 94 * 256 * 2]
    # DP attention: attention TP is tp / dp
    dp = sg.placement(arch, Parallel(tp=8, dp=4, dp_attention=True))
    assert dp.attn_tp == 2 and dp.vocab_shards == 2 and dp.lm_head_shards == 8


def test_dp_attention_replicates_attention_and_grows_weights():
    tp = kinds(plan("deepseek-v3", "h200", "sglang", Parallel(tp=8)))
    dpa = kinds(plan("deepseek-v3", "h200", "sglang", Parallel(tp=8, dp=8, dp_attention=True)))
    assert dpa["attention"] > 5 * tp["attention"]
    assert dpa["routed_experts"] == tp["routed_experts"]
    assert dpa["embedding"] == 8 * tp["embedding"]


def test_deepep_keeps_shared_experts_whole():
    a = kinds(plan("deepseek-v3", "h200", "sglang", Parallel(tp=8, ep=8)))
    b = kinds(plan("deepseek-v3", "h200", "sglang", Parallel(tp=8, ep=8, a2a_backend="deepep")))
    assert b["shared_experts"] == pytest.approx(8 * a["shared_experts"], rel=0.02)


def test_ep_and_tp_hold_the_same_routed_bytes_on_sglang():
    """TP8 splits every expert's width 8 ways, EP8 gives each GPU 32 whole experts: same bytes."""
    ep = kinds(plan("glm-5-nvfp4", "rtx-pro-6000", "sglang", Parallel(tp=8, ep=8), mem_fraction=0.75))
    tp = kinds(plan("glm-5-nvfp4", "rtx-pro-6000", "sglang", Parallel(tp=8), mem_fraction=0.75))
    # equal but for NVFP4's per-expert global scales: TP keeps all 256 experts' on every GPU
    assert ep.pop("routed_experts") == pytest.approx(tp.pop("routed_experts"), rel=1e-4)
    assert ep == tp


def test_vllm_expert_parallel_spans_tp_times_dp():
    p = rules_for("vllm").placement(load_architecture("qwen3-30b-a3b"), Parallel(tp=2, dp=4, expert_parallel=True))
    assert (p.gpus, p.attn_tp, p.expert_ep, p.expert_tp) == (8, 2, 8, 1)
    q = rules_for("vllm").placement(load_architecture("qwen3-30b-a3b"), Parallel(tp=2, dp=4))
    assert (q.expert_ep, q.expert_tp) == (1, 8)


def test_quantized_checkpoint_formats():
    fp8 = kinds(plan("deepseek-v3", "h200", "sglang", Parallel(tp=8)))
    # 256 experts x 58 layers x 3 x 2048 x 7168 fp8 over 8 GPUs, plus 1/128^2 fp32 scales
    expected = 256 * 58 * 3 * 2048 * 7168 // 8
    assert fp8["routed_experts"] == pytest.approx(expected * (1 + 4 / 128**2), rel=1e-3)
    nv = load_architecture("glm-5-nvfp4")
    assert not nv.dense_quantized  # NVIDIA's NVFP4 checkpoints quantize the routed experts only


def test_weights_sum_over_gpus_is_the_checkpoint():
    """Summed over the 8 GPUs of TP8, the split weights are the model once plus the replicas."""
    arch = load_architecture("mixtral-8x7b")
    one = sum(f.bytes for f in weights_per_gpu(arch, rules_for("sglang").placement(arch, Parallel(tp=1))))
    assert one / 1e9 == pytest.approx(93.4, rel=0.01)  # 46.7B parameters in bf16


def test_mixtral_fix_from_sglang_issue_51_fits():
    """The reporter of sglang #51 got Mixtral running on 2 x 80 GB with --tp-size 2."""
    assert plan("mixtral-8x7b", "a100", "sglang", Parallel(tp=2)).verdict == "GO"
    assert plan("mixtral-8x7b", "rtx-a6000", "sglang", Parallel(tp=1)).verdict == "NO-GO"


def test_no_go_says_the_shortfall_and_every_remedy_fits():
    # 0.848: sglang 0.5.9's default here; 0.5.23 holds 1.5 GB more back for MLA prefill graphs
    # (0.833), which leaves the graphs room and makes the plan GO.
    p = plan("glm-5-nvfp4", "rtx-pro-6000", "sglang", Parallel(tp=8, ep=8), context_length=202752,
             mem_fraction=0.848)
    assert p.verdict == "GO-WITH-WARNINGS" and "short by" in p.warnings[0]  # graph memory is an estimate
    assert p.remedies
    mf = next(r for r in p.remedies if r.setting.startswith("--mem-fraction-static"))
    fixed = plan("glm-5-nvfp4", "rtx-pro-6000", "sglang", Parallel(tp=8, ep=8), context_length=202752,
                 mem_fraction=float(mf.setting.split()[-1]))
    assert fixed.verdict == "GO"


def test_kv_dtype_doubles_tokens():
    a = plan("qwen3-30b-a3b", "h100", "sglang", Parallel(tp=1), mem_fraction=0.85, kv_dtype="bf16")
    b = plan("qwen3-30b-a3b", "h100", "sglang", Parallel(tp=1), mem_fraction=0.85, kv_dtype="fp8")
    assert b.kv_tokens == pytest.approx(2 * a.kv_tokens, rel=1e-4)


def test_short_pool_for_the_context_is_no_go_with_a_context_remedy():
    p = plan("qwen3-235b-a22b-fp8", "h100", "vllm", Parallel(tp=4), context_length=4_000_000)
    assert p.verdict == "NO-GO"
    assert any(r.setting.startswith("--max-model-len") for r in p.remedies)


def test_sglang_default_memory_fraction_follows_server_args():
    # 97,887 MiB at TP8: reserved 512 + 8192 x 1.5 + 512 x 2 + 8/8 x 1024 = 14,848 MB in 0.5.9;
    # 0.5.23 adds 1,536 MB for an MLA model's prefill graphs (memory_hook.py reserve_for_graph_mb).
    p = plan("glm-5-nvfp4", "rtx-pro-6000", "sglang", Parallel(tp=8, ep=8))
    assert p.settings.mem_fraction == round((97887 - 14848 - 1536) / 97887, 3)
    req = MemoryRequest(load_architecture("glm-5-nvfp4"), get_gpu("rtx-pro-6000"), "sglang",
                        Parallel(tp=8, ep=8), Settings(), "0.5.9")
    assert rules_for("sglang").defaults(req).mem_fraction == round((97887 - 14848) / 97887, 3)
    assert p.settings.kv_dtype == "fp8"  # DSA models default to fp8 KV on SM100 and newer


def test_bad_input_is_a_usage_error():
    with pytest.raises(UsageError, match="not known"):
        normalize_kv_dtype("int3")
    with pytest.raises(UsageError, match="must be in"):
        plan("qwen3-30b-a3b", "h100", "sglang", Parallel(tp=1), mem_fraction=1.5)
    with pytest.raises(UsageError, match="must divide"):
        plan("qwen3-30b-a3b", "h100", "sglang", Parallel(tp=4, ep=3))
    with pytest.raises(UsageError, match="not in the memory plan"):
        plan("qwen3-next-80b", "h100", "sglang", Parallel(tp=1))
    with pytest.raises(UsageError, match="unknown engine"):
        rules_for("trtllm")


def test_json_keeps_bytes_and_names_estimates():
    d = as_dict(plan("qwen3-30b-a3b", "h100", "vllm", Parallel(tp=1)))
    assert d["weights_total_bytes"] == sum(d["weights_bytes"].values())
    assert "sampler" in d["estimates"] and d["gpu_memory_bytes"] == 81559 * 2**20


def test_plan_memory_cli_golden(cli):
    r = cli("plan", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--ep", "8", "--memory",
            "--mem-fraction", "0.75", "--context-length", "202752", "--max-running-requests", "512")
    assert r.code == 0, r.err
    check_golden("plan_memory_glm5_nvfp4_ep8.txt", r.out)


def test_plan_memory_cli_no_go_exit_code_and_json(cli):
    # 0.5.9's default fraction leaves the graphs too little room (0.5.23's reserve, 1.5 GB larger, does not)
    r = cli("plan", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--ep", "8", "--memory", "--json",
            "--engine-version", "0.5.9")
    assert r.code == 0 and r.json()["memory"]["verdict"] == "GO-WITH-WARNINGS"
    r = cli("plan", "--model", "deepseek-v3", "--gpu", "h100", "--ep", "8", "--memory", "--json")
    assert r.code == 1
    mem = r.json()["memory"]
    assert mem["verdict"] == "NO-GO" and mem["remedies"][0]["setting"] == "--tp 16 --ep 16"


def test_plan_memory_needs_a_gpu(cli):
    r = cli("plan", "--model", "glm-5-nvfp4", "--ep", "8", "--memory")
    assert r.code == 2 and "--gpu" in r.err


def test_seed_deployment_ep8_vs_tp8_golden():
    """The seed: GLM-5-NVFP4 on 8 x RTX PRO 6000, sglang, memory fraction 0.75 (prediction)."""
    from tilefit.cli.memory_view import render_comparison

    common = dict(mem_fraction=0.75, context_length=202752, max_running_requests=512)
    plans = {
        "EP8 (--tp 8 --ep 8)": plan("glm-5-nvfp4", "rtx-pro-6000", "sglang", Parallel(tp=8, ep=8), **common),
        "TP8 (--tp 8)": plan("glm-5-nvfp4", "rtx-pro-6000", "sglang", Parallel(tp=8), **common),
        "EP8 + DP-attention 8": plan("glm-5-nvfp4", "rtx-pro-6000", "sglang",
                                     Parallel(tp=8, ep=8, dp=8, dp_attention=True), **common),
    }
    check_golden("memory_seed_glm5_nvfp4_rtx_pro_6000.txt", render_comparison(plans) + "\n")
    ep8, tp8 = plans["EP8 (--tp 8 --ep 8)"], plans["TP8 (--tp 8)"]
    assert ep8.verdict == tp8.verdict == "GO"
    assert ep8.kv_tokens == pytest.approx(tp8.kv_tokens, rel=0.01)


def test_inputs_from_a_parsed_launch_command():
    """The launch parser's LaunchSpec (posted on the board: engine, layout, settings) read by attribute."""
    from types import SimpleNamespace

    from tilefit.layout.plan import Layout
    from tilefit.memory.base import from_launch

    settings = SimpleNamespace(mem_fraction=0.75, mem_fraction_kind="static", context_length=202752,
                               max_running_requests=512, kv_cache_dtype="fp8_e4m3", chunked_prefill_size=None,
                               cuda_graph_max_bs=None)
    spec = SimpleNamespace(engine="sglang", layout=Layout(tp=1, ep=8, dp=1), settings=settings)
    parallel, s = from_launch(spec)
    assert parallel == Parallel(tp=8, ep=8) and s.mem_fraction == 0.75 and s.kv_dtype == "fp8_e4m3"
    p = plan_memory(MemoryRequest(load_architecture("glm-5-nvfp4"), get_gpu("rtx-pro-6000"), "sglang", parallel, s))
    assert p.settings.kv_dtype == "fp8" and p.kv_tokens > 0
    vllm = SimpleNamespace(engine="vllm", layout=Layout(tp=1, ep=8, dp=4),
                           settings=SimpleNamespace(**{**vars(settings), "mem_fraction_kind": "static"}))
    parallel, s = from_launch(vllm)
    assert parallel == Parallel(tp=2, dp=4, expert_parallel=True) and s.mem_fraction is None


from hypothesis import given, settings as hsettings, strategies as st  # noqa: E402

PRESETS = ("deepseek-v3", "glm-5-nvfp4", "qwen3-30b-a3b", "gpt-oss-120b", "mixtral-8x7b", "kimi-k2", "glm-4.5-air")


@hsettings(max_examples=60, deadline=None)
@given(model=st.sampled_from(PRESETS), gpu=st.sampled_from(("h100", "h200", "rtx-pro-6000", "b200", "a10")),
       engine=st.sampled_from(("sglang", "vllm")), gpus=st.sampled_from((1, 2, 4, 8)),
       ep=st.sampled_from((1, 2, 4, 8)), mf=st.floats(0.3, 0.98), kv=st.sampled_from(("auto", "bf16", "fp8", "fp4")))
def test_plan_never_crashes_and_more_memory_never_means_fewer_tokens(model, gpu, engine, gpus, ep, mf, kv):
    ep = min(ep, gpus)
    parallel = Parallel.for_engine(engine, gpus, ep)
    try:
        a = plan(model, gpu, engine, parallel, mem_fraction=mf, kv_dtype=kv)
    except UsageError:
        return  # a layout the engine refuses is reported, not crashed on
    b = plan(model, gpu, engine, parallel, mem_fraction=min(1.0, mf + 0.02), kv_dtype=kv)
    assert a.kv_tokens >= 0 and b.kv_tokens >= a.kv_tokens
    assert a.verdict in ("GO", "GO-WITH-WARNINGS", "NO-GO")
    assert (a.verdict == "NO-GO") == bool(a.problems)
    assert a.weight_bytes == sum(as_dict(a)["weights_bytes"].values())


@pytest.mark.parametrize("version, tp, expected", [
    (None, 1, (4096, 48)), ("0.5.23", 4, (4096, 160)), ("0.5.20", 1, (4096, 48)),
    ("0.5.19", 1, (2048, 24)), ("0.5.10", 4, (2048, 80))])
def test_sglang_defaults_for_a_32_gb_gpu_follow_the_release(version, tp, expected):
    """RTX 5090 (32 GB: sglang's 20-35 GiB bracket): 0.5.20 raised the prefill chunk to 4k and the
    decode graphs to batch 48 (tp < 4) or 160; through 0.5.19, 2k and 24 or 80 (memory_hook.py,
    server_args.py of those wheels). Without a version the rules follow 0.5.23."""
    req = MemoryRequest(load_architecture("qwen3-30b-a3b"), get_gpu("rtx-5090"), "sglang",
                        Parallel(tp=tp), Settings(), version)
    s = rules_for("sglang").defaults(req)
    assert (s.chunked_prefill, s.cuda_graph_max_bs) == expected


@pytest.mark.parametrize("gpu, version, seqs, expected", [
    ("b200", None, None, 1024), ("b200", "0.28.0", None, 1024), ("b200", "0.27.1", None, 512),
    ("h100", None, None, 512), ("h100", None, 64, 128), ("b200", None, 300, 600)])
def test_vllm_captures_cuda_graphs_to_the_releases_default(gpu, version, seqs, expected):
    """min(2 x max_num_seqs, 512, max_num_batched_tokens), 1024 instead of 512 on compute
    capability 10.x from 0.28.0 (config/vllm.py of the 0.11.1-0.33.0 wheels)."""
    req = MemoryRequest(load_architecture("qwen3-30b-a3b"), get_gpu(gpu), "vllm", Parallel(tp=1),
                        Settings(max_running_requests=seqs), version)
    assert rules_for("vllm").defaults(req).cuda_graph_max_bs == expected


@pytest.mark.parametrize("given, tokens, expected", [(2048, 1024, 1024), (256, 8192, 256), (None, 300, 300)])
def test_vllm_caps_a_given_capture_size_by_the_batched_tokens(given, tokens, expected):
    """max_cudagraph_capture_size = min(max_num_batched_tokens, it), whether it was given or the
    default (config/vllm.py of the 0.11.1, 0.20.0, 0.28.0 and 0.33.0 wheels)."""
    req = MemoryRequest(load_architecture("qwen3-30b-a3b"), get_gpu("h100"), "vllm", Parallel(tp=1),
                        Settings(cuda_graph_max_bs=given, chunked_prefill=tokens), None)
    assert rules_for("vllm").defaults(req).cuda_graph_max_bs == expected
