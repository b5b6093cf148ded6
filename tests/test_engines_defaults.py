"""Engine default Triton fused-MoE configs. Expected dicts were read from each engine's
get_default_config in the published wheels named in the comments (read 2026-11-29)."""

import pytest

from tilefit.engines import get_engine
from tilefit.errors import UsageError
from tilefit.hw.catalog import get_arch

SM120 = get_arch("sm120")
BATCHES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)


def default(engine, M, **kwargs):
    """One batch's default through the engine's protocol method."""
    return get_engine(engine).default_configs([M], **kwargs)[M]


def cfg(bm, bn, bk, gm, w, s):
    return {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": gm,
            "num_warps": w, "num_stages": s}


def test_vllm_legacy_defaults():
    # vllm 0.11.0 and 0.16.0 fused_moe.py: block fp8 {64, bn, bk, 32, 4 warps, 3 stages};
    # M <= E {16, 32, 64, 1}; else {64, 64, 32, 8}; no num_warps/num_stages keys, so Triton's
    # launch defaults (4 warps, 3 stages; triton 3.6.0 CUDAOptions) apply.
    d = default("vllm", M=16, E=32, weight_dtype="bf16", arch=SM120,
                              version="0.16.0")
    assert d.config == cfg(16, 32, 64, 1, 4, 3)
    assert d.from_engine == ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")
    assert len(d.sources) == 2  # the engine and Triton's launch defaults
    d = default("vllm", M=256, E=32, weight_dtype="fp8", arch=SM120,
                              version="0.11.0")
    assert d.config == cfg(64, 64, 32, 8, 4, 3)
    d = default("vllm", M=4, E=32, weight_dtype="fp8-block", arch=SM120,
                              version="0.16.0")
    assert d.config == cfg(64, 128, 128, 32, 4, 3) and len(d.from_engine) == 6


def test_vllm_block_fp8_by_version():
    # 0.17.0 (PR #34846): BM 16 if M <= 64 else 64; GM 1 if M <= 16 else 32; 3 stages.
    old = default("vllm", M=4, E=32, weight_dtype="fp8-block", arch=SM120,
                                version="0.17.0")
    assert old.config == cfg(16, 128, 128, 1, 4, 3)
    # 0.25.0+ (absent in 0.24.0): BLOCK_SIZE_N 64 at M <= 8, 4 stages at M <= 4.
    new = default("vllm", M=4, E=32, weight_dtype="fp8-block", arch=SM120,
                                version="0.25.0")
    assert new.config == cfg(16, 64, 128, 1, 4, 4)
    assert default("vllm", M=8, E=32, weight_dtype="fp8-block", arch=SM120
                                 ).config == cfg(16, 64, 128, 1, 4, 3)
    assert default("vllm", M=100, E=32, weight_dtype="fp8-block", arch=SM120
                                 ).config == cfg(64, 128, 128, 32, 4, 3)


def test_vllm_batch_aware_defaults():
    # vllm 0.17.0-0.33.0 general branch: BM by M (16/32/64/128 at 32/96/512), BN 64 if M <= 64
    # else 128, BK 128 for fp8 or M <= 64 else 64, GM 16 if M // E > 128, warps 4 if M <= 128
    # else 8, stages 4 if M <= 32 else 3.
    assert default("vllm", M=4096, E=32, weight_dtype="fp8", arch=SM120
                                 ).config == cfg(128, 128, 128, 1, 8, 3)
    assert default("vllm", M=16384, E=32, weight_dtype="bf16", arch=SM120
                                 ).config == cfg(128, 128, 64, 16, 8, 3)
    assert default("vllm", M=48, E=256, weight_dtype="bf16", arch=SM120,
                                 version="0.21.0").config == cfg(32, 64, 128, 1, 4, 3)


def test_sglang_fp8_defaults_and_the_low_smem_switch():
    # sglang 0.5.10 fused_moe_triton_config.py: per-tensor fp8, M > E -> 128x256x128, GM 32,
    # 8 warps, 4 stages (M <= E: 64x128x128, GM 1, 4 warps, 4 stages).
    legacy = default("sglang", M=256, E=32, weight_dtype="fp8", arch=SM120,
                                   version="0.5.10")
    assert legacy.config == cfg(128, 256, 128, 32, 8, 4)
    # sglang 0.5.15-0.5.23: below 128 KiB opt-in shared memory (SM120: 101,376 B) the per-tensor
    # fp8 default becomes 64x128x256/GM64/4 warps/2 stages (M > E), 32x64x256/GM1/4/4 (M <= E).
    assert default("sglang", M=256, E=32, weight_dtype="fp8", arch=SM120
                                 ).config == cfg(64, 128, 256, 64, 4, 2)
    assert default("sglang", M=8, E=32, weight_dtype="fp8", arch="sm89"
                                 ).config == cfg(32, 64, 256, 1, 4, 4)
    # H200 (232,448 B) keeps the large default.
    assert default("sglang", M=256, E=32, weight_dtype="fp8", arch="sm90"
                                 ).config == cfg(128, 256, 128, 32, 8, 4)
    # Block fp8 (all versions read): 64 x 128 x 128, GM 32, 4 warps, 3 stages.
    assert default("sglang", M=256, E=32, weight_dtype="fp8-block", arch=SM120
                                 ).config == cfg(64, 128, 128, 32, 4, 3)


def _pipelined_bytes(c, elem_bytes):
    # Triton's software pipeliner keeps (num_stages - 1) A and B tiles in shared memory:
    # (stages - 1) * (BM + BN) * BK * bytes. SGLang PR #28038 reports this matches Triton's
    # "Required: 147456" byte for byte; tilefit's calibrated bf16 model on sm120 agrees
    # (128x128x64/3 stages -> 65,536; 64x64x32/3 -> 16,384). Block-scale loads add a few
    # hundred bytes (our fp8-block kernel: 148,480 for 128x256x128/8w/4s on sm120, triton 3.6).
    return (c["num_stages"] - 1) * (c["BLOCK_SIZE_M"] + c["BLOCK_SIZE_N"]) \
        * c["BLOCK_SIZE_K"] * elem_bytes


def test_which_engine_default_cannot_launch_on_sm120():
    limit = SM120.smem_per_block_optin  # 101,376 B (CUDA Programming Guide, compute capability 12.0)
    # The real case: SGLang < 0.5.15 with a per-tensor FP8 MoE model (e.g. an FP8-Dynamic
    # checkpoint) on an RTX 5090 / RTX PRO 6000 at M > E picks 128x256x128, 4 stages:
    # (4 - 1) * (128 + 256) * 128 * 1 B = 147,456 B > 101,376 B -> OutOfResources at the first
    # prefill (SGLang PR #28038 on SM121, PR #24975 on L20/sm89, issue #5995 on sm89).
    big = default("sglang", M=512, E=128, weight_dtype="fp8", arch=SM120,
                                version="0.5.10").config
    assert _pipelined_bytes(big, 1) == 147_456 > limit
    # vLLM: no default of any version read (0.11.0-0.33.0) reaches the limit on SM120; the
    # largest is 128x128x128 fp8 or 128x128x64 bf16 at 3 stages = 65,536 B. So the vLLM
    # "default does not fit" case needs a non-default config (a tuned file from another GPU).
    worst = 0
    for version in ("0.11.0", "0.16.0", "0.17.0", "0.25.0", "0.33.0"):
        for dtype, eb in (("bf16", 2), ("fp16", 2), ("fp8", 1), ("fp8-block", 1)):
            for E in (8, 32, 128, 256):
                for d in get_engine("vllm").default_configs(BATCHES, E=E, weight_dtype=dtype,
                                                arch=SM120, version=version).values():
                    worst = max(worst, _pipelined_bytes(d.config, eb))
    assert worst == 65_536 < limit


def test_conversion_to_the_family_config():
    d = default("vllm", M=4096, E=32, weight_dtype="fp8", arch=SM120)
    c = d.as_moe_config()
    assert c.as_dict() == d.config and d.as_dict()["version_range"] == "vllm >= 0.25.0"


@pytest.mark.parametrize("engine,kwargs,needle", [
    ("trtllm", dict(M=1, E=8, weight_dtype="bf16", arch="sm90"), "TensorRT-LLM"),
    ("vllm", dict(M=1, E=8, weight_dtype="nvfp4", arch="sm120"), "not nvfp4"),
    ("vllm", dict(M=0, E=8, weight_dtype="bf16", arch="sm90"), ">= 1"),
    ("sglang", dict(M=1, E=8, weight_dtype="bf16", arch="sm90", version="x"), "bad engine version"),
    ("tgi", dict(M=1, E=8, weight_dtype="bf16", arch="sm90"), "unknown engine"),
])
def test_bad_input(engine, kwargs, needle):
    with pytest.raises(UsageError, match=needle):
        default(engine, **kwargs)
