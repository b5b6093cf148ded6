"""vLLM's MoE backend per release (engines/data/vllm_backends.toml), checked through `tilefit check`
on an H200 (SM90) and the other archs whose answer moved: each boundary as its first version and
the one before, read from the vLLM wheels 0.9.0-0.33.0 (file:line in the rows' sources)."""

import pytest

TRITON, FI = "TRITON", "FLASHINFER_CUTLASS"


def _check(cli, model, version, *layout, gpu="h200", env=()):
    args = ["check", "--model", model, "--gpu", gpu, *layout, "--engine", "vllm",
            "--engine-version", version, "--json"]
    for e in env:
        args += ["--env", e]
    return cli(*args)


def _backend(cli, model, version, *layout, gpu="h200", env=()):
    r = _check(cli, model, version, *layout, gpu=gpu, env=env)
    assert r.code in (0, 1), r.err
    return r.json()["backend"]["engine_backend"]


EP8, TP8 = ("--ep", "8"), ("--tp", "8")


@pytest.mark.parametrize("model", ["glm-5-fp8", "deepseek-v3", "qwen3-235b-a22b-fp8"])
@pytest.mark.parametrize("version,layout,expected", [
    # 0.9-0.14: Triton as pip installs it (DeepGEMM opt-in before 0.11, deep_gemm not installed after)
    ("0.9.0", EP8, TRITON), ("0.10.0", EP8, TRITON), ("0.11.0", EP8, TRITON), ("0.14.1", EP8, TRITON),
    ("0.14.1", TP8, TRITON),
    # 0.15.0: FLASHINFER_CUTLASS heads the FP8 list (oracle/fp8.py l.145), under TP and EP
    ("0.15.0", EP8, FI), ("0.15.0", TP8, FI), ("0.16.0", TP8, FI),
    # 0.17.0: Hopper block fp8 prefers Triton for TP, FI CUTLASS for EP (oracle/fp8.py l.85-95)
    ("0.17.0", TP8, TRITON), ("0.17.0", EP8, FI), ("0.33.0", EP8, FI), ("0.33.0", TP8, TRITON),
])
def test_block_fp8_on_h200_by_version(cli, model, version, layout, expected):
    if model.startswith("qwen3") and layout == TP8:
        layout = ("--tp", "4")  # I = 1536: TP8 leaves 192, not whole 128-wide scale blocks
    assert _backend(cli, model, version, *layout) == expected


def test_block_fp8_selector_names_no_flag_the_version_lacks(cli):
    r = _check(cli, "glm-5-fp8", "0.10.0", *EP8)
    b = r.json()["backend"]
    assert (b["family"], b["engine_backend"]) == ("triton-moe", TRITON)
    assert "--moe-backend flashinfer_cutlass" not in b["selector"]  # the flag arrives in 0.17.0
    assert "VLLM_USE_DEEP_GEMM=0" in b["selector"] and any("DeepGEMM" in c for c in b["caveats"])
    b16 = _check(cli, "glm-5-fp8", "0.16.0", *EP8).json()["backend"]
    assert "no --moe-backend before 0.17" in b16["selector"]


@pytest.mark.parametrize("version,env,expected", [
    # VLLM_USE_FLASHINFER_MOE_FP8=0 drops FlashInfer (read 0.15.0-0.23.0): Triton while deep_gemm
    # is not in the wheel (0.19.1), DeepGEMM once it is (0.20.0-0.23.0), ignored from 0.24.0.
    ("0.19.1", ("VLLM_USE_FLASHINFER_MOE_FP8=0",), TRITON),
    ("0.20.0", ("VLLM_USE_FLASHINFER_MOE_FP8=0",), "DeepGEMM"),
    ("0.23.0", ("VLLM_USE_FLASHINFER_MOE_FP8=0",), "DeepGEMM"),
    ("0.24.0", ("VLLM_USE_FLASHINFER_MOE_FP8=0",), FI),
    ("0.20.0", ("VLLM_USE_FLASHINFER_MOE_FP8=0", "VLLM_USE_DEEP_GEMM=0"), TRITON),
    # VLLM_USE_DEEP_GEMM=1 set on purpose: DeepGEMM, a path tilefit does not model
    ("0.15.0", ("VLLM_USE_DEEP_GEMM=1",), "DeepGEMM"),
    ("0.33.0", ("VLLM_USE_DEEP_GEMM=1",), "DeepGEMM"),
    ("0.10.0", ("VLLM_USE_DEEP_GEMM=1",), "DeepGEMM"),
    ("0.10.0", ("VLLM_USE_DEEP_GEMM=0",), TRITON),
])
def test_block_fp8_environment_switches_under_ep(cli, version, env, expected):
    r = _check(cli, "glm-5-fp8", version, *EP8, env=env)
    if expected == "DeepGEMM":
        assert r.code == 2 and "DeepGEMM" in r.err and "does not model" in r.err
        assert "VLLM_USE_DEEP_GEMM=0" in r.err  # how to get Triton back
    else:
        assert r.code in (0, 1), r.err
        assert r.json()["backend"]["engine_backend"] == expected


@pytest.mark.parametrize("version,layout,expected", [
    # bf16 on SM90: Triton until 0.19.1; the 0.20.0 priority list puts FLASHINFER_CUTLASS ahead of
    # Triton (oracle/unquantized.py l.66-78); 0.23.0 moves both FlashInfer backends back on SM90 (l.73-75).
    ("0.9.0", EP8, TRITON), ("0.19.1", EP8, TRITON), ("0.19.1", TP8, TRITON),
    ("0.20.0", EP8, FI), ("0.20.0", TP8, FI), ("0.22.1", EP8, FI), ("0.22.1", TP8, FI),
    ("0.23.0", EP8, TRITON), ("0.23.0", TP8, TRITON), ("0.33.0", EP8, TRITON),
])
def test_bf16_on_h200_by_version(cli, version, layout, expected):
    assert _backend(cli, "glm-5", version, *layout) == expected


def test_bf16_environment_switches(cli):
    # 0.11-0.19: VLLM_USE_FLASHINFER_MOE_FP16=1 under EP (cc >= 9.0); 0.20-0.23: =0 drops FlashInfer.
    assert _backend(cli, "glm-5", "0.19.1", *EP8, env=("VLLM_USE_FLASHINFER_MOE_FP16=1",)) == FI
    assert _backend(cli, "glm-5", "0.19.1", *TP8, env=("VLLM_USE_FLASHINFER_MOE_FP16=1",)) == TRITON
    assert _backend(cli, "glm-5", "0.10.2", *EP8, env=("VLLM_USE_FLASHINFER_MOE_FP16=1",)) == TRITON
    assert _backend(cli, "glm-5", "0.20.0", *EP8, env=("VLLM_USE_FLASHINFER_MOE_FP16=0",)) == TRITON


def test_bf16_environment_switches_on_b200(cli):
    """cc >= 9.0 takes SM100 too (fused_moe/layer.py l.304-309 in 0.11.0), and =0 takes
    FLASHINFER_TRTLLM off the 0.20 list as well (oracle/unquantized.py l.229-234 in 0.20.0): found on
    flashinfer-ai/flashinfer#2219's B200 command (VLLM_USE_FLASHINFER_MOE_FP16=1, -tp 4 with EP,
    vLLM 0.11.2), which check had read as Triton."""
    flashinfer_0_6 = ("--flashinfer", "0.6.0")  # vLLM 0.11-0.19 pin releases whose sm100 lists are not read
    assert _backend(cli, "glm-5", "0.19.1", *EP8, *flashinfer_0_6, gpu="b200",
                    env=("VLLM_USE_FLASHINFER_MOE_FP16=1",)) == FI
    assert _backend(cli, "glm-5", "0.19.1", *TP8, gpu="b200", env=("VLLM_USE_FLASHINFER_MOE_FP16=1",)) == TRITON
    assert _backend(cli, "glm-5", "0.20.0", *EP8, gpu="b200", env=("VLLM_USE_FLASHINFER_MOE_FP16=0",)) == TRITON
    r = _check(cli, "glm-5", "0.11.2", *EP8, gpu="b200", env=("VLLM_USE_FLASHINFER_MOE_FP16=1",))
    assert r.code == 2 and "has not read FlashInfer 0.5.2's bf16" in r.err and "--flashinfer 0.6.0" in r.err


def test_block_fp8_on_sm120_turns_to_deep_gemm_in_0_24(cli):
    # platforms/cuda.py support_deep_gemm takes the SM120 family from 0.24.0 (l.663-669).
    assert _backend(cli, "glm-5-fp8", "0.23.0", *EP8, gpu="rtx-pro-6000") == TRITON
    r = _check(cli, "glm-5-fp8", "0.24.0", *EP8, gpu="rtx-pro-6000")
    assert r.code == 2 and "DeepGEMM" in r.err and "VLLM_USE_DEEP_GEMM=0" in r.err
    assert _backend(cli, "glm-5-fp8", "0.24.0", *EP8, gpu="rtx-pro-6000",
                    env=("VLLM_USE_DEEP_GEMM=0",)) == TRITON


@pytest.mark.parametrize("version,runs_triton", [
    ("0.9.1", True), ("0.9.2", False), ("0.13.0", False), ("0.14.0", True), ("0.14.1", True),
    ("0.15.0", False),
])
def test_block_fp8_on_b200_by_version(cli, version, runs_triton):
    # 0.9.2-0.13.0: vLLM's CUTLASS block-scaled grouped GEMM on SM100; 0.14: Triton as pip installs
    # it; 0.15.0 on: FLASHINFER_TRTLLM or DeepGEMM.
    r = _check(cli, "glm-5-fp8", version, *EP8, gpu="b200")
    if runs_triton:
        assert r.code in (0, 1), r.err
        assert r.json()["backend"]["engine_backend"] == TRITON
    else:
        assert r.code == 2 and "does not model" in r.err


def test_bf16_on_b200_turns_to_trtllm_in_0_20(cli):
    assert _backend(cli, "glm-5", "0.19.1", *EP8, gpu="b200") == TRITON
    r = _check(cli, "glm-5", "0.20.0", *EP8, gpu="b200")
    assert r.code == 2 and "FLASHINFER_TRTLLM" in r.err


def test_nvfp4_on_b200_by_version(cli):
    # 0.15.0 on: FLASHINFER_TRTLLM heads oracle/nvfp4.py; before: vLLM's own CUTLASS FP4 GEMM.
    old, new = _check(cli, "glm-5-nvfp4", "0.14.1", *EP8, gpu="b200"), _check(cli, "glm-5-nvfp4", "0.15.0", *EP8, gpu="b200")
    assert old.code == new.code == 2
    assert "before 0.15" in old.err and "cutlass_moe_fp4" in old.err
    assert "from 0.15" in new.err and "FLASHINFER_TRTLLM" in new.err
