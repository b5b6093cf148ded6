"""`tune --emit vllm,sglang`: the engines' config files from a tuning of tilefit's kernel (here its
CPU stand-in, the fake target), named and keyed as the engines' loaders expect, with provenance in
a sidecar. tests/test_emit_engine_load.py reads them back with the engines' own lookup code."""

from __future__ import annotations

import json

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


def test_emit_usage_errors(cli, tmp_path):
    bad = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--emit", "trtllm",
              "--out", str(tmp_path))
    assert bad.code == 2 and "vllm, sglang" in bad.err
