"""Backend resolution rules. Each expectation names the engine source it was read from
(wheels fetched with `pip download --no-deps`, read 2026-11-29)."""

import itertools

import pytest

from tilefit.engines import BackendChoice, engine_names, get_engine
from tilefit.engines.types import WEIGHT_DTYPES
from tilefit.errors import UsageError
from tilefit.layout.plan import Layout
from tilefit.hw.catalog import all_archs, get_arch
from tilefit.layout import Layout


def test_sglang_nvfp4_sm120_is_flashinfer_cutlass():
    # sglang 0.5.23 arg_groups/overrides.py _moe_runner_backend_quant_constraints:
    # auto + modelopt_fp4 on SM120/SM110 -> "flashinfer_cutlass" (trtllm-gen is SM100-only).
    c = get_engine("sglang").backend("nvfp4", "sm120")
    assert (c.family, c.family_dtype, c.engine_backend) == ("flashinfer-cutlass", "nvfp4",
                                                            "flashinfer_cutlass")
    assert "--moe-runner-backend flashinfer_cutlass" in c.selector
    assert "SM120" in c.rule and c.sources
    assert get_engine("sglang").backend("nvfp4", "sm121").family == "flashinfer-cutlass"


def test_sglang_before_0_5_13_needs_the_flag():
    # The SM120 auto rule is in the sglang wheels from 0.5.13 (server_args.py; arg_groups/overrides.py
    # from 0.5.15) and absent from 0.5.10-0.5.12.post1.
    for old in ("0.5.10", "0.5.12.post1"):
        c = get_engine("sglang").backend("nvfp4", "sm120", version=old)
        assert c.family == "flashinfer-cutlass"
        assert any("assumes --moe-runner-backend flashinfer_cutlass" in x for x in c.caveats)
    newer = get_engine("sglang").backend("nvfp4", "sm120", version="0.5.13")
    assert not any("assumes --moe" in x for x in newer.caveats)


def test_sglang_sm120_rule_reads_the_quantization_flag():
    # 0.5.13-0.5.23: auto -> flashinfer_cutlass only when quantization == "modelopt_fp4" was given.
    given = get_engine("sglang").backend("nvfp4", "sm120", version="0.5.23",
                                         flags={"quantization": "modelopt_fp4"})
    assert given.engine_backend == "flashinfer_cutlass"
    with pytest.raises(UsageError, match="--quantization modelopt_fp4"):
        get_engine("sglang").backend("nvfp4", "sm120", version="0.5.23", flags={})


@pytest.mark.parametrize("arch,needle", [("sm100", "flashinfer_trtllm"), ("sm90", "Marlin")])
def test_sglang_nvfp4_paths_not_modelled(arch, needle):
    # sglang 0.5.23 modelopt_quant.py: SM100 auto -> FLASHINFER_TRTLLM; (8,0) <= cc < (10,0) -> Marlin.
    with pytest.raises(UsageError, match=needle):
        get_engine("sglang").backend("nvfp4", arch)


def test_sglang_fp8_runs_triton():
    # sglang 0.5.23 quantization/fp8.py Fp8MoEMethod.create_moe_runner: auto -> TRITON
    # unless DeepGEMM via a DeepEP/Mooncake/NIXL all-to-all.
    c = get_engine("sglang").backend("fp8-block", "sm120")
    assert (c.family, c.family_dtype, c.block_shape) == ("triton-moe", "fp8-block", (128, 128))
    t = get_engine("sglang").backend("fp8", "sm89")
    assert (t.family, t.block_shape) == ("triton-moe", None)
    assert get_engine("sglang").backend("bf16", "sm90").family_dtype == "bf16"


def test_vllm_block_fp8_on_rtx5090_is_triton_until_deep_gemm_takes_sm120():
    # vllm oracle/fp8.py: FLASHINFER_TRTLLM (SM100), FLASHINFER_CUTLASS (block fp8 on SM90 only,
    # experts/flashinfer_cutlass_moe.py), VLLM_CUTLASS (no block fp8; cc 90..109) all decline on
    # SM120; DEEPGEMM does too until 0.23.0, so TRITON runs. From 0.24.0 platforms/cuda.py
    # support_deep_gemm takes the SM120 family and the wheel carries deep_gemm: DEEPGEMM runs.
    c = get_engine("vllm").backend("fp8-block", get_arch("sm120"), version="0.23.0")
    assert (c.family, c.engine_backend, c.block_shape) == ("triton-moe", "TRITON", (128, 128))
    with pytest.raises(UsageError, match="DeepGEMM"):
        get_engine("vllm").backend("fp8-block", get_arch("sm120"), version="0.24.0")
    c = get_engine("vllm").backend("fp8-block", "sm120", environ={"VLLM_USE_DEEP_GEMM": "0"})
    assert (c.family, c.engine_backend) == ("triton-moe", "TRITON")


def test_vllm_hopper_block_fp8_depends_on_ep():
    # vllm 0.17.0-0.33.0 oracle/fp8.py: on SM90 block fp8 moves FLASHINFER_CUTLASS to the front
    # when ep_size > 1, TRITON otherwise (tests/test_vllm_backend_versions.py: the older releases).
    assert get_engine("vllm").backend("fp8-block", "sm90", layout=Layout(ep=8)).family == "flashinfer-cutlass"
    assert get_engine("vllm").backend("fp8-block", "sm90", layout=Layout(ep=1)).family == "triton-moe"
    with pytest.raises(UsageError, match="FLASHINFER_TRTLLM"):
        get_engine("vllm").backend("fp8-block", "sm100")


def test_vllm_unquantized_and_nvfp4():
    # vllm 0.21.0-0.33.0 oracle/unquantized.py: FLASHINFER_TRTLLM (SM100 family), then
    # FLASHINFER_CUTLASS ((None, None) needs cc >= 9.0; device SM90/SM100/SM120), then TRITON;
    # both FlashInfer backends are moved to the back on SM90.
    assert get_engine("vllm").backend("bf16", "sm120").family == "flashinfer-cutlass"
    assert get_engine("vllm").backend("bf16", "sm90").family == "triton-moe"
    assert get_engine("vllm").backend("fp16", "sm89").family == "triton-moe"
    # vllm 0.33.0 oracle/nvfp4.py: trtllm/cutedsl are SM100-only, FLASHINFER_CUTLASS next.
    c = get_engine("vllm").backend("nvfp4", "sm121")
    assert (c.family, c.engine_backend) == ("flashinfer-cutlass", "FLASHINFER_CUTLASS")
    assert "--moe-backend flashinfer_cutlass" in c.selector


def test_trtllm_cutlass_paths():
    # TensorRT-LLM create_moe.py get_moe_cls: backend CUTLASS -> CutlassFusedMoE.
    c = get_engine("trtllm").backend("nvfp4", "sm120")
    assert (c.family, c.engine_backend) == ("flashinfer-cutlass", "CUTLASS")
    assert get_engine("trtllm").backend("fp8-block", "sm90").family_dtype == "fp8-block"
    with pytest.raises(UsageError, match="TensorRT-LLM"):
        get_engine("trtllm").backend("bf16", "sm120")


def test_overrides():
    t = get_engine("vllm").backend("bf16", "sm120", override="triton")
    assert (t.family, t.selector, t.overridden) == ("triton-moe", "--moe-backend triton", True)
    f = get_engine("sglang").backend("bf16", "sm90", override="flashinfer-cutlass")
    assert f.family == "flashinfer-cutlass" and f.engine_backend == "flashinfer_cutlass"
    # sglang 0.5.23 Fp8MoEMethod: flashinfer_cutlass/cutedsl have no fp8 path -> TRITON.
    s = get_engine("sglang").backend("fp8-block", "sm90", override="flashinfer-cutlass")
    assert s.family == "triton-moe" and any("Triton" in x for x in s.caveats)
    # FlashInfer's CUTLASS MoE takes MXFP4 x MXFP8 on SM100+ (vllm flashinfer_cutlass_moe.py).
    m = get_engine("vllm").backend("mxfp4", "sm120", override="flashinfer-cutlass")
    assert m.family_dtype == "mxfp8-mxfp4"
    assert get_engine("sglang").backend("nvfp4", "sm120", override="auto").overridden is False


@pytest.mark.parametrize("engine,dtype,arch,override,needle", [
    ("vllm", "nvfp4", "sm120", "triton", "not nvfp4"),
    ("vllm", "fp8-block", "sm120", "flashinfer-cutlass", "sm90 only"),
    ("vllm", "nvfp4", "sm90", "flashinfer-cutlass", "sm100"),
    ("trtllm", "bf16", "sm90", "triton", "TensorRT-LLM"),
    ("vllm", "fp8", "sm86", "triton", "FP8 tensor cores"),
    ("vllm", "bf16", "sm120", "cutlass", "unknown --backend"),
])
def test_bad_overrides(engine, dtype, arch, override, needle):
    with pytest.raises(UsageError, match=needle):
        get_engine(engine).backend(dtype, arch, override=override)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(engine="tgi", weight_dtype="bf16", arch="sm90"), "unknown engine 'tgi'; use one of sglang"),
    (dict(engine="vllm", weight_dtype="int4", arch="sm90"), "unknown weight dtype"),
    (dict(engine="vllm", weight_dtype="bf16", arch="sm999"), "unknown arch"),
    (dict(engine="vllm", weight_dtype="bf16", arch="sm90", version="latest"), "bad engine version"),
    (dict(engine="vllm", weight_dtype="bf16", arch="sm90", ep=0), "--ep must be"),
])
def test_bad_input(kwargs, needle):
    with pytest.raises(UsageError, match=needle):
        engine = get_engine(kwargs.pop("engine"))
        ep = kwargs.pop("ep", 1)
        engine.backend(layout=engine.layout(ep=ep), **kwargs)


def test_every_combination_answers_or_says_why():
    # Any engine x dtype x arch x override gives a sourced choice or a UsageError; nothing else.
    for engine, dtype, arch, ov in itertools.product(
            engine_names(), WEIGHT_DTYPES, [a.name for a in all_archs()], ("auto", "triton",
                                                                    "flashinfer-cutlass")):
        try:
            c = get_engine(engine).backend(dtype, arch, override=ov)
        except UsageError as e:
            assert str(e)
            continue
        assert isinstance(c, BackendChoice) and c.sources and c.rule and c.selector
        assert c.family in ("triton-moe", "flashinfer-cutlass")
        assert c.as_dict()["family"] == c.family


def test_vllm_bf16_on_sm120_by_version():
    # 0.20.0+: the priority list puts FLASHINFER_CUTLASS ahead of TRITON; 0.11.0-0.19.1: only with
    # VLLM_USE_FLASHINFER_MOE_FP16=1 under EP; before 0.11: Triton (vllm wheels 0.9.0-0.33.0).
    vllm = get_engine("vllm")
    ep8, env = Layout(ep=8), {"VLLM_USE_FLASHINFER_MOE_FP16": "1"}
    assert vllm.backend("bf16", "sm120", version="0.20.0").family == "flashinfer-cutlass"
    assert vllm.backend("bf16", "sm120", version="0.19.1").family == "triton-moe"
    assert vllm.backend("bf16", "sm120", version="0.19.1", environ=env, layout=ep8).family == "flashinfer-cutlass"
    assert vllm.backend("bf16", "sm120", version="0.19.1", environ=env).family == "triton-moe"
    assert vllm.backend("bf16", "sm120", version="0.10.2", environ=env, layout=ep8).family == "triton-moe"


def test_vllm_nvfp4_on_sm120_by_version():
    vllm = get_engine("vllm")
    assert vllm.backend("nvfp4", "sm120", version="0.15.0").family == "flashinfer-cutlass"
    with pytest.raises(UsageError, match="VLLM_USE_FLASHINFER_MOE_FP4"):
        vllm.backend("nvfp4", "sm120", version="0.14.1")
    assert vllm.backend("nvfp4", "sm120", version="0.12.0",
                        environ={"VLLM_USE_FLASHINFER_MOE_FP4": "1"}).family == "flashinfer-cutlass"
