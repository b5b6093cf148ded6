"""Tuned-config lookup. Names and search order read from vLLM's get_config_file_name /
get_moe_configs (0.11.0-0.33.0) and SGLang's fused_moe_triton_config.py (0.5.10-0.5.23)."""

import subprocess
import sys

import pytest

from tilefit.engines import get_engine, sglang, vllm
from tilefit.engines.triton_moe import package_dir
from tilefit.errors import UsageError

DEV = "NVIDIA GeForce RTX 5090"


def test_vllm_name_and_user_folder_first(tmp_path):
    # vLLM: E={E},N={N},device_name={spaces->_}[,dtype=fp8_w8a8][,block_shape=[128,128]].json,
    # VLLM_TUNED_CONFIG_FOLDER before the shipped folder.
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    r = get_engine("vllm").find_tuned_config(E=32, N=2048, device_name=DEV, weight_dtype="fp8-block",
                          config_dir=tmp_path, environ={"VLLM_TUNED_CONFIG_FOLDER": str(env_dir)})
    assert r.file_name == ("E=32,N=2048,device_name=NVIDIA_GeForce_RTX_5090,dtype=fp8_w8a8,"
                           "block_shape=[128,128].json")
    assert r.found is None
    assert r.tried[:2] == (tmp_path / r.file_name, env_dir / r.file_name)
    (env_dir / r.file_name).write_text("{}")
    r2 = get_engine("vllm").find_tuned_config(E=32, N=2048, device_name=DEV, weight_dtype="fp8-block",
                           config_dir=tmp_path, environ={"VLLM_TUNED_CONFIG_FOLDER": str(env_dir)})
    assert r2.found == env_dir / r.file_name


def test_vllm_h200_family_name():
    # vllm >= 0.16.0 get_config_file_name maps any device whose '_'-split name has 'H200'.
    r = get_engine("vllm").find_tuned_config(E=256, N=256, device_name="NVIDIA H200 NVL", weight_dtype="bf16",
                          environ={})
    assert r.file_name == "E=256,N=256,device_name=NVIDIA_H200.json"


def _sglang_file(root, version_dir, name):
    p = root / version_dir / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("{}")
    return p


def test_sglang_config_dir_layouts(tmp_path):
    # SGLang reads <SGLANG_MOE_CONFIG_DIR>/configs/triton_X_Y_Z/<name>; block shape with a space.
    name = "E=32,N=2048,device_name=NVIDIA_GeForce_RTX_5090,dtype=fp8_w8a8,block_shape=[128, 128].json"
    p = _sglang_file(tmp_path / "configs", "triton_3_4_0", name)
    r = get_engine("sglang").find_tuned_config(E=32, N=2048, device_name=DEV, weight_dtype="fp8-block",
                          triton_version="3.4.0", config_dir=tmp_path, environ={})
    assert (r.file_name, r.found) == (name, p)
    # tilefit tune writes <out>/triton_X_Y_Z/<name>: accepted as --config-dir too.
    out = tmp_path / "tuneout"
    q = _sglang_file(out, "triton_3_4_0", name)
    r = get_engine("sglang").find_tuned_config(E=32, N=2048, device_name=DEV, weight_dtype="fp8-block",
                          triton_version="3.4.0", config_dir=out, environ={})
    assert r.found == q


def test_sglang_other_triton_version_fallback(tmp_path):
    # sglang >= 0.5.12 lists triton_* folders on disk newest first; 0.5.10-0.5.11 use the fixed
    # list 3.4.0, 3.3.1, 3.2.0, 3.1.0 (fused_moe_triton_config.py in those wheels). Either way it
    # loads the file with a warning.
    name = "E=8,N=7168,device_name=NVIDIA_GeForce_RTX_5090.json"
    p = _sglang_file(tmp_path / "configs", "triton_3_0_0", name)
    r = get_engine("sglang").find_tuned_config(E=8, N=7168, device_name=DEV, weight_dtype="bf16",
                          triton_version="3.6.0", config_dir=tmp_path, environ={})
    assert r.found == p and "another Triton version" in r.note
    old = get_engine("sglang").find_tuned_config(E=8, N=7168, device_name=DEV, weight_dtype="bf16",
                            triton_version="3.6.0", config_dir=tmp_path, environ={},
                            version="0.5.10")
    assert old.found is None  # 3.0.0 is not in the old fixed list
    assert tmp_path / "configs" / "triton_3_1_0" / name in old.tried
    for listing in ("0.5.12", "0.5.14"):  # the on-disk listing arrived in 0.5.12, not 0.5.15
        assert get_engine("sglang").find_tuned_config(
            E=8, N=7168, device_name=DEV, weight_dtype="bf16", triton_version="3.6.0",
            config_dir=tmp_path, environ={}, version=listing).found == p
    assert get_engine("sglang").find_tuned_config(
        E=8, N=7168, device_name=DEV, weight_dtype="bf16", triton_version="3.6.0",
        config_dir=tmp_path, environ={}, version="0.5.11").found is None


def test_sglang_down_file_falls_back_to_up(tmp_path):
    # sglang 0.5.18+ get_moe_configs(down_moe=True): no _down file -> reuse the up config.
    up = _sglang_file(tmp_path / "configs", "triton_3_4_0",
                      "E=32,N=2048,device_name=NVIDIA_GeForce_RTX_5090.json")
    r = get_engine("sglang").find_tuned_config(E=32, N=2048, device_name=DEV, weight_dtype="bf16",
                          triton_version="3.4.0", config_dir=tmp_path, environ={}, down=True)
    assert r.file_name.endswith("_down.json") and r.found == up and "reuses" in r.note


def test_sglang_env_dir_replaces_package(tmp_path):
    r = get_engine("sglang").find_tuned_config(E=8, N=7168, device_name=DEV, weight_dtype="bf16",
                          triton_version="3.4.0", environ={"SGLANG_MOE_CONFIG_DIR": str(tmp_path)})
    assert r.tried[0] == tmp_path / "configs" / "triton_3_4_0" / r.file_name
    assert "will not read its shipped configs" in r.note


def test_installed_engine_found_without_import(tmp_path):
    # A fake installed vllm with a shipped config; find_spec locates it, nothing imports it.
    pkg = tmp_path / "vllm"
    shipped = pkg / "model_executor" / "layers" / "fused_moe" / "configs"
    shipped.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    name = "E=32,N=2048,device_name=NVIDIA_GeForce_RTX_5090.json"
    (shipped / name).write_text("{}")
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from tilefit.engines import get_engine\n"
        "from tilefit.engines.triton_moe import package_dir\n"
        "r = get_engine('vllm').find_tuned_config(E=32, N=2048, device_name=%r, weight_dtype='bf16', environ={})\n"
        "assert 'vllm' not in sys.modules\n"
        "print(package_dir('vllm')); print(r.found)\n") % (str(tmp_path), DEV)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(pkg), str(shipped / name)]


def test_missing_engine_is_reported(monkeypatch):
    monkeypatch.setattr(vllm, "package_dir", lambda module: None)
    r = get_engine("vllm").find_tuned_config(E=1, N=1, device_name=DEV, weight_dtype="bf16", environ={})
    assert r.found is None and r.tried == () and "not installed" in r.note


@pytest.mark.parametrize("kwargs,needle", [
    (dict(engine="trtllm", weight_dtype="bf16"), "TensorRT-LLM"),
    (dict(engine="vllm", weight_dtype="nvfp4"), "not nvfp4"),
    (dict(engine="vllm", weight_dtype="bf16", config_dir="/nonexistent/dir"), "not a folder"),
    (dict(engine="vllm", weight_dtype="bf16", E=0), ">= 1"),
    (dict(engine="sglang", weight_dtype="bf16", triton_version="abc"), "bad Triton version"),
    (dict(engine="vllm", weight_dtype="bf16", device_name=" "), "device name"),
])
def test_bad_input(kwargs, needle):
    args = dict(E=8, N=128, device_name=DEV, environ={})
    args.update(kwargs)
    with pytest.raises(UsageError, match=needle):
        get_engine(args.pop("engine")).find_tuned_config(**args)


def test_sglang_needs_a_triton_version(monkeypatch):
    monkeypatch.setattr(sglang, "installed_triton_version", lambda: None)
    with pytest.raises(UsageError, match="Triton version"):
        get_engine("sglang").find_tuned_config(E=8, N=128, device_name=DEV, weight_dtype="bf16", environ={})
