"""`tilefit check`: the Triton and CUTLASS paths, verdicts and exit codes, remedies, bad input."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES

FP8_TENSOR = str(FIXTURES / "configs" / "qwen3-30b-fp8-tensor")


def findings(d, severity=None):
    return [f for f in d["findings"] if severity is None or f["severity"] == severity]


def test_vllm_bf16_default_configs_fit_on_5090(cli):
    r = cli("check", "--model", "qwen3-30b-a3b", "--gpu", "rtx-5090", "--tp", "2", "--engine", "vllm",
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
    name = "E=128,N=384,device_name=NVIDIA_GeForce_RTX_5090.json"
    ok = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
          "num_stages": 3}
    _write_vllm_file(tmp_path, name, {"1": ok, "64": ok})
    args = ("check", "--model", "qwen3-30b-a3b", "--gpu", "rtx-5090", "--tp", "2", "--engine", "vllm",
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
