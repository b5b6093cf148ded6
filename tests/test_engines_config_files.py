"""Engine config files: names and contents as vLLM's and SGLang's loaders read them
(vllm fused_moe.py get_config_file_name 0.11.0-0.33.0; sglang fused_moe_triton_config.py 0.5.10-0.5.23)."""

from __future__ import annotations

import json
import os

import pytest

from tilefit.errors import UsageError
from tilefit.engines import get_engine, sglang, vllm
from tilefit.engines import triton_moe as cf

CFG = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 16,
       "num_warps": 4, "num_stages": 3}


def test_vllm_names():
    # Names as they appear in vLLM's configs/ folder.
    assert vllm.config_name(8, 14336, "NVIDIA H100 80GB HBM3") == \
        "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"
    assert vllm.config_name(256, 256, "NVIDIA H200", "fp8_w8a8", [128, 128]) == \
        "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    # Any H200 variant is filed as NVIDIA_H200 by vLLM.
    assert vllm.config_name(32, 2048, "NVIDIA H200 NVL") == "E=32,N=2048,device_name=NVIDIA_H200.json"
    # A block shape with a zero entry is dropped, as the engines do.
    assert vllm.config_name(8, 7168, "NVIDIA A100-SXM4-80GB", "int8_w8a16", [0, 0]) == \
        "E=8,N=7168,device_name=NVIDIA_A100-SXM4-80GB,dtype=int8_w8a16.json"


def test_sglang_names():
    # Files as they sit in SGLang's configs/triton_3_4_0/ folder.
    assert sglang.config_relpath(256, 256, "NVIDIA H20-3e", "3.4.0", "fp8_w8a8", (128, 128)) == \
        "triton_3_4_0/E=256,N=256,device_name=NVIDIA_H20-3e,dtype=fp8_w8a8,block_shape=[128, 128].json"
    assert sglang.config_relpath(256, 256, "NVIDIA H20-3e", "3.4.0", "fp8_w8a8", (128, 128),
                                    down=True) == \
        "triton_3_4_0/E=256,N=256,device_name=NVIDIA_H20-3e,dtype=fp8_w8a8,block_shape=[128, 128]_down.json"
    assert sglang.config_relpath(512, 128, "NVIDIA H200", "3.4.0") == \
        "triton_3_4_0/E=512,N=128,device_name=NVIDIA_H200.json"
    # SGLang keeps the full device name (no H200 folding).
    assert "NVIDIA_H200_NVL" in sglang.config_name(8, 64, "NVIDIA H200 NVL")
    with pytest.raises(UsageError):
        sglang.version_dir("../3.4")


def test_content_is_sorted_and_versioned(tmp_path):
    (path,) = get_engine("vllm").write_tuned_configs(
        tmp_path, E=32, N=2048, device_name="NVIDIA H200", weight_dtype="bf16",
        gemm1={64: CFG, 1: CFG, 16: CFG}, gemm2=None, triton_version="3.6.0")
    data = json.loads(path.read_text())
    assert list(data) == ["triton_version", "1", "16", "64"]
    assert data["triton_version"] == "3.6.0"
    assert data["16"] == CFG
    # Read back the way vLLM does: drop the version, int() the rest.
    data.pop("triton_version")
    assert {int(k) for k in data} == {1, 16, 64}
    version, per_batch = cf.read_config_file(path)
    assert version == "3.6.0" and per_batch[64] == CFG


def test_sglang_files_and_down_rule(tmp_path):
    g2 = {1: {**CFG, "BLOCK_SIZE_N": 64}, 64: {**CFG, "num_stages": 4}}
    write = get_engine("sglang").write_tuned_configs
    paths = write(tmp_path, E=32, N=2048, device_name="NVIDIA H200", weight_dtype="fp8-block",
                  gemm1={1: CFG, 64: CFG}, gemm2=g2, triton_version="3.6.0")
    # SGLang reads $SGLANG_MOE_CONFIG_DIR/configs/triton_X_Y_Z/ (fused_moe_triton_config.py 0.5.10-0.5.23)
    assert {p.parent.relative_to(tmp_path).as_posix() for p in paths} == {"configs/triton_3_6_0"}
    assert paths[1].name.endswith("block_shape=[128, 128]_down.json")
    for p in paths:
        # SGLang's loader int()s every key: no non-batch key may be in its files.
        assert all(k.isdigit() for k in json.loads(p.read_text()))
    bad = {1: {**CFG, "BLOCK_SIZE_M": 32}, 64: CFG}
    with pytest.raises(ValueError, match="BLOCK_SIZE_M"):
        write(tmp_path, E=32, N=2048, device_name="NVIDIA H200", weight_dtype="bf16",
              gemm1={1: CFG, 64: CFG}, gemm2=bad, triton_version="3.6.0")


def test_nearest_batch_matches_engine_rule():
    keys = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]
    assert cf.nearest_batch(keys, 100) == 96
    assert cf.nearest_batch(keys, 3) == 2  # tie between 2 and 4: the earlier key
    assert cf.nearest_batch(keys, 10_000) == 4096
    for b in range(1, 5000, 37):
        assert cf.nearest_batch(keys, b) == min(keys, key=lambda x: abs(x - b))


def test_bad_content_is_usage_error(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"1": {"BLOCK_SIZE_M": 16}}')
    with pytest.raises(UsageError, match="needs the keys"):
        cf.read_config_file(p)
    p.write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        cf.read_config_file(p)


def test_atomic_write_leaves_no_temp_and_keeps_old_on_failure(tmp_path):
    p = tmp_path / "out.json"
    cf.write_json_atomic(p, {"a": 1})

    class Boom:
        pass

    with pytest.raises(TypeError):
        cf.write_json_atomic(p, {"a": Boom()})
    assert json.loads(p.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["out.json"]
