"""`tune --emit vllm,sglang`: the engines' config files from a tuning of tilefit's kernel (here its
CPU stand-in, the fake target), named and keyed as the engines' loaders expect, with provenance in
a sidecar. tests/test_emit_engine_load.py reads them back with the engines' own lookup code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tilefit.engines.triton_moe import CONFIG_KEYS

FAST = ("--compile-workers", "2", "--compile-timeout", "20", "--run-timeout", "20", "--rounds", "2")
BATCHES = "1,16,256"


def _emit(cli, tmp_path, *extra):
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", BATCHES,
            "--emit", "vllm,sglang", "--out", str(tmp_path), "--json", *FAST, *extra)
    assert r.code == 0, r.err
    return r.json()


def _engine_keys_only(path):
    """What the loaders do: vLLM pops triton_version and int()s the rest; SGLang int()s all."""
    data = json.loads(path.read_text())
    data.pop("triton_version", None)
    assert all(int(k) > 0 for k in data)
    for cfg in data.values():
        assert list(cfg) == list(CONFIG_KEYS) and all(isinstance(v, int) for v in cfg.values())
    return {int(k): v for k, v in data.items()}


def test_emitted_files_are_named_and_keyed_as_the_engines_read_them(cli, tmp_path):
    from tilefit.engines.triton_moe import nearest_batch

    data = _emit(cli, tmp_path)
    picks = {(r["job"], r["batch"]): r["config_dict"] for r in data["rows"]}
    vllm = tmp_path / "vllm" / "E=32,N=2048,device_name=NVIDIA_H200.json"
    assert str(vllm) in data["files"]
    assert "triton_version" in json.loads(vllm.read_text())
    table = _engine_keys_only(vllm)
    assert sorted(table) == [1, 16, 256]
    for b, cfg in table.items():  # one config for both GEMMs: gemm1's pick or gemm2's
        assert cfg in (picks[("gemm1", b)], picks[("gemm2", b)])
    (folder,) = (tmp_path / "sglang" / "configs").iterdir()  # SGLANG_MOE_CONFIG_DIR=<out>/sglang
    assert folder.name.startswith("triton_") and folder.name.count("_") >= 2
    up = next(p for p in folder.glob("*.json") if not p.stem.endswith(("_down", "provenance")))
    down = folder / (up.stem + "_down.json")
    assert up.name.startswith("E=32,N=2048,device_name=") and down.exists()
    assert "triton_version" not in json.loads(up.read_text())  # SGLang int()s every key
    gemm1, gemm2 = _engine_keys_only(up), _engine_keys_only(down)
    for b in (1, 16, 256):
        assert gemm1[b] == picks[("gemm1", b)]
        assert gemm2[b]["BLOCK_SIZE_M"] == gemm1[b]["BLOCK_SIZE_M"]  # SGLang's _down rule
    assert nearest_batch(list(table), 200) == 256
    for p in (vllm, up, down):
        side = json.loads(p.with_name(p.stem + ".tilefit-provenance.json").read_text())
        assert side["file"] == p.name and side["model"]
        assert side["layout"] == "EP8" and side["gpu"] and side["date"] and side["versions"]
        assert "tilefit" in side["tuned_kernel"]


@pytest.mark.parametrize("dtype", [(), ("--dtype", "fp8-block")])  # glm-5-fp8's own, or typed
def test_fp8_block_files_carry_the_dtype_and_block_shape(cli, tmp_path, dtype):
    r = cli("tune", "--model", "glm-5-fp8" if not dtype else "glm-5", "--ep", "8", "--target", "fake",
            "--batches", BATCHES, "--emit", "vllm,sglang", "--out", str(tmp_path), "--json", *FAST, *dtype)
    assert r.code == 0, r.err
    data = r.json()
    assert all(row["shape"].endswith(",fp8-block") for row in data["rows"])
    names = {p.rsplit("/", 1)[-1] for p in data["files"]}
    assert "E=32,H=6144,I=2048,k=8,dtype=fp8-block,device_name=NVIDIA_H200.json" in names  # the store
    assert "E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json" in names
    assert any(n.endswith("dtype=fp8_w8a8,block_shape=[128, 128].json") for n in names)  # SGLang
    assert any(n.endswith("block_shape=[128, 128]_down.json") for n in names)
    engine_files = [p for p in data["files"] if "block_shape=" in p and "provenance" not in p]
    assert len(engine_files) == 3
    for path in engine_files:  # neither engine runs a 256-wide K step as tilefit's kernel does
        assert all(c["BLOCK_SIZE_K"] <= 128 for c in _engine_keys_only(Path(path)).values())


def test_emit_usage_errors(cli, tmp_path):
    bad = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--emit", "trtllm",
              "--out", str(tmp_path))
    assert bad.code == 2 and "vllm, sglang" in bad.err


# ------------------------------------------------------------------ fp8-block: what each engine runs
# A BLOCK_SIZE_K of 256 under 128x128 block scales: vLLM clamps it to 128 (invoke_fused_moe_kernel,
# fused_moe.py, vllm 0.9.0-0.33.0 wheels); SGLang scales each K step with one group's scales
# (fused_moe_triton_kernels.py, sglang 0.5.10-0.5.23 wheels). BLOCK_SIZE_N 32/64 and BLOCK_SIZE_K
# 64 run as tuned in both (the weight scale is read per column; a 64-wide step stays in one group).

@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_engines_run_small_fp8_block_tiles_as_tuned_and_refuse_a_256_wide_k(engine):
    from tilefit.engines import get_engine
    from tilefit.kernels.triton_moe.config import MoEConfig

    e = get_engine(engine)
    for cfg in (MoEConfig(16, 32, 64, 1, 4, 3), MoEConfig(16, 64, 128, 1, 4, 4),
                MoEConfig(128, 256, 128, 16, 8, 3)):
        assert e.runs_as_tuned(cfg.as_dict(), "fp8-block") is None
    wide = MoEConfig(16, 64, 256, 1, 4, 3).as_dict()
    assert e.runs_as_tuned(wide, "bf16") is None  # no scales: the K step is free
    why = e.runs_as_tuned(wide, "fp8-block")
    assert why and ("as 128" if engine == "vllm" else "wrong results") in why


def _row(gemm, batch, pick, finalists):
    from tilefit.tune.report import Retimed, Row

    return Row(shape=f"{gemm},x", job=gemm, batch=batch, config=pick, time_us=1.0, floor_us=1.0,
               default_us=None, trials=1, space=1, prefiltered=0, failures={}, search_s=0.0,
               finalists=[Retimed(c, (t,), t, ("fast",)) for c, t in finalists])


def test_emission_replaces_a_pick_the_engine_would_not_run_as_tuned():
    from tilefit.engines import get_engine
    from tilefit.errors import UsageError
    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.tune.emit import _engine_picks, _RunsAsTuned

    wide, narrow, slow = (MoEConfig(64, 128, 256, 16, 4, 3), MoEConfig(64, 128, 128, 16, 4, 4),
                          MoEConfig(64, 64, 64, 1, 4, 3))
    winners = {"gemm1": {1: narrow, 4096: wide}}
    rows = {("gemm1", 1): _row("gemm1", 1, narrow, [(narrow, 5.0)]),
            ("gemm1", 4096): _row("gemm1", 4096, wide, [(wide, 90.0), (slow, 99.0), (narrow, 95.0)])}
    ok, swapped = _engine_picks(_RunsAsTuned(get_engine("sglang"), "fp8-block"), winners, rows)
    assert ok == {"gemm1": {1: narrow, 4096: narrow}}  # the fastest finalist SGLang runs as tuned
    assert len(swapped) == 1 and "batch 4096" in swapped[0] and "64x128x256" in swapped[0]
    same, none = _engine_picks(_RunsAsTuned(get_engine("vllm"), "bf16"), winners, rows)
    assert same == winners and none == []  # bf16: every pick runs as tuned
    rows[("gemm1", 4096)] = _row("gemm1", 4096, wide, [(wide, 90.0)])
    with pytest.raises(UsageError, match="no re-timed finalist"):
        _engine_picks(_RunsAsTuned(get_engine("vllm"), "fp8-block"), winners, rows)


def test_swap_ab_caveat_names_the_batches_the_engine_runs_as_b_times_a():
    """vLLM >= 0.25.0 and SGLang 0.5.10-0.5.23 swap A and B for fp8 tiles with BLOCK_SIZE_M < 64
    and BLOCK_SIZE_N >= 64 on sm90 (vllm fused_moe/utils.py enable_swap_ab; sglang
    fused_moe_triton_kernels.py should_enable_swap_ab); tilefit's kernel never does."""
    from tilefit.engines import get_engine
    from tilefit.hw.catalog import get_arch
    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.tune.emit import _swap_ab_caveat

    picks = {1: MoEConfig(16, 64, 128, 1, 4, 4), 16: MoEConfig(16, 32, 128, 1, 4, 4),
             4096: MoEConfig(128, 128, 128, 16, 8, 3)}
    down = {64: MoEConfig(32, 128, 128, 1, 4, 3)}
    for engine in ("vllm", "sglang"):
        e = get_engine(engine)
        line = _swap_ab_caveat(e, "fp8-block", get_arch("sm90"), [picks, down])
        assert "batch sizes 1, 64 were timed" in line and e.title in line
        assert _swap_ab_caveat(e, "bf16", get_arch("sm90"), [picks, down]) == ""  # fp8 only
        assert _swap_ab_caveat(e, "fp8-block", get_arch("sm120"), [picks, down]) == ""  # sm90 only
        assert _swap_ab_caveat(e, "fp8", get_arch("sm90"), [picks]) != ""  # per-tensor fp8 too


class _CountingEvaluator:
    """retime()'s evaluator: every config compiled, gemm1's pick 10 us, anything else 11 us; it
    records the re-timing rounds asked per (GEMM, batch)."""

    def __init__(self, fast):
        self.fast, self.keys = fast, {}

    def compiled(self, shape, config):
        from tilefit.tune.results import Ok

        return Ok(0.0)

    def quiet(self):
        import contextlib

        return contextlib.nullcontext()

    def measure(self, shape, batch, config, key=None, probe=False):
        from tilefit.tune.results import Ok

        self.keys.setdefault((shape.gemm, batch), set()).add(key.split(":")[0])
        return Ok(10.0 if config == self.fast else 11.0)


@pytest.mark.parametrize("asked, rounds", [(3, 3), (7, 7), (0, 1)])
def test_emission_retimes_on_the_runs_own_rounds(asked, rounds):
    """vLLM's one config for both GEMMs is re-timed on as many rounds as the run re-timed its
    picks (at least one: --rounds 0 re-timed nothing), at every batch size."""
    from types import SimpleNamespace

    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.tune.emit import _one_config_for_both, _run_rounds
    from tilefit.tune.targets.base import TuneShape

    a, b = MoEConfig(16, 64, 128, 1, 4, 3), MoEConfig(64, 128, 64, 16, 4, 3)
    layer = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
    ev = _CountingEvaluator(a)
    picks, _ = _one_config_for_both(ev, layer, {"gemm1": {1: a, 4096: a}, "gemm2": {1: b, 4096: b}},
                                    _run_rounds(SimpleNamespace(rounds=asked)))
    assert picks == {1: a, 4096: a}
    for gemm in ("gemm1", "gemm2"):
        assert len(ev.keys[(gemm, 1)]) == rounds and len(ev.keys[(gemm, 4096)]) == rounds
