"""benchmarks/tune_trace.py reads a trace that a real (fake-target) tuning run wrote: every
request is counted once, and the GPU busy share adds up to the GPU requests' run time."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import tune_trace  # noqa: E402 - benchmarks/ is not a package


def test_summary_of_a_fake_run_trace(cli, tmp_path):
    trace = tmp_path / "trace.jsonl"
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", "1,8",
            "--out", str(tmp_path / "out"), "--trace", str(trace), "--compile-workers", "2")
    assert r.code == 0, r.err
    lines = tune_trace.read(str(trace))
    s = tune_trace.summary(lines)
    assert sum(v["n"] for v in s["ops"].values()) == len(lines)
    assert s["ops"]["gpu:warm"]["n"] == 1 and s["ops"]["compile:warm"]["n"] == 2
    gpu_run = sum(d["run_s"] for d in lines if d["pool"] == "gpu" and d["op"] != "warm")
    busy = sum(p * tune_trace.WINDOW_S / 100 for p in s["gpu_busy_pct"].values())
    assert abs(busy - gpu_run) <= 0.01 * len(s["gpu_busy_pct"]) * tune_trace.WINDOW_S + 1e-6
    assert s["first_gpu_request"]["op"] in ("probe", "run")
    assert s["span_s"] >= max(d["run_s"] for d in lines)
    # Every request a worker answered carries the worker's own time, within the parent's run
    # (pauses and closing lines have none); the summary adds them up per op.
    answered = [d for d in lines if d["op"] not in ("pause", "close")]
    assert answered and all("work_s" in d for d in answered)
    assert all(0 <= d["work_s"] <= d["run_s"] + 1e-3 for d in answered)
    assert not any("work_s" in d for d in lines if d["op"] in ("pause", "close"))
    probes = s["ops"]["gpu:probe"]
    assert probes["work_s"] == round(sum(d["work_s"] for d in lines if d["op"] == "probe"
                                         and d["pool"] == "gpu"), 2)
    assert 0 <= probes["delayed"] <= probes["n"]
