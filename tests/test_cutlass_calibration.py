"""The SharedStorage model against the nvcc oracle's calibration table, row by row (no compiler needed)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilefit.errors import UsageError
from tilefit.hw.catalog import get_arch
from tilefit.kernels.base import EXCEEDS_SMEM, FITS, NO_DISPATCH, FitVerdict
from tilefit.kernels.flashinfer_cutlass import FAMILY, calibration, catalog, smem

ROWS = [r for r in calibration.rows() if "error" not in r]
# Every catalogued FlashInfer version boundary, plus the latest.
VERSIONS = sorted({".".join(map(str, tl.min)) for tl in catalog.tactic_lists()} | {catalog.latest_version()},
                  key=catalog.parse_version)


def _flashinfer_for(cutlass: str) -> str:
    return ".".join(map(str, smem.profile_by_cutlass(cutlass).flashinfer_min))


def _tactic(r: dict) -> catalog.Tactic:
    return catalog.Tactic(r["arch"], r["dtype"], r["enum"], tuple(r["tile"]), tuple(r["cluster"]),
                          r["fusion"], r["swap_ab"], dynamic_cluster=(1, 1, 1) if r.get("dynamic") else None,
                          epilogue=r.get("epilogue_schedule", "tma"), native=r.get("native", False))


def _degenerate(r: dict) -> bool:
    """Rows where that CUTLASS builds a degenerate scale-factor buffer: the model declines them."""
    if r["arch"] != "sm120" or r["dtype"] not in smem.BLOCK_SCALED:
        return False
    vec = smem.BLOCK_SCALED[r["dtype"]][2]
    n, k = r["tile"][1], r["tile"][2]
    return k // vec < 4 or (n < 128 and smem.profile_by_cutlass(r["cutlass"])["sm120_sfb_min_n"] < 128)


def test_table_covers_all_three_cutlass_pins():
    assert {r["cutlass"] for r in ROWS} == {"4.2.1", "4.4.2", "4.5.0"}
    assert {r["arch"] for r in ROWS} == {"sm90", "sm100", "sm103", "sm120"}
    assert all(r.get("native") for r in ROWS if r["arch"] == "sm103")  # else sm100's rows answer
    assert len(ROWS) >= 600


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['cutlass']}-{r['arch']}-{r['dtype']}-"
                         f"{'x'.join(map(str, r['tile']))}-c{r['cluster'][0]}{r['cluster'][1]}-"
                         f"{'dyn-' if r.get('dynamic') else ''}{r.get('epilogue_schedule', 'tma')}-{r['fusion']}-{'swap' if r['swap_ab'] else 'noswap'}")
def test_model_equals_oracle_row(row):
    t = _tactic(row)
    if _degenerate(row):
        with pytest.raises(UsageError, match="degenerate"):
            smem.footprint(t, _flashinfer_for(row["cutlass"]))
        return
    fp = smem.footprint(t, _flashinfer_for(row["cutlass"]))
    # Derived on every arch: only the epilogue's storage is read from the table.
    assert fp.source == "model"
    assert fp.stages == row["stages"]
    assert fp.total == row["shared_storage"]
    assert sum(x.bytes for x in fp.terms if x.name.endswith("buffers")) <= row["mainloop_tensors"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("arch", "dtype"), [("sm120", "nvfp4"), ("sm120", "mxfp8-mxfp4"),
                                             ("sm121", "nvfp4"), ("sm90", "bf16"), ("sm90", "fp8"),
                                             ("sm100", "nvfp4"), ("sm100", "fp8"), ("sm100", "mxfp8-mxfp4"),
                                             ("sm103", "fp8"), ("sm103", "mxfp8-mxfp4")])
def test_every_catalog_tactic_gets_a_verdict(arch, dtype, version):
    """Never a crash: each tactic FlashInfer offers is judged; degenerate tiles are never dispatched."""
    a = get_arch(arch)
    try:
        ts = FAMILY.configs(a, dtype, flashinfer=version)
    except UsageError:
        return  # this version offers no such list (e.g. mxfp8-mxfp4 before 0.6.0)
    for t in ts:
        v = FAMILY.verdict(t, a, dtype, version)
        assert isinstance(v, FitVerdict) and v.status in (FITS, EXCEEDS_SMEM, NO_DISPATCH)
        if v.status != NO_DISPATCH:
            assert v.footprint is not None and v.footprint.total > 0


@settings(max_examples=150, deadline=None)
@given(tile=st.sampled_from(sorted({tile for a, d in [("sm120", "nvfp4"), ("sm120", "mxfp8-mxfp4"),
                                                      ("sm90", "bf16"), ("sm90", "fp8"),
                                                      ("sm100", "nvfp4")]
                                     for tile in catalog.known_tiles(a, d)})),
       dtype=st.sampled_from(list(catalog.DTYPES)), arch=st.sampled_from(["sm90", "sm120", "sm100", "sm80"]),
       fusion=st.booleans(), swap=st.booleans(), version=st.sampled_from(VERSIONS))
def test_model_never_crashes(tile, dtype, arch, fusion, swap, version):
    """Any spelling of any catalogued tile gives a verdict or a one-line UsageError, nothing else."""
    a = get_arch(arch)
    text = tile + (" finalize" if fusion else "") + (" swap-ab" if swap else "")
    try:
        t = FAMILY.parse_config(text, dtype, a)
        v = FAMILY.verdict(t, a, dtype, version)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assert v.status in (FITS, EXCEEDS_SMEM, NO_DISPATCH, "unsupported")
