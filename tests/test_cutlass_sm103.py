"""SM103 NVFP4: FlashInfer's list (SM103-native Ultra kernels, then SM100's), its oracle rows, the model."""

from __future__ import annotations

import json

import pytest

from tilefit.cli.main import main
from tilefit.errors import UsageError
from tilefit.hw.catalog import get_arch
from tilefit.kernels.base import FITS, UNSUPPORTED
from tilefit.kernels.flashinfer_cutlass import FAMILY, calibration, catalog, smem

SM100, SM103 = get_arch("sm100"), get_arch("sm103")
# One FlashInfer version per CUTLASS pin (4.2.1, 4.4.2, 4.5.0), plus the latest.
VERSIONS = ["0.6.0", "0.6.7", "0.6.11", "0.7.4"]
# Counted by hand from get_candidate_configs_sm100(sm = 103) and getTmaWarpSpecializedConfigs:
#   native: 2 epilogue schedules x (2 + 4 + 4 + 4) over runtime clusters 1x1x1, 4x1x1, 4x2x1, none = 28;
#   then the SM100 NVFP4 list, 21 (TMA only): 49 base. gemm1 = 49 x 2 (swap-AB) = 98;
#   gemm2 adds FINALIZE copies of the 14 + 21 TMA configs: (49 + 35) x 2 = 168.
COUNTS = (98, 168)


@pytest.mark.parametrize("version", VERSIONS)
def test_list_counts_and_order(version):
    g1 = FAMILY.configs(SM103, "nvfp4", flashinfer=version, gemm="gemm1")
    g2 = FAMILY.configs(SM103, "nvfp4", flashinfer=version, gemm="gemm2")
    assert (len(g1), len(g2)) == COUNTS
    assert [t.tactic_id for t in g1 + g2] == list(range(sum(COUNTS)))
    # SM103's own kernels first (TMA then NO_SMEM epilogue), then exactly SM100's list.
    assert [t.native for t in g1[:49]] == [True] * 28 + [False] * 21
    assert [t.epilogue for t in g1[:28]] == ["tma"] * 14 + ["nosmem"] * 14
    sm100 = FAMILY.configs(SM100, "nvfp4", flashinfer=version, gemm="gemm1")[:21]
    assert [catalog.with_changes(t, arch="sm100", tactic_id=None) for t in g1[28:49]] == \
        [catalog.with_changes(t, tactic_id=None) for t in sm100]
    assert {t.tile[:2] for t in g1 if t.native} == {(128, 128), (128, 256)}
    assert not [t for t in g1 if t.native and t.cluster[0] == 2 and t.dynamic_cluster == (1, 1, 1)]
    fin = [t for t in g2 if t.fusion == "finalize"]
    assert len(fin) == 70 and {t.epilogue for t in fin} == {"tma"}
    assert all(catalog.dispatch_problem(t) is None for t in g1 + g2)


def test_sm103_nvfp4_before_0_6_0_is_not_read_and_says_so():
    """FlashInfer 0.5.2 does offer Blackwell tactics on sm100-119 (cutlass_heuristic.cpp l.540:
    `sm >= 100 && sm < 120`); the catalog reads them from 0.6.0, so an earlier release is "not read",
    never "none", and the nearest read release is offered."""
    with pytest.raises(UsageError, match=r"has not read FlashInfer 0.5.2's nvfp4 CUTLASS MoE tactics on sm103 "
                                         r"\(read: 0.6.0, .*\); pass --flashinfer 0.6.0"):
        catalog.tactics("sm103", "nvfp4", "0.5.2")


NATIVE_ROWS = [r for r in calibration.rows() if r.get("native")]


def test_every_native_tactic_has_an_oracle_row_the_model_equals():
    """Each SM103 kernel type of every catalogued version was compiled (nvcc -arch=sm_103a) under the
    CUTLASS its version pins, and the derived model gives that row's stages and bytes."""
    assert NATIVE_ROWS and not [r for r in NATIVE_ROWS if "error" in r]
    assert {r["cutlass"] for r in NATIVE_ROWS} == {"4.2.1", "4.4.2", "4.5.0"}
    assert {r["arch"] for r in NATIVE_ROWS} == {"sm103"}
    for version in VERSIONS:
        for t in FAMILY.configs(SM103, "nvfp4", flashinfer=version):
            if not t.native:
                continue
            fp = smem.footprint(t, version)
            row = calibration.find(smem.profile_for(version).cutlass, "sm103", "nvfp4", t.tile, t.cluster,
                                   t.fusion, t.swap_ab, t.dynamic_cluster is not None, t.epilogue, native=True)
            assert row is not None and (fp.total, fp.stages) == (row["shared_storage"], row["stages"]), t.label()


@pytest.mark.parametrize("row", NATIVE_ROWS[::11], ids=lambda r: f"{r['cutlass']}-{'x'.join(map(str, r['tile']))}"
                         f"-c{r['cluster'][0]}-{r.get('epilogue_schedule', 'tma')}-{r['fusion']}-{r['swap_ab']}")
def test_native_rows_are_self_consistent(row):
    """Per AB stage the mainloop holds 128 B of K for A's M rows and B's N rows (half N on 2SM)."""
    m, n, _ = row["tile"]
    n_cta = n // row["cluster"][0]
    assert row["mainloop_tensors"] >= row["stages"] * (m + n_cta) * 128
    assert row["shared_storage"] >= row["kernel_tensors"] + row["kernel_pipelines"] + row["kernel_tensormaps"]
    assert row["shared_storage"] <= smem.BUILDER_CAPACITY["sm100"]


def test_sm100_kernels_on_sm103_match_sm100():
    a = [t for t in FAMILY.configs(SM103, "nvfp4") if not t.native][::9]
    for t in a:
        v103 = FAMILY.verdict(t, SM103, "nvfp4")
        v100 = FAMILY.verdict(catalog.with_changes(t, arch="sm100"), SM100, "nvfp4")
        assert v103.footprint.total == v100.footprint.total


def test_parse_ultra():
    t = FAMILY.parse_config("128x256x256 ultra 2sm finalize", "nvfp4", SM103)
    assert t.native and t.arch == "sm103" and "sm103-ultra" in t.label()
    v = FAMILY.verdict(t, SM103, "nvfp4")
    assert v.status == FITS and v.footprint.total <= SM103.smem_per_block_optin
    plain = FAMILY.parse_config("128x256x256 2sm finalize", "nvfp4", SM103)
    assert not plain.native and FAMILY.verdict(plain, SM103, "nvfp4").footprint.total != v.footprint.total
    assert FAMILY.verdict(t, SM100, "nvfp4").status == UNSUPPORTED
    with pytest.raises(UsageError, match="sm103 only"):
        FAMILY.parse_config("128x128x256 ultra", "nvfp4", SM100)
    with pytest.raises(UsageError, match="sm103 only"):
        FAMILY.parse_config("128x128x128 ultra", "fp8", SM103)


def test_cli_fit_sm103_nvfp4(capsys):
    try:
        rc = main(["fit", "--family", "flashinfer-cutlass", "--arch", "sm103", "--dtype", "nvfp4", "--json"])
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr().out
    assert rc == 0
    data = json.loads(out)
    rows = data["rows"] if isinstance(data, dict) else data
    assert len(rows) == sum(COUNTS) and FITS in {r["status"] for r in rows}
