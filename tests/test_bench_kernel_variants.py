"""benchmarks/bench_kernel_variants.py (a GPU measurement script): a step name it does not know is
refused with one line and exit 2 before anything touches the GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_an_unknown_step_is_one_line_and_exit_2(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    env = {**os.environ, "OUT": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks")])}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_kernel_variants.py"),
                           "small", "smal"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "bench_kernel_variants: unknown step(s) smal; choose from check, small, small2, large, "
        "draws, persistent, splitk"]
