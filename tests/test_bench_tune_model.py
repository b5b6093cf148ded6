"""benchmarks/bench_tune.py --model: another catalog model's per-GPU GEMMs, from the planner;
GLM-5's shapes (every recorded result) unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tune_results  # noqa: E402 - benchmarks/ is not a package


def _bench(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks"),
                                                        os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_tune.py"), *args,
                           "--work", str(tmp / "work"), "--out-dir", str(tmp / "out")],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("layout", ["ep8", "tp8"])
def test_glm5_shapes_are_the_recorded_results(layout):
    recorded = json.loads((ROOT / "benchmarks" / "results" / "tune_v9" /
                           f"{layout}_bf16_r9a.json").read_text())
    assert tune_results.layer_shape(layout, "bf16").as_dict() == recorded["shape"]
    assert "model" not in recorded  # read as GLM-5's (tune_results.MODEL)


def test_another_model_is_tuned_on_its_own_shapes(tmp_path):
    r = _bench("--target", "fake", "--model", "deepseek-v3", "--layouts", "ep8", "--no-sweep",
               "--batches", "1,64", "--compile-workers", "2", "--tag", "t", tmp=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    # No --dtype: DeepSeek-V3's weights are 128x128 block-scaled fp8, tuned as such.
    d = json.loads((tmp_path / "out" / "tune_deepseek-v3_ep8_fp8-block_t.json").read_text())
    assert d["model"] == "deepseek-v3" and d["dtype"] == "fp8-block"
    # DeepSeek-V3: 256 experts of width 2048, hidden 7168, top-8; EP8 keeps 32 whole experts.
    assert (d["shape"]["experts"], d["shape"]["hidden"], d["shape"]["width"],
            d["shape"]["total_experts"]) == (32, 7168, 2048, 256)
    assert sorted({row["batch"] for row in d["rows"]}) == [1, 64]
    assert "## deepseek-v3 EP8 fp8-block" in r.stdout


def test_a_model_without_a_kernel_for_its_weights_needs_a_dtype(tmp_path):
    r = _bench("--target", "fake", "--model", "glm-5-nvfp4", "--layouts", "ep8", "--no-sweep",
               tmp=tmp_path)
    assert r.returncode == 2 and "--model glm-5-nvfp4" in r.stderr and "nvfp4" in r.stderr


def test_a_layout_the_weights_cannot_take_is_refused_before_any_gpu_work(tmp_path):
    r = _bench("--target", "fake", "--model", "qwen3-235b-a22b-fp8", "--layouts", "tp8",
               "--dtype", "fp8-block", "--no-sweep", tmp=tmp_path)
    assert r.returncode == 2
    assert "expert width of 192, not a multiple of the fp8-block scale block 128" in r.stderr
    assert not (tmp_path / "work").exists()


def test_against_without_the_models_recorded_sweep_is_refused_before_any_run(tmp_path):
    r = _bench("--target", "fake", "--model", "deepseek-v3", "--layouts", "ep8", "--against",
               str(ROOT / "benchmarks" / "results" / "tune_v3_journals"), tmp=tmp_path)
    assert r.returncode == 2
    assert "no recorded sweep deepseek-v3_ep8_fp8_exhaustive.jsonl.gz" in r.stderr
    assert not (tmp_path / "work").exists()
