"""`tilefit check|plan -- <launch command>`: the engine's own command line read as the engine reads
it, its first line saying how many GPUs and which layout; tilefit's flags with --engine mean what
that engine means."""

import pytest

SGLANG = ("--", "python", "-m", "sglang.launch_server", "--model-path", "zai-org/GLM-5", "--tp", "8",
          "--ep", "8", "--host", "0.0.0.0", "--frobnicate")


def test_plan_from_a_sglang_command_is_eight_gpus_with_32_experts(cli):
    r = cli("plan", *SGLANG)
    assert r.code == 0, r.err
    first = r.out.splitlines()[0]
    assert first.startswith("8 GPUs: sglang builds MoE EP8 on 8 GPUs")
    assert "32 local experts per GPU" in r.out
    assert "--frobnicate" in r.out and "--host" in r.out  # unknown and ignored flags are named
    d = cli("plan", "--json", *SGLANG).json()
    assert d["launch"]["gpus"] == 8 and d["local_experts"] == 32 and d["launch"]["unknown"] == ["--frobnicate"]


def test_plan_engine_flags_take_the_engine_meaning(cli):
    d = cli("plan", "--model", "glm-5", "--engine", "sglang", "--tp", "8", "--ep", "8", "--json").json()
    assert d["layout"]["gpus"] == 8 and d["local_experts"] == 32
    v = cli("plan", "--model", "glm-5", "--engine", "vllm", "--tp", "8", "--enable-expert-parallel",
            "--json").json()
    assert (v["layout"]["tp"], v["layout"]["ep"]) == (1, 8)


def test_check_from_a_vllm_command_with_env(cli):
    r = cli("check", "--gpu", "rtx-pro-6000", "--engine-version", "0.19.1", "--json", "--",
            "VLLM_USE_FLASHINFER_MOE_FP16=1", "vllm", "serve", "zai-org/GLM-5", "-tp", "8",
            "--enable-expert-parallel")
    assert r.code in (0, 1), r.err
    d = r.json()
    assert d["backend"]["engine_backend"] == "FLASHINFER_CUTLASS"  # the env switch read from the command
    assert d["launch"]["env"] == {"VLLM_USE_FLASHINFER_MOE_FP16": "1"}


def test_check_says_when_the_command_needs_more_gpus(cli):
    r = cli("check", "--gpu", "h200", "--gpus", "8", "--", "python", "-m", "sglang.launch_server",
            "--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8", "--dp", "2")
    assert r.out.splitlines()[0].startswith("GO") and " on 16 x h200" in r.out.splitlines()[0]
    assert "needs 16 GPUs, more than the 8 of --gpus" in r.out


@pytest.mark.parametrize("args,needle", [
    (("check", "--gpu", "h200"), "give --engine"),
    (("check", "--gpu", "h200", "--engine", "vllm", "--", "trtllm-serve", "m"), "drop --engine"),
    (("plan", "--", "echo", "hi"), "no sglang, vLLM or TensorRT-LLM server command"),
])
def test_bad_launch_usage_is_one_line_and_exit_2(cli, args, needle):
    r = cli(*args)
    assert r.code == 2 and needle in r.err and "Traceback" not in r.err


def test_trtllm_yaml_turns_fused_finalize_off(cli, tmp_path):
    # moe_config.disable_finalize_fusion in the LLM API options YAML reaches the fused-finalize rule:
    # no FINALIZE tactic is profiled, so none of the SM120 FINALIZE overflows is reported.
    opts = tmp_path / "opts.yml"
    opts.write_text("moe_config:\n  backend: CUTLASS\n  disable_finalize_fusion: true\n")
    d = cli("check", "--gpu", "rtx-pro-6000", "--model", "glm-5-nvfp4", "--json", "--", "trtllm-serve",
            "nvidia/GLM-5-NVFP4", "--tp_size", "8", "--ep_size", "8", "--config", str(opts)).json()
    assert d["checked"]["tactics"] == 48 - 16
    assert not [f for f in d["findings"] if f["kind"] == "tactics-cannot-launch"]
