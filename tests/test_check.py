"""`tilefit check`: the Triton and CUTLASS paths, verdicts and exit codes, remedies, bad input."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES

FP8_TENSOR = str(FIXTURES / "configs" / "qwen3-30b-fp8-tensor")


def findings(d, severity=None):
    return [f for f in d["findings"] if severity is None or f["severity"] == severity]


def test_vllm_bf16_default_configs_fit_on_5090(cli):
    r = cli("check", "--model", "qwen3-30b-a3b", "--gpu", "rtx-5090", "--tp", "4", "--engine", "vllm",
            "--backend", "triton", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["verdict"] == "GO-WITH-WARNINGS"
    assert d["checked"]["config_source"] == "engine defaults" and d["checked"]["fail"] == 0
    kinds = {f["kind"] for f in findings(d, "warning")}
    assert "no-tuned-config" in kinds
    fix = [r for f in findings(d, "warning") for r in f["remedies"]]
    assert any("VLLM_TUNED_CONFIG_FOLDER" in r["setting"] for r in fix)


def test_sglang_old_per_tensor_fp8_default_does_not_fit_sm120(cli):
    # sglang < 0.5.15 picks 128x256x128 / 8 warps / 4 stages for per-tensor fp8 at M > E.
    r = cli("check", "--model", FP8_TENSOR, "--gpu", "rtx-5090", "--tp", "2", "--engine", "sglang",
            "--engine-version", "0.5.14", "--json")
    assert r.code == 1
    d = r.json()
    assert d["verdict"] == "NO-GO"
    fatal = findings(d, "fatal")[0]
    assert fatal["kind"] == "default-config-exceeds-smem"
    assert {i["batch"] for i in fatal["items"]} == {256, 1024, 4096}  # M > E = 128 only
    assert all(i["smem_bytes"] > i["limit_bytes"] == 101376 for i in fatal["items"])
    assert any("SGLANG_MOE_CONFIG_DIR" in r["setting"] for r in fatal["remedies"])
    # the same deployment on an H200 fits
    r = cli("check", "--model", FP8_TENSOR, "--gpu", "h200", "--tp", "2", "--engine", "sglang",
            "--engine-version", "0.5.14", "--json")
    assert r.code == 0 and r.json()["verdict"] == "GO-WITH-WARNINGS"


def test_newer_sglang_uses_a_small_fp8_default_on_small_smem_parts(cli):
    r = cli("check", "--model", FP8_TENSOR, "--gpu", "rtx-5090", "--tp", "2", "--engine", "sglang",
            "--engine-version", "0.5.23", "--json")
    assert r.code == 0 and r.json()["checked"]["fail"] == 0


def _write_vllm_file(folder, name, per_batch):
    (folder / name).write_text(json.dumps({"triton_version": "3.6.0", **per_batch}))


def test_tuned_file_in_config_dir_is_judged(cli, tmp_path):
    name = "E=128,N=192,device_name=NVIDIA_GeForce_RTX_5090.json"
    ok = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
          "num_stages": 3}
    _write_vllm_file(tmp_path, name, {"1": ok, "64": ok})
    args = ("check", "--model", "qwen3-30b-a3b", "--gpu", "rtx-5090", "--tp", "4", "--engine", "vllm",
            "--backend", "triton", "--config-dir", str(tmp_path), "--json")
    d = cli(*args).json()
    assert d["verdict"] == "GO" and d["checked"]["config_source"].startswith("tuned file")
    # A file tuned on an H100 and copied over: its big configs kill the server on sm120.
    big = dict(ok, BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=128, num_stages=4)
    _write_vllm_file(tmp_path, name, {"1": ok, "4096": big})
    r = cli(*args)
    assert r.code == 1
    fatal = findings(r.json(), "fatal")[0]
    assert fatal["kind"] == "tuned-config-exceeds-smem" and [i["batch"] for i in fatal["items"]] == [4096]


@pytest.mark.parametrize("args, needle", [
    (["--model", "glm5", "--gpu", "h200", "--engine", "vllm"], "did you mean"),
    (["--model", "glm-5", "--gpu", "h2000", "--engine", "vllm"], "tilefit gpus"),
    (["--model", "glm-5", "--gpu", "h200", "--engine", "tgi"], "invalid choice"),
    (["--model", "glm-5", "--gpu", "h200", "--engine", "vllm", "--ep", "3"], "does not divide"),
    (["--model", "glm-5", "--gpu", "h200", "--engine", "vllm", "--engine-version", "banana"], "version"),
    (["--model", "glm-5", "--gpu", "h200", "--engine", "vllm", "--backend", "triton", "--config-dir",
      "/nonexistent"], "not a folder"),
])
def test_bad_input(cli, args, needle):
    r = cli("check", *args)
    assert r.code == 2 and needle in r.err and "Traceback" not in r.err


def _failing(d):
    fs = [f for f in d["findings"] if f["kind"] == "tactics-cannot-launch"]
    return {(i["gemm"], "x".join(map(str, i["config"]["tile"])) + " " + i["config"]["fusion"]): i
            for f in fs for i in f["items"]}, fs


def test_seed_case_glm5_nvfp4_rtx_pro_6000_ep8_and_tp8(cli):
    ep8 = cli("check", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--ep", "8", "--engine", "sglang",
              "--json")
    assert ep8.code == 0, ep8.err  # non-fatal: FlashInfer's autotuner skips the failing tactics
    d = ep8.json()
    assert d["verdict"] == "GO-WITH-WARNINGS" and d["backend"]["family"] == "flashinfer-cutlass"
    failing, fs = _failing(d)
    assert fs[0]["severity"] == "warning"
    finalize = {t for (g, t), i in failing.items() if i["status"] == "exceeds-smem"}
    assert {"128x256x128 finalize", "256x128x128 finalize"} <= finalize
    for (g, t), i in failing.items():
        if i["status"] == "exceeds-smem":
            assert g == "gemm2" and i["smem_bytes"] == 102400 and i["limit_bytes"] == 101376 and i["stages"] == 3
    blocklist = [r for r in fs[0]["remedies"] if r["kind"] == "blocklist"][0]
    assert "invalid_tactics" in blocklist["setting"]
    gemms = {g["name"]: (g["n"], g["k"]) for g in d["gemms"]}
    assert gemms["gemm1"] == (4096, 6144) and gemms["gemm2"] == (6144, 2048)

    tp8 = cli("check", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--tp", "8", "--engine", "sglang",
              "--json").json()
    gemms = {g["name"]: (g["n"], g["k"]) for g in tp8["gemms"]}
    assert gemms["gemm1"] == (512, 6144) and gemms["gemm2"] == (6144, 256)
    assert set(_failing(tp8)[0]) == set(failing)  # footprints do not depend on N


def test_sglang_version_decides_whether_finalize_tactics_run(cli):
    base = ("check", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--ep", "8", "--engine", "sglang", "--json")
    old = cli(*base, "--engine-version", "0.5.19").json()
    assert any(t.endswith(" finalize") for _, t in _failing(old)[0])
    new = cli(*base, "--engine-version", "0.5.23").json()
    assert not any(t.endswith(" finalize") for _, t in _failing(new)[0])


def test_vllm_bf16_on_sm120_runs_uncatalogued_cutlass_tactics_and_says_so(cli):
    # vLLM >= 0.21 sends bf16 experts on SM120 to FlashInfer CUTLASS; tilefit has no bf16 SM120 list.
    r = cli("check", "--model", "qwen3-30b-a3b", "--gpu", "rtx-5090", "--tp", "4", "--engine", "vllm", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["backend"]["family"] == "flashinfer-cutlass"
    assert [f["kind"] for f in findings(d, "warning")] == ["not-modelled"]
    assert d["verdict"] == "GO-WITH-WARNINGS"


def test_off_grid_engine_defaults_are_marked_extrapolated(cli):
    # sglang < 0.5.15 with bf16 at M > E defaults to BLOCK_SIZE_K=32, outside the tuners' grid.
    d = cli("check", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "2", "--engine", "sglang",
            "--engine-version", "0.5.10", "--json").json()
    extra = [f for f in d["findings"] if f["kind"] == "extrapolated"]
    assert extra and all("x32 " in line for line in extra[0]["details"])


def test_check_human_output_starts_with_the_verdict(cli):
    r = cli("check", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--ep", "8", "--engine", "sglang",
            "--engine-version", "0.5.19")
    first, second = r.out.splitlines()[:2]
    # A short headline (verdict and deployment), the worst finding on the line below it.
    assert first == "GO-WITH-WARNINGS: glm-5-nvfp4 on 8 x rtx-pro-6000 (sm120), EP8, sglang 0.5.19"
    assert second.startswith("    ") and "cannot launch" in second
    assert "FLASHINFER_TACTICS_BLOCKLIST" in r.out and "102,400 B > 101,376 B" in r.out


def test_weights_that_cannot_fit_are_fatal_and_tight_ones_warn(cli):
    # vLLM >= 0.24 runs block FP8 on SM120 with DeepGEMM, which tilefit does not model: Triton's path.
    d = cli("check", "--model", "glm-5-fp8", "--gpu", "rtx-5090", "--ep", "8", "--engine", "vllm",
            "--backend", "triton", "--json").json()
    assert d["verdict"] == "NO-GO" and findings(d, "fatal")[0]["kind"] == "memory-does-not-fit"
    # DeepSeek-V3 FP8 on 8 x H100 80GB: the experts alone are 82 GB of the 85.9 GB (80 GiB) each GPU
    # has; with attention and embeddings nothing is left for the KV cache (the memory plan).
    d = cli("check", "--model", "deepseek-v3", "--gpu", "h100", "--tp", "8", "--engine", "vllm", "--json").json()
    assert any(f["kind"] == "memory-does-not-fit" for f in findings(d, "fatal"))
    assert d["memory"]["kv"]["tokens"] == 0
    d = cli("check", "--model", "qwen3-30b-a3b", "--gpu", "rtx-5090", "--tp", "4", "--engine", "vllm",
            "--backend", "triton", "--json").json()
    assert not any(f["kind"].startswith("memory-") for f in d["findings"])  # 15 GiB of 32 GiB
    # An engine without memory rules (TensorRT-LLM) keeps the expert-weights-only finding.
    d = cli("check", "--model", "glm-5-nvfp4", "--gpu", "rtx-5090", "--ep", "4", "--engine", "trtllm", "--json").json()
    assert d["memory"] is None and any(f["kind"] == "weights-exceed-memory" for f in findings(d, "fatal"))


def test_quick_start_check_golden(cli):
    from conftest import check_golden

    r = cli("check", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--ep", "8", "--engine", "sglang")
    assert r.code == 0
    check_golden("check_glm5_nvfp4_rtx_pro_6000_ep8.txt", r.out)


def test_engine_environment_switches_fused_finalize_back_on(cli):
    base = ("check", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--ep", "8", "--engine", "sglang",
            "--engine-version", "0.5.23", "--json")
    assert not _failing(cli(*base).json())[0]
    on = cli(*base, "--env", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=1").json()
    assert {t for _, t in _failing(on)[0]} == {"128x256x128 finalize", "256x128x128 finalize"}
    assert cli(*base, "--env", "NOEQUALS").code == 2


def test_check_memory_section_reads_the_launch_command(cli):
    # The seed deployment's command: check's memory plan takes its --mem-fraction-static 0.75 and
    # layout, and finds the same KV pool as `plan --memory` (tests/golden/memory_seed_*.txt).
    r = cli("check", "--gpu", "rtx-pro-6000", "--json", "--", "python", "-m", "sglang.launch_server",
            "--model-path", "nvidia/GLM-5-NVFP4", "--tp", "8", "--ep", "8", "--mem-fraction-static", "0.75",
            "--quantization", "modelopt_fp4")
    d = r.json()
    assert d["memory"]["kv"]["tokens"] == 248_064 and d["memory"]["settings"]["mem_fraction"] == 0.75
    assert any(f["kind"] == "memory" for f in findings(d, "info"))
    # A flag given to check wins over the command's.
    d = cli("check", "--gpu", "rtx-pro-6000", "--json", "--mem-fraction", "0.8", "--", "python", "-m",
            "sglang.launch_server", "--model-path", "nvidia/GLM-5-NVFP4", "--tp", "8", "--ep", "8",
            "--mem-fraction-static", "0.75", "--quantization", "modelopt_fp4").json()
    assert d["memory"]["kv"]["tokens"] > 248_064


def test_a_model_the_memory_plan_does_not_model_still_gets_its_moe_verdict(cli):
    """Qwen3-Next (hybrid linear attention) on B200 under vLLM (flashinfer-ai/flashinfer#2219's
    deployment): the memory plan does not model its state cache, which used to end check with exit 2;
    the kernel verdict stands, and the memory section judges the expert weights and says why."""
    r = cli("check", "--model", "qwen3-next-80b", "--gpu", "h200", "--engine", "vllm", "--tp", "4", "--json")
    assert r.code in (0, 1), r.err
    memory = [f for f in r.json()["findings"] if f["kind"].startswith(("memory", "weights"))]
    assert memory and "expert weights need" in memory[0]["title"]
    assert "not planned" in memory[0]["title"] and "hybrid linear-attention" in memory[0]["title"]


def test_a_whole_script_as_one_argument_is_read_as_shell_text(cli):
    """`tilefit check --gpu G -- "$(cat serve.sh)"`: the command from flashinfer-ai/flashinfer#2219,
    its VAR=value lines and continuations in one word."""
    script = ("VLLM_USE_FLASHINFER_MOE_FP16=1 \\\nVLLM_ATTENTION_BACKEND=FLASHINFER \\\n"
              "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct \\\n    -tp 4 \\\n    --enable-expert-parallel \\\n"
              "    --no-enable-prefix-caching\n")
    r = cli("check", "--gpu", "h200", "--model", "qwen3-next-80b", "--engine-version", "0.19.1", "--json",
            "--", script)
    assert r.code in (0, 1), r.err
    d = r.json()
    assert d["layout"]["ep"] == 4 and d["backend"]["engine_backend"] == "FLASHINFER_CUTLASS"
