"""sglang's per-model SM100 choice: with --moe-runner-backend auto and no --moe-a2a-backend it runs
flashinfer_trtllm for the DeepSeek-V3, GLM-4 and Qwen3 families on SM100/SM103 (CC 10.x), and that
runner turns the shared-expert fusion off. Read from the sglang wheels: 0.5.23
arg_groups/overrides.py l.745-832 (_deepseek_moe_quant_resolution), model_overrides/glm4_moe.py,
model_overrides/qwen3_moe.py, overrides.py l.1528-1574 (_moe_runner_fusion_disable); the history
from server_args.py 0.5.3.post2-0.5.14 (backends.toml sources sgl_sm100_*)."""

from __future__ import annotations

import pytest

from tilefit.engines import get_engine
from tilefit.engines.registry import shared_fusion_of
from tilefit.errors import UsageError
from tilefit.hw.catalog import get_gpu
from tilefit.layout.plan import Layout
from tilefit.models import load_model

DSV3, GLM5, DSV32 = "DeepseekV3ForCausalLM", "GlmMoeDsaForCausalLM", "DeepseekV32ForCausalLM"
GLM4, QWEN3 = "Glm4MoeForCausalLM", "Qwen3MoeForCausalLM"
# https://github.com/sgl-project/sglang/pull/13548 ("Fix DeepSeek V3 MTP on B200"): the server command.
PR13548 = ("python3", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3.1",
           "--trust-remote-code", "--tp", "8", "--speculative-algorithm", "EAGLE",
           "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
           "--speculative-num-draft-tokens", "4", "--mem-frac", "0.7")
# https://github.com/sgl-project/sglang/pull/18388: the same model "--moe-runner-backend=flashinfer_cutlass
# # and triton, cutlass"; its Triton leg.
PR18388_TRITON = ("python3", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3.1",
                  "--trust-remote-code", "--tp", "8", "--moe-runner-backend=triton")


def _choice(dtype, arch, architecture, **kw):
    """The engine_backend sglang's rules give, or 'flashinfer_trtllm' where they say tilefit does not
    model it (the UsageError must name it and the way back to Triton)."""
    try:
        return get_engine("sglang").backend(dtype, arch, architecture=architecture, **kw).engine_backend
    except UsageError as e:
        assert "flashinfer_trtllm" in str(e) and "--moe-runner-backend triton" in str(e), e
        return "flashinfer_trtllm"


@pytest.mark.parametrize("arch", ["sm100", "sm103"])
def test_deepseek_fp8_on_sm100_is_flashinfer_trtllm(arch):
    for dtype in ("fp8-block", "fp8"):
        assert _choice(dtype, arch, DSV3) == "flashinfer_trtllm"
    assert _choice("fp8-block", "sm90", DSV3) == "triton"
    assert _choice("fp8-block", "sm120", DSV3) == "triton"
    assert _choice("fp8-block", arch, None) == "triton"  # no architecture known: no per-model rule
    assert _choice("bf16", arch, "MixtralForCausalLM") == "triton"


@pytest.mark.parametrize("architecture,dtype,last_without,first_with", [
    (DSV3, "fp8-block", "0.5.4", "0.5.5"),  # 0.5.3.post2-0.5.4: modelopt_fp4 only
    (GLM5, "fp8-block", "0.5.8", "0.5.9"),  # added to the DeepSeek list in 0.5.9
    (DSV32, "fp8-block", "0.5.11", "0.5.12"),
    (DSV3, "bf16", "0.5.11", "0.5.12"),  # 0.5.11 keeps a checkpoint without fp8 weights bf16
    (GLM4, "bf16", "0.5.14", "0.5.15"),  # {"modelopt_fp4", None} from 0.5.15
    (QWEN3, "fp8-block", "0.5.5", "0.5.6"),
    (QWEN3, "bf16", "0.5.7", "0.5.8"),
    ("Qwen3NextForCausalLM", "bf16", "0.5.9", "0.5.10"),
])
def test_first_version_with_the_rule(architecture, dtype, last_without, first_with):
    assert _choice(dtype, "sm100", architecture, version=last_without) == "triton"
    assert _choice(dtype, "sm100", architecture, version=first_with) == "flashinfer_trtllm"
    assert _choice(dtype, "sm100", architecture, version="0.5.23") == "flashinfer_trtllm"


def test_versions_where_the_rule_changed():
    # 0.5.5-0.5.10 set --quantization fp8 for a DeepseekV3 checkpoint without a quantization_config.
    assert _choice("bf16", "sm100", DSV3, version="0.5.10") == "flashinfer_trtllm"
    assert _choice("bf16", "sm100", DSV3, version="0.5.5") == "flashinfer_trtllm"
    # LongCat joined the DeepSeek list in 0.5.16 and is kept off trtllm-gen from 0.5.17.
    assert _choice("fp8-block", "sm100", "LongcatFlashForCausalLM", version="0.5.16") == "flashinfer_trtllm"
    assert _choice("fp8-block", "sm100", "LongcatFlashForCausalLM", version="0.5.17") == "triton"
    # GLM-4.x with FP8 experts keeps auto: only modelopt_fp4 and unquantized move.
    assert _choice("fp8-block", "sm100", GLM4) == "triton"


def test_launch_flags_that_keep_auto_off_the_rule():
    for flags in ({"moe_backend": "triton"}, {"quantization": "w8a8_fp8"}):
        assert _choice("fp8-block", "sm100", DSV3, flags=flags) == "triton", flags
    # A DeepEP all-to-all keeps auto off flashinfer_trtllm too, but on DeepGEMM, not Triton
    # (tests/test_sglang_deepep.py).
    with pytest.raises(UsageError, match="DeepGEMM"):
        get_engine("sglang").backend("fp8-block", "sm100", architecture=DSV3,
                                     flags={"moe_a2a_backend": "deepep"})
    for flags in ({}, {"moe_backend": "auto"}, {"moe_a2a_backend": "none"}, {"quantization": "fp8"}):
        assert _choice("fp8-block", "sm100", DSV3, flags=flags) == "flashinfer_trtllm", flags
    # Unquantized: any --quantization on the command line leaves the rule (it reads None).
    assert _choice("bf16", "sm100", GLM4, flags={"quantization": "fp8"}) == "triton"


def test_check_says_flashinfer_trtllm_and_the_way_back_to_triton(cli):
    r = cli("check", "--model", "deepseek-v3", "--gpu", "b200", "--tp", "8", "--engine", "sglang")
    assert r.code == 2 and "Traceback" not in r.err
    assert "flashinfer_trtllm" in r.err and "--moe-runner-backend triton" in r.err
    assert "--backend triton" in r.err
    r = cli("check", "--model", "deepseek-v3", "--gpu", "b200", "--json", "--", *PR13548)
    assert r.code == 2 and "flashinfer_trtllm" in r.err
    d = cli("check", "--model", "deepseek-v3", "--gpu", "b200", "--tp", "8", "--engine", "sglang",
            "--engine-version", "0.5.4", "--json").json()
    assert d["backend"]["engine_backend"] == "triton"


def test_triton_runner_keeps_triton_and_the_fusion(cli):
    r = cli("check", "--model", "deepseek-v3", "--gpu", "b200", "--json", "--", *PR18388_TRITON)
    assert r.code in (0, 1), r.err
    d = r.json()
    assert d["backend"]["engine_backend"] == "triton" and d["checked"]["E"] == 257
    d = cli("check", "--model", "deepseek-v3", "--gpu", "b200", "--tp", "8", "--engine", "sglang",
            "--backend", "triton", "--json").json()
    assert d["checked"]["E"] == 257 and any(f["kind"] == "shared-experts-fused" for f in d["findings"])


def test_no_shared_expert_fusion_under_flashinfer_trtllm(cli):
    model, engine = load_model("deepseek-v3"), get_engine("sglang")
    b200, h200 = get_gpu("b200").arch, get_gpu("h200").arch
    assert shared_fusion_of(engine, model, Layout(tp=8), b200).experts == 0
    assert shared_fusion_of(engine, model, Layout(tp=8), b200, version="0.5.4").experts == 1
    assert shared_fusion_of(engine, model, Layout(tp=8), b200, flags={"moe_backend": "triton"}).experts == 1
    assert shared_fusion_of(engine, model, Layout(tp=8), h200).experts == 1
    assert shared_fusion_of(engine, model, Layout(tp=8), b200, runner="flashinfer_trtllm").experts == 0
    r = cli("plan", "--model", "deepseek-v3", "--tp", "8", "--engine", "sglang", "--gpu", "b200", "--json")
    assert r.code == 0 and r.json()["local_experts"] == 256 and "shared_experts_fused" not in r.json()
    glm45 = load_model("glm-4.5")
    assert shared_fusion_of(engine, glm45, Layout(tp=8), b200).experts == 0
    assert shared_fusion_of(engine, glm45, Layout(tp=8), b200, version="0.5.14").experts == 1


def test_compare_on_b200_keeps_the_shared_expert_apart(cli):
    d = cli("compare", "--model", "deepseek-v3", "--gpu", "b200", "--gpus", "8", "--batch", "256",
            "--engine", "sglang", "--json").json()
    tp8 = [r for r in d["rows"] if r["layout"] == "TP8"][0]
    assert len(tp8["gemms"]) == 4  # routed and shared GEMMs apart: flashinfer_trtllm does not fuse
