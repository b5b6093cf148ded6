"""benchmarks/bench_ceilings.py on a GPU: every stream reports a rate, and a read-only stream
moves its bytes at least as fast as the copy that reads and writes them, within 10%."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.gpu
def test_every_stream_reports_a_rate():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_ceilings.py"),
                        "--repeats", "1"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rates = {x["stream"]: x["gbps_median"] for x in map(json.loads, r.stdout.strip().splitlines())}
    assert len(rates) == 12 and all(v > 0 for v in rates.values())
    best_read = max(v for k, v in rates.items() if k.startswith("triton read"))
    assert best_read >= 0.9 * rates["copy (ceilings.py)"]
