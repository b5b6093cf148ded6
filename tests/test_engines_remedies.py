"""Fatality and remedies, each checked against the source it was read from (2026-11-29)."""

import subprocess
import sys

import pytest

from tilefit.engines.remedies import fatality, fused_finalize, remedies
from tilefit.errors import UsageError


def test_triton_misfit_is_fatal():
    # Triton raises OutOfResources at the first launch (compiler.py _init_handles); SGLang
    # exits (issue #5995), vLLM's worker fails (issue #46721).
    for engine in ("sglang", "vllm"):
        f = fatality(engine, "triton-moe")
        assert f.fatal and "OutOfResources" in f.log_line and f.sources


def test_flashinfer_tactic_failure_is_skipped():
    # flashinfer 0.7.4 autotuner.py choose_one: except Exception -> time inf, "Skipped N
    # unsupported tactic(s)"; TensorRT-LLM skips likewise and guards SharedStorage (PR #12704).
    for engine in ("sglang", "vllm", "trtllm"):
        f = fatality(engine, "flashinfer-cutlass")
        assert not f.fatal and f.why
    assert "Skipped N unsupported" in fatality("sglang", "flashinfer-cutlass").log_line


def test_fatality_bad_input():
    with pytest.raises(UsageError, match="does not run"):
        fatality("trtllm", "triton-moe")
    with pytest.raises(UsageError, match="unknown kernel family"):
        fatality("vllm", "cutlass")


def test_tuned_config_remedies():
    # vLLM: VLLM_TUNED_CONFIG_FOLDER/<name>; SGLang: SGLANG_MOE_CONFIG_DIR/configs/triton_X_Y_Z/.
    (v,) = remedies("vllm", "triton-moe", kinds=("tuned-config",), dir="/srv/moe", name="E=1.json")
    assert v.setting == "VLLM_TUNED_CONFIG_FOLDER=/srv/moe" and "E=1.json" in v.text
    (s,) = remedies("sglang", "triton-moe", kinds=("tuned-config",), dir="/srv/moe")
    assert s.setting == "SGLANG_MOE_CONFIG_DIR=/srv/moe" and "/srv/moe/configs/triton_X_Y_Z" in s.text


def test_blocklist_remedy_names_the_env_and_keys():
    # flashinfer 0.7.4 autotuner.py reads FLASHINFER_TACTICS_BLOCKLIST; tactics_blocklist.py keys
    # entries "custom_op::RunnerClass"; the CUTLASS MoE ops are trtllm::fused_moe::gemm1/gemm2
    # with runner MoERunner (fused_moe/core.py).
    (b,) = remedies("vllm", "flashinfer-cutlass", kinds=("blocklist",), file="/tmp/bl.json")
    assert b.setting == "FLASHINFER_TACTICS_BLOCKLIST=/tmp/bl.json"
    assert "trtllm::fused_moe::gemm2::MoERunner" in b.text and "_metadata" in b.text
    (t,) = remedies("trtllm", "flashinfer-cutlass", kinds=("blocklist",))
    assert t.setting == ""


def test_finalize_switches_by_engine_and_version():
    # sglang environ.py: SGLANG_FLASHINFER_MOE_FUSED_FINALIZE from 0.5.18 (absent in 0.5.17).
    (new,) = remedies("sglang", "flashinfer-cutlass", kinds=("finalize",), engine_version="0.5.19")
    assert new.setting == "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=0"
    (old,) = remedies("sglang", "flashinfer-cutlass", kinds=("finalize",), engine_version="0.5.17")
    assert old.setting == "" and "no switch" in old.text
    # vllm 0.33.0 passes no use_fused_finalize: no switch.
    (v,) = remedies("vllm", "flashinfer-cutlass", kinds=("finalize",))
    assert v.setting == "" and "no switch" in v.text
    # TensorRT-LLM MoeConfig.disable_finalize_fusion.
    (t,) = remedies("trtllm", "flashinfer-cutlass", kinds=("finalize",))
    assert "disable_finalize_fusion: true" in t.setting


def test_cuda_graph_warning_only_where_reported():
    # FlashInfer #4841 / SGLang #34629: SM120 only.
    w = remedies("sglang", "flashinfer-cutlass", arch="sm120", kinds=("warning",))
    assert len(w) == 1 and "#4841" in w[0].text and w[0].setting == "--disable-flashinfer-autotune"
    assert remedies("sglang", "flashinfer-cutlass", arch="sm90", kinds=("warning",)) == []
    (v,) = remedies("vllm", "flashinfer-cutlass", arch="sm121", kinds=("warning",))
    assert "trtllm::fused_moe::gemm1" in v.setting


def test_remedies_bad_input():
    with pytest.raises(UsageError, match="unknown remedy kind"):
        remedies("vllm", "triton-moe", kinds=("reboot",))
    with pytest.raises(UsageError, match="unknown arch"):
        remedies("vllm", "triton-moe", arch="sm7")


def test_fused_finalize_state():
    # FlashInfer defaults use_fused_finalize=True; sglang: no switch < 0.5.18, default on
    # 0.5.18-0.5.20, off from 0.5.21 (PR #40105); the env var overrides.
    assert fused_finalize("sglang", engine_version="0.5.10").enabled
    assert fused_finalize("sglang", engine_version="0.5.20").enabled
    assert not fused_finalize("sglang", engine_version="0.5.21").enabled
    assert fused_finalize("sglang", environ={"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "1"}).enabled
    assert not fused_finalize("sglang", engine_version="0.5.19",
                              environ={"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "0"}).enabled
    assert fused_finalize("vllm").enabled
    assert not fused_finalize("trtllm", trtllm_disable_finalize_fusion=True).enabled


def test_engines_package_imports_no_heavy_dependency():
    code = ("import sys\n"
            "import tilefit.engines.backends, tilefit.engines.defaults, "
            "tilefit.engines.lookup, tilefit.engines.remedies\n"
            "bad = [m for m in ('torch', 'triton', 'vllm', 'sglang', 'flashinfer') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
