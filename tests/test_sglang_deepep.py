"""sglang with a DeepEP-class all-to-all (--moe-a2a-backend deepep, mooncake, nixl): the experts run
in DeepEPMoE on DeepGEMM, never on the Triton fused MoE, so check says tilefit does not model it
and how to check the Triton path. Read from the sglang wheels 0.4.10-0.5.9 and the 0.5.10-0.5.23
sources (backends.toml sources sgl_deepep_*, sgl_deepgemm_enable, sgl_a2a_deep_gemm, sgl_mori):
auto -> deep_gemm while SGLANG_ENABLE_JIT_DEEPGEMM (default on) enables DeepGEMM (0.5.23
quantization/fp8.py l.1520-1542, l.2960-2972); the Triton runner has no DeepEP pre-permute in any
release (0.5.23 moe_runner/triton.py l.268); 0.4.10-0.5.4 DeepEPMoE asserts DeepGEMM and FP8."""

from __future__ import annotations

import pytest

from tilefit.engines import get_engine
from tilefit.errors import UsageError

# https://github.com/sgl-project/sglang/issues/16026 ("invalid configuration argument" during deepep
# mode = normal; sglang of late December 2025): the reporter's server command, DeepSeek-V3-0324 from a
# local folder (checked here with --model deepseek-v3).
ISSUE16026 = ("python", "-m", "sglang.launch_server", "--model-path", "/root/temp_can/DeepSeek-V3-0324",
              "--load-format", "dummy", "--tp", "2", "--ep", "2", "--moe-a2a-backend", "deepep",
              "--deepep-mode", "normal", "--chunked-prefill-size", "-1", "--max-prefill-tokens", "32768",
              "--host", "0.0.0.0", "--port", "30000", "--enable-two-batch-overlap",
              "--mem-fraction-static", "0.4", "--watchdog-timeout", "3600", "--cuda-graph-max-bs", "64",
              "--disable-cuda-graph")
# https://github.com/sgl-project/sglang/issues/5656 (DeepEP on 4 x H800 nodes): the maintainer's
# node-1 command, with the 0.4.x switch --enable-deepep-moe.
ISSUE5656 = ("python3", "-m", "sglang.launch_server", "--model-path", "/dev/shm/DeepSeek-V3-0324",
             "--trust-remote-code", "--tp", "16", "--dp", "4", "--host", "0.0.0.0", "--port", "30000",
             "--dist-init-addr", "10.10.38.4:5000", "--nnodes", "2", "--node-rank", "0",
             "--enable-dp-attention", "--enable-deepep-moe", "--deepep-mode", "normal",
             "--max-running-requests", "2048", "--disable-radix-cache", "--mem-fraction-static", "0.9",
             "--stream-output", "--disable-cuda-graph")
# The command of tilefit's bug report: GLM-5-FP8 on 8 GPUs under EP8 with DeepEP.
GLM5_DEEPEP = ("python", "-m", "sglang.launch_server", "--model-path", "zai-org/GLM-5-FP8", "--tp", "8",
               "--ep", "8", "--moe-a2a-backend", "deepep")
GLM5_PLAIN_EP = GLM5_DEEPEP[:-2]
# Release boundaries of the DeepEP FP8 path: 0.4.10 (DeepEPMoE calls DeepGEMM itself), 0.5.4 (+
# mooncake), 0.5.5 (the MoE runner path: auto -> deep_gemm), 0.5.10 (+ nixl), newest.
BOUNDARIES = ("0.4.10", "0.5.4", "0.5.5", "0.5.10", "0.5.23")


def _sglang(dtype, arch, **kw):
    return get_engine("sglang").backend(dtype, arch, **kw)


@pytest.mark.parametrize("a2a", ["deepep", "mooncake", "nixl"])
@pytest.mark.parametrize("arch", ["sm90", "sm100", "sm103"])
@pytest.mark.parametrize("dtype", ["fp8-block", "fp8"])
def test_fp8_under_a_deepep_class_a2a_runs_deepgemm(a2a, arch, dtype):
    for version in (None,) + BOUNDARIES:
        for runner in ({}, {"moe_backend": "auto"}, {"moe_backend": "triton"}, {"moe_backend": "deep_gemm"}):
            with pytest.raises(UsageError, match="DeepGEMM") as e:
                _sglang(dtype, arch, version=version, flags={"moe_a2a_backend": a2a, **runner},
                        architecture="GlmMoeDsaForCausalLM")
            msg = str(e.value)
            assert "does not model" in msg and "without --moe-a2a-backend" in msg
            assert "SGLANG_ENABLE_JIT_DEEPGEMM" in msg


def test_without_a_deepep_class_a2a_fp8_keeps_triton_on_hopper():
    for flags in (None, {}, {"moe_a2a_backend": "none"}, {"moe_a2a_backend": "flashinfer"},
                  {"moe_backend": "triton"}):
        c = _sglang("fp8-block", "sm90", flags=flags, architecture="GlmMoeDsaForCausalLM")
        assert (c.family, c.engine_backend) == ("triton-moe", "triton"), flags


def test_unquantized_and_nvfp4_experts_under_deepep():
    with pytest.raises(UsageError, match="deep_gemm") as e:
        _sglang("bf16", "sm90", flags={"moe_a2a_backend": "deepep"})
    assert "Unquantized DeepEP MoE currently supports low_latency mode only" in str(e.value)
    with pytest.raises(UsageError, match="flashinfer_cutedsl"):
        _sglang("nvfp4", "sm100", flags={"moe_a2a_backend": "deepep"})
    # The SM120 NVFP4 auto rule (--quantization modelopt_fp4 -> flashinfer_cutlass) has no DeepEP pairing.
    with pytest.raises(UsageError, match="flashinfer_cutedsl"):
        _sglang("nvfp4", "sm120", flags={"moe_a2a_backend": "deepep", "quantization": "modelopt_fp4"})
    assert _sglang("nvfp4", "sm120", flags={"quantization": "modelopt_fp4"}).engine_backend == "flashinfer_cutlass"
    assert _sglang("bf16", "sm90", flags={"moe_a2a_backend": "none"}).engine_backend == "triton"


@pytest.mark.parametrize("a2a,needle", [("deepep_v2", "deep_gemm"), ("pplx", "deep_gemm"),
                                        ("megamoe", "Mega MoE"), ("mori", "ROCm")])
def test_other_a2a_backends_are_not_triton(a2a, needle):
    for dtype in ("fp8-block", "bf16"):
        with pytest.raises(UsageError, match=needle):
            _sglang(dtype, "sm90", flags={"moe_a2a_backend": a2a})


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_check_the_reported_glm5_launch(cli, gpu):
    for extra in ((), ("--moe-runner-backend", "auto"), ("--moe-runner-backend", "triton")):
        for version in (None, "0.5.8", "0.5.9", "0.5.23"):
            ver = ("--engine-version", version) if version else ()
            r = cli("check", "--gpu", gpu, *ver, "--json", "--", *GLM5_DEEPEP, *extra)
            assert r.code == 2 and "Traceback" not in r.err, r.err
            assert "DeepGEMM" in r.err and "triton-moe" not in r.out
    # Plain EP keeps the Triton answer on the H200; on the B200 GLM-5 moves to flashinfer_trtllm
    # from 0.5.9 (the DeepSeek-family SM100 rule) and stays on Triton before.
    d = cli("check", "--gpu", gpu, "--engine-version", "0.5.8", "--json", "--", *GLM5_PLAIN_EP).json()
    assert d["backend"]["engine_backend"] == "triton"
    r = cli("check", "--gpu", gpu, "--engine-version", "0.5.23", "--json", "--", *GLM5_PLAIN_EP)
    if gpu == "h200":
        assert r.json()["backend"]["engine_backend"] == "triton"
        assert r.json()["backend"]["selector"].startswith("--moe-runner-backend triton")
    else:
        assert r.code == 2 and "flashinfer_trtllm" in r.err


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_check_issue_launches(cli, gpu):
    r = cli("check", "--model", "deepseek-v3", "--gpu", gpu, "--", *ISSUE16026)
    assert r.code == 2 and "DeepGEMM" in r.err and "Traceback" not in r.err
    r = cli("check", "--model", "deepseek-v3", "--gpu", gpu, "--engine-version", "0.4.10", "--", *ISSUE5656)
    assert r.code == 2 and "DeepGEMM" in r.err  # --enable-deepep-moe is moe_a2a_backend deepep
    # The same launch as #16026 without its all-to-all: Triton on the H200.
    plain = tuple(a for a in ISSUE16026 if a not in ("--moe-a2a-backend", "deepep", "--deepep-mode", "normal"))
    if gpu == "h200":
        d = cli("check", "--model", "deepseek-v3", "--gpu", gpu, "--json", "--", *plain).json()
        assert d["backend"]["engine_backend"] == "triton"


def test_check_own_a2a_option(cli):
    base = ("check", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--engine", "sglang")
    r = cli(*base, "--a2a-backend", "deepep")
    assert r.code == 2 and "DeepGEMM" in r.err
    assert cli(*base, "--json").json()["backend"]["engine_backend"] == "triton"
    # vLLM's rules do not read sglang's all-to-all switch.
    d = cli("check", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--engine", "vllm",
            "--a2a-backend", "deepep", "--json")
    assert d.code in (0, 1) and d.json()["backend"]["engine"] == "vllm"


def test_compare_under_deepep_counts_no_zero_rows(cli):
    d = cli("compare", "--gpu", "h200", "--batch", "256", "--json", "--", *GLM5_DEEPEP).json()
    text = str(d)
    assert "DeepGEMM" in text and "zero" not in " ".join(map(str, d.get("assumptions", []))).lower()
    plain = cli("compare", "--gpu", "h200", "--batch", "256", "--json", "--", *GLM5_PLAIN_EP).json()
    assert "zero" in " ".join(map(str, plain.get("assumptions", []))).lower()
