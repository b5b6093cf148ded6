"""Fatality and remedies, each checked against the source it was read from (2026-11-29)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tilefit.engines import get_engine
from tilefit.errors import UsageError


def test_triton_misfit_is_fatal():
    # Triton raises OutOfResources at the first launch (compiler.py _init_handles); SGLang
    # exits (issue #5995), vLLM's worker fails (issue #46721).
    for engine in ("sglang", "vllm"):
        f = get_engine(engine).fatality("triton-moe")
        assert f.fatal and "OutOfResources" in f.log_line and f.sources


def test_flashinfer_tactic_failure_is_skipped():
    # flashinfer 0.7.4 autotuner.py choose_one: except Exception -> time inf, "Skipped N
    # unsupported tactic(s)"; TensorRT-LLM skips likewise and guards SharedStorage (PR #12704).
    for engine in ("sglang", "vllm", "trtllm"):
        f = get_engine(engine).fatality("flashinfer-cutlass")
        assert not f.fatal and f.why
    assert "Skipped N unsupported" in get_engine("sglang").fatality("flashinfer-cutlass").log_line


def test_fatality_bad_input():
    with pytest.raises(UsageError, match="does not run"):
        get_engine("trtllm").fatality("triton-moe")
    with pytest.raises(UsageError, match="unknown kernel family"):
        get_engine("vllm").fatality("cutlass")


def test_tuned_config_remedies():
    # vLLM: VLLM_TUNED_CONFIG_FOLDER/<name>; SGLang: SGLANG_MOE_CONFIG_DIR/configs/triton_X_Y_Z/.
    (v,) = get_engine("vllm").remedies("triton-moe", kinds=("tuned-config",), dir="/srv/moe", name="E=1.json")
    assert v.setting == "VLLM_TUNED_CONFIG_FOLDER=/srv/moe" and "E=1.json" in v.text
    (s,) = get_engine("sglang").remedies("triton-moe", kinds=("tuned-config",), dir="/srv/moe")
    assert s.setting == "SGLANG_MOE_CONFIG_DIR=/srv/moe" and "/srv/moe/configs/triton_X_Y_Z" in s.text



@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_tuned_config_remedy_command_writes_where_its_setting_points(tmp_path, engine):
    """The `tilefit tune --target E --out DIR` a remedy prints writes the file where the engine,
    started with the remedy's setting, looks: DIR/<name> for vLLM, DIR/configs/triton_X_Y_Z/<name>
    for SGLang (its writer adds configs/, so `--out DIR/configs` would nest it twice)."""
    import re

    eng = get_engine(engine)
    (r,) = eng.remedies("triton-moe", kinds=("tuned-config",), dir=str(tmp_path), name="E=8.json")
    out = re.search(r"--out (\S+?)\)?(?:\s|$)", r.text).group(1)
    (written,) = eng.write_tuned_configs(
        out, E=8, N=512, device_name="NVIDIA H200", weight_dtype="bf16",
        gemm1={1: {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
                   "num_warps": 4, "num_stages": 3}}, gemm2=None, triton_version="3.6.0")
    looks = Path(r.setting.split("=", 1)[1])
    assert written.parent == (looks if engine == "vllm" else looks / "configs" / "triton_3_6_0")

def test_blocklist_remedy_names_the_env_and_keys():
    # flashinfer 0.7.4 autotuner.py reads FLASHINFER_TACTICS_BLOCKLIST; tactics_blocklist.py keys
    # entries "custom_op::RunnerClass"; the CUTLASS MoE ops are trtllm::fused_moe::gemm1/gemm2
    # with runner MoERunner (fused_moe/core.py).
    (b,) = get_engine("vllm").remedies("flashinfer-cutlass", kinds=("blocklist",), file="/tmp/bl.json")
    assert b.setting == "FLASHINFER_TACTICS_BLOCKLIST=/tmp/bl.json"
    assert "trtllm::fused_moe::gemm2::MoERunner" in b.text and "_metadata" in b.text
    (t,) = get_engine("trtllm").remedies("flashinfer-cutlass", kinds=("blocklist",))
    assert t.setting == ""


def test_finalize_switches_by_engine_and_version():
    # sglang environ.py: SGLANG_FLASHINFER_MOE_FUSED_FINALIZE from 0.5.18 (absent in 0.5.17).
    (new,) = get_engine("sglang").remedies("flashinfer-cutlass", kinds=("finalize",), version="0.5.19")
    assert new.setting == "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=0"
    (old,) = get_engine("sglang").remedies("flashinfer-cutlass", kinds=("finalize",), version="0.5.17")
    assert old.setting == "" and "no switch" in old.text
    # vllm 0.33.0 passes no use_fused_finalize: no switch.
    (v,) = get_engine("vllm").remedies("flashinfer-cutlass", kinds=("finalize",))
    assert v.setting == "" and "no switch" in v.text
    # TensorRT-LLM MoeConfig.disable_finalize_fusion.
    (t,) = get_engine("trtllm").remedies("flashinfer-cutlass", kinds=("finalize",))
    assert "disable_finalize_fusion: true" in t.setting


def test_cuda_graph_warning_only_where_reported():
    # FlashInfer #4841 / SGLang #34629: SM120 only.
    w = get_engine("sglang").remedies("flashinfer-cutlass", arch="sm120", kinds=("warning",))
    assert len(w) == 1 and "#4841" in w[0].text and w[0].setting == "--disable-flashinfer-autotune"
    assert get_engine("sglang").remedies("flashinfer-cutlass", arch="sm90", kinds=("warning",)) == []
    (v,) = get_engine("vllm").remedies("flashinfer-cutlass", arch="sm121", kinds=("warning",))
    assert "trtllm::fused_moe::gemm1" in v.setting


def test_remedies_bad_input():
    with pytest.raises(UsageError, match="unknown remedy kind"):
        get_engine("vllm").remedies("triton-moe", kinds=("reboot",))
    with pytest.raises(UsageError, match="unknown arch"):
        get_engine("vllm").remedies("triton-moe", arch="sm7")


def test_fused_finalize_state():
    # FlashInfer defaults use_fused_finalize=True; sglang: no switch < 0.5.18, default on
    # 0.5.18-0.5.20, off from 0.5.21 (PR #40105); the env var overrides.
    assert get_engine("sglang").fused_finalize(version="0.5.10").enabled
    assert get_engine("sglang").fused_finalize(version="0.5.20").enabled
    assert not get_engine("sglang").fused_finalize(version="0.5.21").enabled
    assert get_engine("sglang").fused_finalize(environ={"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "1"}).enabled
    assert not get_engine("sglang").fused_finalize(version="0.5.19",
                              environ={"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "0"}).enabled
    # Version not given: known only where every version agrees (=1 is on in all of them).
    unknown = get_engine("sglang").fused_finalize()
    assert unknown.enabled is None and "pass --engine-version" in unknown.why
    assert get_engine("sglang").fused_finalize(
        environ={"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "0"}).enabled is None
    assert get_engine("vllm").fused_finalize().enabled
    assert not get_engine("trtllm").fused_finalize(settings={"moe_config.disable_finalize_fusion": "true"}).enabled


def test_engines_package_imports_no_heavy_dependency():
    code = ("import sys\n"
            "from tilefit.engines import engine_names, get_engine\n"
            "engines = [get_engine(n) for n in engine_names()]\n"
            "bad = [m for m in ('torch', 'triton', 'vllm', 'sglang', 'flashinfer') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
