"""SM100/SM103 FP8, MXFP8 x MXFP4 and bf16 tactic lists, their oracle rows, the derived SM100 model, the CLI."""

from __future__ import annotations

import json

import pytest

from tilefit.cli.main import main
from tilefit.errors import UsageError
from tilefit.hw.catalog import get_arch
from tilefit.kernels.base import EXCEEDS_SMEM, FITS, NO_DISPATCH
from tilefit.kernels.flashinfer_cutlass import FAMILY, calibration, catalog, smem

SM100, SM103 = get_arch("sm100"), get_arch("sm103")
# Every FlashInfer wheel from 0.6.0 to 0.7.4 carries the same get_candidate_configs_sm100 /
# get_candidate_configs_sm100_dynamic_cluster_shape (cutlass_heuristic.cpp) and the same expansion in
# getTmaWarpSpecializedConfigs (moe_gemm_template_dispatch.h); one version per CUTLASS pin, plus the latest.
VERSIONS = ["0.6.0", "0.6.7", "0.6.11", "0.7.4"]
# (dtype) -> (gemm1 tactics, gemm2 tactics), counted by hand from those sources:
#  fp8: 2 epilogue schedules x (9 + 15 + 15 + 15) configs over runtime clusters 1x1x1, 4x1x1, 4x2x1, none
#       = 108 base; gemm1 = 108 x 2 (swap-AB) = 216; gemm2 adds FINALIZE for the 54 TMA ones: 162 x 2 = 324.
#  mxfp8-mxfp4: the FP4 branch (TMA only) 3 + 6 + 6 + 6 = 21 base; gemm1 42, gemm2 (21 + 21) x 2 = 84.
#  bf16: fp8's list without 128x16x128B: 2 x (8 + 14 + 14 + 14) = 100 base; gemm1 200 + 9 SM80 multistage
#       (getAmpereConfigs: 3 tiles x stages 2..4) = 209; gemm2 (100 + 50 FINALIZE) x 2 + 9 = 309.
COUNTS = {"fp8": (216, 324), "mxfp8-mxfp4": (42, 84), "bf16": (209, 309)}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("arch", [SM100, SM103], ids=["sm100", "sm103"])
@pytest.mark.parametrize("dtype", sorted(COUNTS))
def test_list_counts(dtype, arch, version):
    g1 = FAMILY.configs(arch, dtype, flashinfer=version, gemm="gemm1")
    g2 = FAMILY.configs(arch, dtype, flashinfer=version, gemm="gemm2")
    assert (len(g1), len(g2)) == COUNTS[dtype]
    assert [t.tactic_id for t in g1 + g2] == list(range(len(g1) + len(g2)))


def test_fp8_order_and_epilogue_rules():
    g1 = FAMILY.configs(SM100, "fp8", gemm="gemm1")
    g2 = FAMILY.configs(SM100, "fp8", gemm="gemm2")
    # TMA epilogue first (54), then NO_SMEM (54); FP8_ONLY's 128x16 closes each runtime cluster's list.
    assert [t.epilogue for t in g1[:108]] == ["tma"] * 54 + ["nosmem"] * 54
    assert g1[0].tile == (128, 128, 128) and g1[0].dynamic_cluster == (1, 1, 1)
    assert g1[8].tile == (128, 16, 128) and g1[53].tile == (128, 16, 128) and g1[53].dynamic_cluster is None
    # 2SM tactics never on runtime cluster 1x1x1 (M of the cluster must be even).
    assert not [t for t in g1 if t.cluster[0] == 2 and t.dynamic_cluster == (1, 1, 1)]
    # FINALIZE only on the TMA epilogue ("Finalize fusion is only supported for TMA epilogue schedule").
    fin = [t for t in g2 if t.fusion == "finalize"]
    assert len(fin) == 108 and {t.epilogue for t in fin} == {"tma"}
    assert all(not t.swap_ab for t in g1[:108]) and all(t.swap_ab for t in g1[108:])


def test_sm103_runs_the_sm100_kernels():
    """FP8 and MXFP8 x MXFP4 on sm103 dispatch SHAPE_CASE(100, ...) kernels: same list, same bytes."""
    for dtype in COUNTS:
        a = FAMILY.configs(SM100, dtype)
        b = FAMILY.configs(SM103, dtype)
        assert [catalog.with_changes(t, arch="sm103") for t in a] == list(b)
        for t100, t103 in list(zip(a, b))[::17]:
            v100, v103 = FAMILY.verdict(t100, SM100, dtype), FAMILY.verdict(t103, SM103, dtype)
            assert v100.status == v103.status and v100.footprint.total == v103.footprint.total


def test_bf16_list_shape():
    """bf16 K is 64 elements per 128 B; the SM80 multistage fallbacks close each GEMM's list."""
    g1 = FAMILY.configs(SM100, "bf16", gemm="gemm1")
    assert {t.tile[2] for t in g1 if t.schedule == "tma-ws"} == {64}
    assert not [t for t in g1 if t.tile[1] == 16]  # 128x16x128B is FP8_ONLY
    assert [t.schedule for t in g1[200:]] == ["ampere"] * 9 and g1[-1].stages == 4
    with pytest.raises(UsageError, match="no nvfp4 kernels on sm90") as exc:
        catalog.tactics("sm90", "nvfp4")
    assert "\n" not in str(exc.value)


NEW_ROWS = [r for r in calibration.rows() if r["arch"] == "sm100" and r["dtype"] in COUNTS]


def test_every_new_tactic_has_an_oracle_row():
    """Each kernel type of every catalogued version was compiled under the CUTLASS its version pins, and
    the derived model gives that row's stages and bytes."""
    assert NEW_ROWS and not [r for r in NEW_ROWS if "error" in r]
    assert {r["cutlass"] for r in NEW_ROWS} == {"4.2.1", "4.4.2", "4.5.0"}
    for version in VERSIONS:
        for dtype in COUNTS:
            for t in FAMILY.configs(SM100, dtype, flashinfer=version):
                if t.schedule != "tma-ws":
                    continue  # SM80 multistage fallbacks (bf16): outside the TMA-WS probe
                fp = smem.footprint(t, version)
                row = calibration.find(smem.profile_for(version).cutlass, "sm100", dtype, t.tile, t.cluster,
                                       t.fusion, t.swap_ab, t.dynamic_cluster is not None, t.epilogue)
                assert row is not None and (fp.total, fp.stages) == (row["shared_storage"], row["stages"])


@pytest.mark.parametrize("row", NEW_ROWS[::7], ids=lambda r: f"{r['cutlass']}-{r['dtype']}-"
                         f"{'x'.join(map(str, r['tile']))}-c{r['cluster'][0]}-{r.get('epilogue_schedule', 'tma')}-"
                         f"{r['fusion']}-{'swap' if r['swap_ab'] else 'noswap'}")
def test_oracle_rows_are_self_consistent(row):
    """The struct sizes the probe printed add up: SharedStorage holds tensors, pipelines and tensormaps,
    the mainloop holds its stages, and nothing exceeds the 232,448 B the builder divides."""
    assert row["kernel_tensors"] >= row["mainloop_tensors"] + row["epilogue_tensors"]
    assert row["shared_storage"] >= row["kernel_tensors"] + row["kernel_pipelines"] + row["kernel_tensormaps"]
    assert row["shared_storage"] % row["align"] == 0
    m, n, k = row["tile"]
    n_cta = n // row["cluster"][0]  # a 2SM MMA splits B's N rows over the CTA pair; A keeps M rows
    # FP8 e4m3 both operands; MXF8F6F4 keeps FP4 weights in a byte per element: 8 bits either way.
    assert row["mainloop_tensors"] >= row["stages"] * (m + n_cta) * k
    if row.get("epilogue_schedule") == "nosmem":
        assert row["epilogue_tensors"] <= 1 and row["fusion"] == "none"
    assert row["shared_storage"] <= smem.BUILDER_CAPACITY["sm100"]


@pytest.mark.parametrize("version", ["0.6.0", "0.7.4"])
def test_rows_exactly_at_the_limit_fit(version):
    """FP8 64x64x128 1SM on the NO_SMEM epilogue needs exactly 232,448 B under CUTLASS 4.4.2/4.5.0 and
    64x128x128 2SM swap-AB on TMA exactly that under 4.2.1: at the opt-in limit, so they fit (<=)."""
    text = "64x64x128 nosmem" if version == "0.7.4" else "64x128x128 2sm swap-ab"
    t = FAMILY.parse_config(text, "fp8", SM100)
    t = catalog.with_changes(t, dynamic_cluster=None if version == "0.7.4" else (4, 1, 1))
    v = FAMILY.verdict(t, SM100, "fp8", version)
    assert v.footprint.total == SM100.smem_per_block_optin == 232_448
    assert v.status == FITS and v.margin == 0


def test_sm100_breakdown_adds_up():
    """FP8 64x64x128 1SM NO_SMEM under CUTLASS 4.5.0: the builder's arithmetic and the struct's terms."""
    t = FAMILY.parse_config("64x64x128 nosmem", "fp8", SM100)
    fp = FAMILY.footprint(t, SM100, "fp8", flashinfer="0.7.4")
    terms = {x.name: x.bytes for x in fp.terms}
    assert fp.stages == 14 and terms["A buffers"] == terms["B buffers"] == 14 * 64 * 128
    # 232,448 - carve-out (accumulator 4 stages, 2 CLC pipelines and responses, 5 x 2 tensormaps, ...)
    assert "230,280 capacity - 1 epilogue carve-out) // 16,400 per stage = 14 stages" in fp.notes[0]
    assert fp.total == 232_448 and sum(terms.values()) <= fp.total
    # Block-scaled: the scale factors are their own term; 2SM halves B but not SFB.
    t = FAMILY.parse_config("128x256x256 2sm finalize", "nvfp4", SM100)
    terms = {x.name: x.bytes for x in FAMILY.footprint(t, SM100, "nvfp4", flashinfer="0.7.4").terms}
    assert terms["B buffers"] == terms["A buffers"] and terms["scale-factor buffers"] > 0


def test_parse_nosmem_and_reject_it_with_finalize():
    t = FAMILY.parse_config("64x32x128 nosmem", "fp8", SM100)
    assert t.epilogue == "nosmem" and "nosmem-epi" in t.label()
    with pytest.raises(UsageError, match="NO_SMEM"):
        FAMILY.parse_config("64x32x128 nosmem finalize", "fp8", SM100)
    with pytest.raises(UsageError, match="NO_SMEM"):
        FAMILY.parse_config("128x128x128 nosmem", "fp8", get_arch("sm90"))


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("arch", ["sm100", "sm103"])
@pytest.mark.parametrize("dtype", ["fp8", "mxfp8-mxfp4", "bf16"])
def test_cli_fit_sm100_sm103(capsys, arch, dtype):
    rc, out, _ = _cli(capsys, "fit", "--family", "flashinfer-cutlass", "--arch", arch, "--dtype", dtype, "--json")
    assert rc == 0
    data = json.loads(out)
    rows = data["rows"] if isinstance(data, dict) else data
    assert len(rows) == sum(COUNTS[dtype])
    statuses = {r["status"] for r in rows}
    assert statuses <= {FITS, EXCEEDS_SMEM, NO_DISPATCH} and FITS in statuses


def test_cli_fit_sm103_default_dtype(capsys):
    rc, out, _ = _cli(capsys, "fit", "--family", "flashinfer-cutlass", "--arch", "sm103", "--all")
    # nvfp4 comes first now that sm103's own NVFP4 list is catalogued (its Ultra kernels lead it).
    assert rc == 0 and "nvfp4 on sm103" in out and "sm103-ultra" in out and "128x64x256" in out


@pytest.mark.parametrize("argv", [
    ("--arch", "sm100", "--dtype", "nvfp4", "--config", "128x128x256 ultra"),  # SM103's own kernel
    ("--arch", "sm100", "--dtype", "fp8", "--config", "128x48x128"),  # unknown tile
    ("--arch", "sm100", "--dtype", "fp8", "--config", "128x128x128 nosmem finalize"),
])
def test_cli_bad_input_exits_2(capsys, argv):
    rc, _, err = _cli(capsys, "fit", "--family", "flashinfer-cutlass", *argv)
    assert rc == 2
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1
