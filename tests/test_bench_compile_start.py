"""benchmarks/bench_compile_start.py on this machine: a real compile worker of tilefit's kernel
(spawned by tune/pools.WorkerPool) warms up and compiles without torch in its process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_one_compile_worker_compiles_without_torch():
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("interpreter mode replaces @triton.jit functions")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_compile_start.py"),
                        "--workers", "1"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["torch_loaded"] == [False]
    assert 0 < out["first_compile_s"] <= out["last_compile_s"] and out["rss_mb"][0] > 0
