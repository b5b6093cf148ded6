"""FlashInfer CUTLASS MoE family: sizeof(SharedStorage) as nvcc + CUTLASS compile it, the 60 SM120 NVFP4 tactics, bad input, blocklist."""

from __future__ import annotations

import json

import pytest

from tilefit.errors import UsageError
from tilefit.hw.catalog import get_arch
from tilefit.kernels.base import EXCEEDS_SMEM, FITS, NO_DISPATCH, UNSUPPORTED
from tilefit.kernels.flashinfer_cutlass import FAMILY

SM120 = get_arch("sm120")
SM90 = get_arch("sm90")

# nvcc 13.0 + CUTLASS (FlashInfer's pin), launcher types: (tile in elements, variant) -> (stages, sizeof(SharedStorage)), SM120 NVFP4.
COMPILED = {
    ("128x128x128", "gemm1"): (4, 89_088), ("128x128x128", "fin"): (4, 93_184), ("128x128x128", "fin+swap"): (4, 93_184),
    ("128x128x256", "gemm1"): (2, 89_088), ("128x128x256", "fin"): (2, 93_184), ("128x128x256", "fin+swap"): (2, 93_184),
    ("128x256x128", "gemm1"): (3, 98_304), ("128x256x128", "fin"): (3, 102_400), ("128x256x128", "fin+swap"): (2, 74_752),
    ("256x128x128", "gemm1"): (3, 98_304), ("256x128x128", "fin"): (3, 102_400), ("256x128x128", "fin+swap"): (2, 74_752),
    ("128x64x128", "gemm1"): (6, 101_376), ("128x64x128", "fin"): (5, 91_136), ("128x64x128", "fin+swap"): (5, 91_136),
    ("128x32x128", "gemm1"): (7, 101_376), ("128x32x128", "fin"): (6, 93_184), ("128x32x128", "fin+swap"): (6, 93_184),
}
VARIANT_TEXT = {"gemm1": "gemm1", "fin": "finalize", "fin+swap": "finalize swap-ab"}


@pytest.mark.parametrize("version", ["0.7.0", "0.7.4"])
@pytest.mark.parametrize(("tile", "variant"), sorted(COMPILED))
def test_facts_section3_rows(tile, variant, version):
    stages, total = COMPILED[(tile, variant)]
    t = FAMILY.parse_config(f"{tile} {VARIANT_TEXT[variant]}", "nvfp4", SM120)
    fp = FAMILY.footprint(t, SM120, "nvfp4", flashinfer=version)
    assert (fp.stages, fp.total) == (stages, total)
    # the verdict agrees with the footprint: fits means <= the opt-in limit (101,376 fits exactly)
    fits = total <= SM120.smem_per_block_optin
    assert FAMILY.footprint(t, SM120, "nvfp4", version).total == total
    assert (FAMILY.verdict(t, SM120, "nvfp4", "0.7.4").status == FITS) == fits


def test_finalize_128x256_breakdown():
    t = FAMILY.parse_config("128x256x128 finalize", "nvfp4", SM120)
    fp = FAMILY.footprint(t, SM120, "nvfp4")
    terms = {x.name: x.bytes for x in fp.terms}
    assert terms["epilogue storage"] == 16_896  # oracle: TensorStorage of the FINALIZE epilogue
    assert terms["tensormaps"] == 896  # 4 mainloop + 3 epilogue TMA descriptors
    assert terms["scheduler response"] == 128
    assert terms["A buffers"] + terms["B buffers"] + terms["SFA buffers"] + terms["SFB buffers"] == 82_944
    assert fp.total == 102_400 and fp.padding > 0  # whole-struct alignas(1024) rounding


def test_sixty_sm120_nvfp4_tactics_glm5_rtx_pro_6000():
    """FlashInfer 0.6.11-0.7.0: 10 tiles; gemm1 = 10 x {swap}, gemm2 = 10 x {none, finalize} x {swap}."""
    ts = FAMILY.configs(SM120, "nvfp4", flashinfer="0.7.0")
    assert len(ts) == 60
    assert sum(t.gemm == "gemm1" for t in ts) == 20 and sum(t.gemm == "gemm2" for t in ts) == 40
    assert [t.tactic_id for t in ts] == list(range(60))
    verdicts = {t: FAMILY.verdict(t, SM120, "nvfp4", "0.7.0") for t in ts}
    over = {(t.tile_text, t.fusion, t.swap_ab) for t, v in verdicts.items() if v.status == EXCEEDS_SMEM}
    assert over == {("128x256x128", "finalize", False), ("256x128x128", "finalize", False)}
    for t, v in verdicts.items():
        if v.status == EXCEEDS_SMEM:
            assert v.footprint.total == 102_400 and "over by 1,024 B" in v.reason
    no_case = {t.enum for t, v in verdicts.items() if v.status == NO_DISPATCH}
    assert no_case == {"CtaShape128x128x256B", "CtaShape256x128x128B"}
    msgs = {v.reason.split(": ", 1)[1] for v in verdicts.values() if v.status == NO_DISPATCH}
    assert msgs == {"Unsupported tile shape config 128128256 for MoE gemm.",
                    "Unsupported tile shape config 256128128 for MoE gemm."}
    assert sum(v.status == FITS for v in verdicts.values()) == 46


def test_current_flashinfer_prunes_no_dispatch_tiles():
    ts = FAMILY.configs(SM120, "nvfp4", flashinfer="0.7.4")
    assert len(ts) == 48
    statuses = [FAMILY.verdict(t, SM120, "nvfp4", "0.7.4").status for t in ts]
    assert statuses.count(NO_DISPATCH) == 0 and statuses.count(EXCEEDS_SMEM) == 2


def test_older_flashinfer_lists():
    # 0.5.2 lists the base tiles only (no FINALIZE, no swap-AB copies); 0.5.3 adds both on SM120
    assert len(FAMILY.configs(SM120, "nvfp4", flashinfer="0.5.2")) == 8
    assert len(FAMILY.configs(SM120, "nvfp4", flashinfer="0.5.3")) == 8 + 16
    old = FAMILY.configs(SM120, "nvfp4", flashinfer="0.6.9")
    assert len(old) == 60
    assert sum(FAMILY.verdict(t, SM120, "nvfp4", "0.6.9").status == NO_DISPATCH for t in old) == 36


def test_same_tiles_fit_on_sm90_budget():
    """The SM120 NVFP4 footprints all fit an H200-class 232,448 B budget; sm90's own tactics fit too."""
    for t in FAMILY.configs(SM120, "nvfp4", flashinfer="0.7.0"):
        v = FAMILY.verdict(t, SM120, "nvfp4", "0.7.0")
        if v.footprint is not None:
            assert v.footprint.total <= SM90.smem_per_block_optin
    for dtype in ("bf16", "fp8"):
        for t in FAMILY.configs(SM90, dtype):
            assert FAMILY.verdict(t, SM90, dtype).status == FITS, t.label()


def test_bad_input_is_usage_error():
    with pytest.raises(UsageError, match="128x128x128"):
        FAMILY.parse_config("96x96x96", "nvfp4", SM120)
    with pytest.raises(UsageError, match="no nvfp4 kernels on sm90"):
        FAMILY.configs(SM90, "nvfp4")
    assert FAMILY.verdict(FAMILY.parse_config("128x128x128", "nvfp4", SM120), SM90, "nvfp4").status == UNSUPPORTED
    with pytest.raises(UsageError, match="qualifier"):
        FAMILY.parse_config("128x128x128 sideways", "nvfp4", SM120)
    with pytest.raises(UsageError, match="unknown dtype"):
        FAMILY.configs(SM120, "int3")
    with pytest.raises(UsageError, match="predates"):
        FAMILY.configs(SM120, "nvfp4", flashinfer="0.4.0")


def test_parse_enum_and_element_spellings_agree():
    a = FAMILY.parse_config("CtaShape128x256x64B+finalize", "nvfp4", SM120)
    b = FAMILY.parse_config("128x256x128, finalize", "nvfp4", SM120)
    assert a == b and a.tile == (128, 256, 128) and a.gemm == "gemm2"
    mx = FAMILY.parse_config("CtaShape128x64x128B swap-ab", "mxfp8-mxfp4", SM120)
    assert mx.tile == (128, 64, 128) and mx.swap_ab  # K bytes == K elements for 8-bit activations


def test_blocklist_format():
    ts = FAMILY.configs(SM120, "nvfp4", flashinfer="0.7.0")
    doc = json.loads(FAMILY.blocklist([FAMILY.verdict(t, SM120, "nvfp4", "0.7.0") for t in ts], "0.7.0").content)
    assert set(doc) == {"_metadata", "invalid_tactics"}
    assert doc["_metadata"]["flashinfer_version"] == "0.7.0" and doc["_metadata"]["gpu"] == "*"
    g1 = doc["invalid_tactics"]["trtllm::fused_moe::gemm1::MoERunner"]
    g2 = doc["invalid_tactics"]["trtllm::fused_moe::gemm2::MoERunner"]
    assert all(i < 20 for i in g1) and all(20 <= i < 60 for i in g2)
    assert {(ts[i].tile_text, ts[i].fusion, ts[i].swap_ab) for i in g2} >= {
        ("128x256x128", "finalize", False), ("256x128x128", "finalize", False)}
    with pytest.raises(UsageError, match="0.6.15"):
        FAMILY.blocklist([], "0.6.14")  # the autotuner reads FLASHINFER_TACTICS_BLOCKLIST from 0.6.15
    assert json.loads(FAMILY.blocklist([], "0.6.15").content)["invalid_tactics"] == {}


def test_sm100_nvfp4_tactics():
    """SM100 NVFP4: 21 base configs (1SM/2SM x runtime clusters), 126 tactics; all fit 232,448 B."""
    b200 = get_arch("sm100")
    ts = FAMILY.configs(b200, "nvfp4")
    assert len(ts) == 126 and {t.tile for t in ts} == {(128, 64, 256), (128, 128, 256), (128, 256, 256)}
    for t in ts:
        v = FAMILY.verdict(t, b200, "nvfp4")
        assert v.status == FITS and v.footprint.source == "model"
    two_sm = FAMILY.parse_config("128x256x256 2sm finalize", "nvfp4", b200)
    assert FAMILY.footprint(two_sm, b200, "nvfp4").stages == 4
    with pytest.raises(UsageError, match="no nvfp4 kernels on sm90"):
        FAMILY.parse_config("128x128x128", "nvfp4", SM90)


def test_untuned_defaults_are_each_gemms_first_tactic():
    g1 = FAMILY.default_config(SM120, "nvfp4", flashinfer="0.7.0")
    g2 = FAMILY.default_config(SM120, "nvfp4", flashinfer="0.7.0", gemm="gemm2")
    assert (g1.tactic_id, g1.enum) == (0, "CtaShape128x128x128B")
    assert (g2.tactic_id, g2.fusion, g2.swap_ab) == (20, "none", False)
