"""`tilefit plan`, `gpus`, `models`: output shape, golden text, and bad input -> exit 2, one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, check_golden


def test_plan_json_glm5_ep8(cli):
    r = cli("plan", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--ep", "8", "--batch", "1,64,1024", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["model"] == {**d["model"], "name": "glm-5", "hidden_size": 6144, "expert_width": 2048,
                          "num_experts": 256, "top_k": 8, "moe_layers": 75, "weight_dtype": "bf16"}
    assert d["layout"]["tp"] == 1 and d["layout"]["ep"] == 8 and d["local_experts"] == 32
    g = {x["name"]: x for x in d["gemms"]}
    assert (g["gemm1"]["n"], g["gemm1"]["k"], g["gemm1"]["local_experts"]) == (4096, 6144, 32)
    assert (g["gemm2"]["n"], g["gemm2"]["k"]) == (6144, 2048)
    assert [b["batch"] for b in d["batches"]] == [1, 64, 1024]
    for b in d["batches"]:
        assert {"assignments_per_gpu_mean", "tokens_per_expert_mean", "tokens_per_expert_p99"} <= set(b)


def test_plan_json_glm5_tp8(cli):
    d = cli("plan", "--model", "glm-5", "--tp", "8", "--json").json()
    g = {x["name"]: x for x in d["gemms"]}
    assert d["local_experts"] == 256
    assert (g["gemm1"]["n"], g["gemm1"]["k"]) == (512, 6144) and (g["gemm2"]["n"], g["gemm2"]["k"]) == (6144, 256)


def test_plan_human_golden(cli):
    r = cli("plan", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--ep", "8")
    assert r.code == 0
    check_golden("plan_glm5_ep8.txt", r.out)
    r = cli("plan", "--model", "qwen3-30b-a3b", "--gpu", "h200", "--tp", "2", "--batch", "16,4096")
    check_golden("plan_qwen3_30b_tp2.txt", r.out)


def test_gpus_and_models_listings(cli):
    r = cli("gpus")
    assert r.code == 0 and "rtx-pro-6000" in r.out and "101,376" in r.out
    d = cli("gpus", "--json").json()
    assert {g["key"] for g in d["gpus"]} >= {"h200", "rtx-5090"} and len(d["archs"]) >= 8
    r = cli("models")
    assert r.code == 0 and "glm-5-nvfp4" in r.out
    assert any(m["name"] == "kimi-k2" for m in cli("models", "--json").json())


@pytest.mark.parametrize("args, needle", [
    (["plan", "--model", "glm5"], "did you mean 'glm-5'"),
    (["plan", "--model", "glm-5", "--gpu", "rtx5900"], "tilefit gpus"),
    (["plan", "--model", "glm-5", "--tp", "3"], "does not divide"),
    (["plan", "--model", "glm-5", "--ep", "7"], "does not divide"),
    (["plan", "--model", "glm-5", "--ep", "0"], "positive integer"),
    (["plan", "--model", "glm-5", "--tp", "-2"], "positive integer"),
    (["plan", "--model", "glm-5", "--batch", "1,x"], "positive integer"),
    (["plan", "--model", "glm-5", "--batch", "20000000"], "batch sizes"),
    (["plan", "--model", "glm-5", "--batch", "2000000000"], "positive integer up to 1,000,000,000"),
    (["plan", "--model", "/nonexistent/config.json"], "no such file"),
    (["plan"], "--model"),
])
def test_bad_input_exits_2_with_one_line(cli, args, needle):
    r = cli(*args)
    assert r.code == 2
    assert needle in r.err
    assert "Traceback" not in r.err and r.err.count("\n") == 1


def test_non_moe_and_non_json_files(cli, tmp_path):
    from conftest import FIXTURES

    r = cli("plan", "--model", str(FIXTURES / "configs" / "dense"))
    assert r.code == 2 and "not an MoE model" in r.err
    p = tmp_path / "config.json"
    p.write_text("not json at all")
    r = cli("plan", "--model", str(p))
    assert r.code == 2 and "not valid JSON" in r.err


def test_console_script_runs_in_a_fresh_process():
    r = subprocess.run([sys.executable, "-m", "tilefit.cli.main", "plan", "--model", "glm-5", "--ep", "8",
                        "--json"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert '"local_experts": 32' in r.stdout
