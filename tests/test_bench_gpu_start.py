"""benchmarks/bench_gpu_start.py: each scenario starts a spawned process that walks a GPU
worker's warm-up step by step, and reports its steps (or, without CUDA, the step that failed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_three_scenarios_each_report_their_start():
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_gpu_start.py"),
                        "--workers", "1", "--repeats", "1"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(x) for x in r.stdout.strip().splitlines()]
    assert [x["scenario"] for x in lines] == ["alone", "pool", "pool+ceilings"]
    for x in lines:
        if torch.cuda.is_available():
            assert set(x["steps_s"]) == {"import_triton", "import_kernel", "triton_key",
                                         "import_torch", "cuda_init", "first_alloc"}
        else:
            assert "error" in x["steps_s"] and x["ready_after_s"] > 0
