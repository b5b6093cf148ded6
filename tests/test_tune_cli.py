"""`tilefit tune` end to end on the CPU (fake and replay targets), and its usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tilefit.cli import tune_cmd
from tilefit.tune.journal import read_entries
from tilefit.tune.targets.base import MOE_SPACE
from tilefit.tune.targets.base import TuneShape
from tilefit.tune.targets.fake import FakeTarget
from tilefit.tune.targets.replay import record

FAST = ("--compile-workers", "2", "--compile-timeout", "20", "--run-timeout", "20")


def test_fake_run_json_and_files(cli, tmp_path):
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", "1,64",
            "--out", str(tmp_path), "--json", "--exhaustive-at", "64", *FAST)
    assert r.code == 0, r.err
    data = r.json()
    for row in data["rows"]:
        if row["batch"] == 64:  # the whole space, swept in the same run
            assert row["exhaustive_trials"] == row["space"] - row["prefiltered"]
            assert row["exhaustive_us"] <= row["time_us"] <= 1.02 * row["exhaustive_us"]
        else:
            assert row["exhaustive_us"] is None
    assert [(row["job"], row["batch"]) for row in data["rows"]] == \
        [("gemm1", 1), ("gemm1", 64), ("gemm2", 1), ("gemm2", 64)]
    for row in data["rows"]:
        assert row["config"] and row["time_us"] > 0 and 0 < row["pct_of_floor"] <= 100
        # 8% of the fitting space at the first batch size, 4.5% once a neighbour's winner seeds it
        cap = 0.08 if row["batch"] == 1 else 0.045
        assert row["trials"] <= cap * (row["space"] - row["prefiltered"])
    (path,) = data["files"]
    stored = json.loads(open(path).read())
    assert stored["shape"]["experts"] == 32 and stored["shape"]["width"] == 2048
    assert stored["gemm2"]["64"] == data["rows"][3]["config_dict"]
    assert (tmp_path / "tune_summary.json").exists()
    # Every measurement is in the journal; a second run needs --resume.
    assert sum(1 for e in read_entries(tmp_path / "journal.jsonl", MOE_SPACE.from_dict) if e.batch == 64) >= 2 * 16
    again = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", "1,64",
                "--out", str(tmp_path), *FAST)
    assert again.code == 2 and "--resume" in again.err
    resumed = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", "1,64",
                  "--out", str(tmp_path), "--resume", "--json", *FAST)
    assert resumed.code == 0
    assert [row["config"] for row in resumed.json()["rows"]] == [row["config"] for row in data["rows"]]
    assert resumed.json()["resumed_entries"] > 0


def test_replay_run_finds_the_recorded_best(cli, tmp_path):
    # GLM-5 TP8 on one GPU: all 256 experts, width 2048/8 = 256.
    layer = TuneShape("gemm1", 256, 6144, 256, 8, "bf16", 256)
    fake = FakeTarget(seed=5, grid="distinct")
    rec = record(fake, [layer.with_gemm("gemm1"), layer.with_gemm("gemm2")], [16], tmp_path / "rec.jsonl")
    r = cli("tune", "--model", "glm-5", "--tp", "8", "--replay", str(rec), "--batches", "16",
            "--strategy", "exhaustive", "--out", str(tmp_path / "out"), "--json", *FAST)
    assert r.code == 0, r.err
    rows = r.json()["rows"]
    for row, gemm in zip(rows, ("gemm1", "gemm2")):
        shape = layer.with_gemm(gemm)
        best = min(fake.time_us(c, shape, 16) for c in fake.space(shape) if fake.fit_reason(c, shape) is None)
        assert row["time_us"] == pytest.approx(best)


def test_no_gpu_is_exit_2(cli, monkeypatch, tmp_path):
    monkeypatch.setattr(tune_cmd, "_local_gpus", lambda: ([], None))
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--out", str(tmp_path))
    assert r.code == 2 and "needs a local NVIDIA GPU" in r.err and "Traceback" not in r.err


@pytest.mark.parametrize("args, message", [
    (("--strategy-option", "topp=3"), "known: top, beam"),
    (("--strategy", "random"), "unknown strategy"),
    (("--target", "triton"), "unknown --target"),
    (("--model", "glm-5-nvfp4"), "--dtype bf16"),
    (("--dtype", "int4"), "unknown --dtype"),
    (("--tp", "3"), "does not divide"),
    (("--replay", "/nonexistent/j.jsonl"), "no such file"),
])
def test_usage_errors(cli, tmp_path, args, message):
    base = {"--model": "glm-5", "--target": "fake"}
    flat = list(args)
    for k, v in base.items():
        if k not in flat:
            flat += [k, v]
    r = cli("tune", *flat, "--out", str(tmp_path))
    assert r.code == 2, (r.code, r.err)
    assert message in r.err and "Traceback" not in r.err


def test_engine_targets_need_the_engine(cli, tmp_path):
    import importlib.util

    for engine in ("vllm", "sglang"):
        if importlib.util.find_spec(engine) is not None:
            continue  # installed here: the target would run (on a GPU)
        r = cli("tune", "--model", "glm-5", "--tp", "8", "--target", engine, "--out", str(tmp_path))
        assert r.code == 2 and f"pip install {engine}" in r.err


def test_engine_target_files_and_defaults(tmp_path):
    """The engine targets' storage and defaults need no engine and no GPU."""
    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.tune.targets.engines import SglangTarget, VllmTarget

    layer = TuneShape("both", 256, 6144, 256, 8, "bf16", 256)
    cfg = MoEConfig(16, 64, 128, 1, 4, 3)
    v = VllmTarget(gpu="h200")
    (path,) = v.write(tmp_path, layer, "NVIDIA H200", {"both": {1: cfg, 64: cfg}})
    assert path.name == "E=256,N=256,device_name=NVIDIA_H200.json"
    assert json.loads(path.read_text())["64"] == cfg.as_dict()
    s = SglangTarget(gpu="h200")
    (spath,) = s.write(tmp_path, layer, "NVIDIA H200", {"both": {1: cfg}})
    assert spath.parent.name.startswith("triton_") and spath.name == path.name
    assert v.default_config(layer, 1).block_m == 16  # vLLM: M <= E takes its small-batch branch
    assert v.fit_reason(MoEConfig(256, 256, 256, 1, 8, 5), layer) is not None


def test_engine_target_inputs_on_cpu():
    """The inputs an engine target hands the engine: global ids with an expert map under EP."""
    pytest.importorskip("torch")
    from tilefit.tune.targets.engines import VllmTarget

    t = VllmTarget(gpu="h200", device="cpu")
    shape = TuneShape("both", 4, 64, 32, 2, "bf16", 8)  # 8 experts in all, 4 here
    p = t._engine_inputs(shape, 5)
    assert p["x"].shape == (5, 64) and p["w1"].shape == (4, 64, 64) and p["w2"].shape == (4, 64, 32)
    assert p["ids"].shape == (5, 2) and int(p["ids"].max()) < 8
    assert p["expert_map"].tolist() == [0, 1, 2, 3, -1, -1, -1, -1]
    again = t._engine_inputs(shape, 5)
    assert again is p  # cached per batch; the weights are made once per shape
    assert t._engine_inputs(shape, 6)["w1"] is p["w1"]
    # The job's two batch-size segments time in turns on one worker (tune/schedule.py): each
    # batch size's inputs are kept for the last few, not remade at every switch.
    assert t._engine_inputs(shape, 5) is p
    for batch in range(7, 20):  # the other segment's searches move on; this one stays at 5
        t._engine_inputs(shape, batch)
        assert t._engine_inputs(shape, 5) is p
    from tilefit.tune.targets.tilefit_moe import ACTIVATIONS_KEPT

    assert sum(k[0] == "engine-batch" for k in t._inputs) == ACTIVATIONS_KEPT


# ------------------------------------------------------------------ fp8 means per-tensor fp8

# A Qwen3-30B-A3B config with per-tensor fp8 weights (quant_method fp8, no weight_block_size).
FP8_TENSOR = str(Path(__file__).parent / "fixtures" / "configs" / "qwen3-30b-fp8-tensor")


def test_per_tensor_fp8_model_is_refused_not_tuned_as_block_scaled(cli, tmp_path):
    # Before: TUNABLE_DTYPES mapped the checkpoint's per-tensor "fp8" to the block-scaled kernel and
    # wrote ...,dtype=fp8_w8a8,block_shape=[128,128].json files the engine never reads for it.
    r = cli("tune", "--model", FP8_TENSOR, "--tp", "4", "--target", "fake", "--batches", "1",
            "--emit", "vllm", "--out", str(tmp_path), *FAST)
    assert r.code == 2, (r.code, r.err)
    assert "per-tensor fp8" in r.err and "--dtype bf16 or fp8-block" in r.err
    assert r.err.strip().count("\n") == 0 and "Traceback" not in r.err
    assert not any(tmp_path.rglob("*.json"))  # nothing tuned, nothing written


@pytest.mark.parametrize("model", ["glm-5", "glm-5-fp8"])
def test_typed_dtype_fp8_is_per_tensor_and_refused_with_what_to_pass(cli, tmp_path, model):
    r = cli("tune", "--model", model, "--ep", "8", "--target", "fake", "--dtype", "fp8",
            "--out", str(tmp_path), *FAST)
    assert r.code == 2 and "--dtype fp8-block" in r.err and "Traceback" not in r.err


def test_tune_shapes_name_block_scaled_fp8_fp8_block():
    from tilefit.tune.targets.base import tune_dtype

    assert tune_dtype(None, "fp8-block", "m") == "fp8-block"
    assert tune_dtype("FP8-Block", "fp8", "m") == "fp8-block"  # typed: the user chose the kernel
    assert TuneShape("gemm1", 32, 6144, 2048, 8, "fp8-block", 256).key().endswith(",fp8-block")
    with pytest.raises(ValueError, match="fp8-block"):
        TuneShape("gemm1", 32, 6144, 2048, 8, "fp8", 256)


def test_trace_writes_a_line_per_request_and_pause(cli, tmp_path):
    trace = tmp_path / "trace.jsonl"
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", "1,64",
            "--out", str(tmp_path / "out"), "--trace", str(trace), *FAST)
    assert r.code == 0, r.err
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    ops = {(d["pool"], d["op"]) for d in lines}
    assert {("compile", "compile"), ("gpu", "warm"), ("gpu", "probe"), ("gpu", "run_many")} <= ops
    journal = read_entries(tmp_path / "out" / "journal.jsonl", MOE_SPACE.from_dict)
    probes = [d for d in lines if d["op"] == "probe"]
    # Every search timing in the journal went through the GPU pool once.
    assert len(probes) == sum(1 for e in journal if e.batch is not None and ":" in e.shape
                              and not e.shape.startswith(("retime", "check")))
    for d in lines:
        assert d["t"] >= 0 and d["wait_s"] >= 0 and d["run_s"] >= 0
        assert (d["shape"] is None) == (d["op"] in ("pause", "close"))
    assert sorted(d["pool"] for d in lines if d["op"] == "close") == ["compile", "gpu"]
    # Times count from the run's start: the pools' closing ends the trace, within tune's clock.
    close_end = max(d["t"] + d["run_s"] for d in lines if d["op"] == "close")
    wall = json.loads((tmp_path / "out" / "tune_summary.json").read_text())["wall_s"]
    assert close_end <= wall + 0.05


def test_trace_is_refused_with_ray(cli, tmp_path):
    r = cli("tune", "--model", "glm-5", "--target", "fake", "--ray", "--trace",
            str(tmp_path / "t.jsonl"), "--out", str(tmp_path))
    assert r.code == 2 and "--trace" in r.err and "Traceback" not in r.err


def test_a_trace_that_cannot_be_written_is_a_usage_error(cli, tmp_path):
    """A folder, a name under a file, a FIFO (whose open would block): one line and exit 2,
    before any worker starts."""
    import os

    (tmp_path / "file").write_text("")
    os.mkfifo(tmp_path / "fifo")
    for trace in (tmp_path, tmp_path / "file" / "t.jsonl", tmp_path / "fifo"):
        r = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", "1",
                "--out", str(tmp_path / "out"), "--trace", str(trace), *FAST)
        assert r.code == 2, (trace, r.err)
        assert "trace" in r.err and "Traceback" not in r.err and "internal error" not in r.err
    assert not (tmp_path / "out" / "journal.jsonl").exists()


def test_a_resumed_run_s_trace_follows_the_first_run_s_lines(cli, tmp_path):
    trace, out = tmp_path / "trace.jsonl", str(tmp_path / "out")
    args = ("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", "1",
            "--out", out, "--trace", str(trace), *FAST)
    assert cli(*args).code == 0
    first = [json.loads(line) for line in trace.read_text().splitlines()]
    assert cli(*args, "--resume").code == 0
    second = [json.loads(line) for line in trace.read_text().splitlines()][len(first):]
    assert second  # its warm-ups at least
    end = max(d["t"] + d["wait_s"] + d["run_s"] for d in first)
    assert min(d["t"] for d in second) >= end


def test_trace_with_ray_is_refused_where_ray_is_not_installed(cli, tmp_path, monkeypatch):
    from tilefit.errors import MissingDependency
    from tilefit.tune import ray_executor

    def no_ray():
        raise MissingDependency("--ray needs Ray, which is not installed")

    monkeypatch.setattr(ray_executor, "import_ray", no_ray)
    r = cli("tune", "--model", "glm-5", "--target", "fake", "--ray", "--trace",
            str(tmp_path / "t.jsonl"), "--out", str(tmp_path))
    assert r.code == 2 and "--trace" in r.err and "Traceback" not in r.err
