"""The triton-moe SMEM model against the Triton compiler: the recorded oracle table (every bf16, fp8
(per-tensor) and fp8-block (128x128 block scales) grid config on sm90 and sm120, every distinct
config on sm80/86/89/100), and a few live compiles (marked slow). Also the family protocol and the oracle's disk cache.
"""

from __future__ import annotations

import json
import os
import random
from importlib import resources

import pytest

from tilefit.errors import MissingDependency, UsageError
from tilefit.hw.catalog import get_arch
from tilefit.kernels.base import EXCEEDS_SMEM, FITS, UNSUPPORTED
from tilefit.kernels.triton_moe import FAMILY, smem
from tilefit.kernels.triton_moe.config import GRID, MoEConfig


def _table():
    version = smem.model_version()
    path = resources.files("tilefit.kernels.triton_moe") / "data" / f"oracle_triton-{version}.json"
    return json.loads(path.read_text())


TABLE = _table()


def _recorded(arch: str, dtype: str, cfg: MoEConfig) -> int:
    return TABLE["entries"][smem.table_key(arch, dtype, cfg)]


@pytest.mark.parametrize("arch", ["sm90", "sm120"])
@pytest.mark.parametrize("dtype", ["bf16", "fp8", "fp8-block"])
def test_model_equals_oracle_on_every_grid_config(arch, dtype):
    a = get_arch(arch)
    grid = FAMILY.configs(a, dtype)
    assert len(grid) == 1920  # fp8-block too: BLOCK_SIZE_N 32/64 and BLOCK_SIZE_K 64 included
    bad = [(c.label(), smem.total_bytes(c, a, dtype), _recorded(arch, dtype, c)) for c in grid
           if smem.total_bytes(c, a, dtype) != _recorded(arch, dtype, c)
           or FAMILY.footprint(c, a, dtype).total != _recorded(arch, dtype, c)]
    assert not bad, bad[:10]


@pytest.mark.parametrize("arch", ["sm90", "sm120"])
def test_row_scale_model_equals_oracle_on_every_grid_config(arch):
    """fp8-block with SGLang's per-row weight scales: its own recorded table, every grid config;
    never more than the per-column form (it drops the column scales' buffers), the same where
    BLOCK_SIZE_N spans two scale groups (both forms then scale per column), and less somewhere."""
    a = get_arch(arch)
    grid = FAMILY.configs(a, "fp8-block")
    bad, fewer = [], 0
    for c in grid:
        row = smem.total_bytes(c, a, "fp8-block", "row")
        column = smem.total_bytes(c, a, "fp8-block")
        if row != _recorded(arch, smem.ROW_TABLE, c) or \
                FAMILY.footprint(c, a, "fp8-block", scales="row").total != row:
            bad.append((c.label(), row, _recorded(arch, smem.ROW_TABLE, c)))
        assert row <= column and (c.block_n <= 128 or row == column), (c.label(), row, column)
        fewer += row < column
    assert not bad, bad[:10]
    assert fewer > 0


@pytest.mark.parametrize("arch", ["sm80", "sm86", "sm87", "sm89", "sm100", "sm103", "sm121"])
def test_model_equals_oracle_on_a_sample(arch):
    a = get_arch(arch)
    rng = random.Random(arch)
    for dtype in FAMILY.dtypes(a):
        sample = rng.sample(FAMILY.configs(a, dtype), 60)
        for c in sample:
            assert smem.total_bytes(c, a, dtype) == _recorded(arch, dtype, c), (arch, dtype, c)
            if dtype == "fp8-block":
                assert smem.total_bytes(c, a, dtype, "row") == _recorded(arch, smem.ROW_TABLE, c)


def test_scales_option_is_checked_and_named():
    a, cfg = get_arch("sm90"), MoEConfig(64, 128, 128, 1, 4, 4)
    with pytest.raises(UsageError, match="scales must be one of column, row"):
        FAMILY.footprint(cfg, a, "fp8-block", scales="diagonal")
    row = FAMILY.footprint(cfg, a, "fp8-block", scales="row")
    assert any("per row" in n for n in row.notes)
    assert not any("per row" in n for n in FAMILY.footprint(cfg, a, "fp8-block").notes)
    # other dtypes have no weight scales: the option changes nothing
    assert FAMILY.footprint(cfg, a, "bf16", scales="row") == FAMILY.footprint(cfg, a, "bf16")


def test_recorded_table_belongs_to_the_current_kernel():
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("interpreter mode replaces @triton.jit functions")
    from tilefit.kernels.triton_moe.kernel import fused_moe_kernel

    assert TABLE["kernel_hash"] == fused_moe_kernel.cache_key, (
        "kernel.py changed: rerun scripts/calibrate_triton.py to re-record the oracle table")


@pytest.mark.parametrize("dtype", ["fp8", "fp8-block"])
def test_sm120_fp8_128x256x128_needs_more_than_the_limit(dtype):
    a = get_arch("sm120")
    cfg = FAMILY.parse_config("128,256,128,1,8,4", dtype)
    v = FAMILY.verdict(cfg, a, dtype)
    assert v.footprint.total == _recorded("sm120", dtype, cfg)
    assert v.status == EXCEEDS_SMEM and v.footprint.total > a.smem_per_block_optin == 101376
    assert v.footprint.dominant().name == "B stages"


@pytest.mark.parametrize("arch", ["sm80", "sm86", "sm89", "sm90", "sm100", "sm120"])
def test_footprint_terms_add_up_and_never_shrink_with_stages(arch):
    """Every config of every dtype, not a random draw: the terms add up to the total, and one more
    stage never needs less. The total stays the same only where the compiler's epilogue layout
    conversion needs more than the pipeline buffers it reuses (recorded: sm89 per-tensor fp8
    128x128x64 and 256x128x64 at 8 warps, 2 and 3 stages both 32,768 / 65,536 B)."""
    a = get_arch(arch)
    for dtype, scales in (("bf16", "column"), ("fp16", "column"), ("fp8", "column"),
                          ("fp8-block", "column"), ("fp8-block", "row")):
        if dtype not in FAMILY.dtypes(a):
            assert FAMILY.verdict(MoEConfig(16, 128, 128, 1, 4, 2), a, dtype).status == UNSUPPORTED
            continue
        for cfg in FAMILY.configs(a, dtype):
            fp = FAMILY.footprint(cfg, a, dtype, scales=scales)
            assert fp.total == sum(t.bytes for t in fp.terms) == smem.total_bytes(cfg, a, dtype, scales)
            epilogue_led = fp.dominant().name == "epilogue scratch"
            assert fp.dominant().name in ("A stages", "B stages") or epilogue_led, (arch, dtype, cfg)
            if cfg.num_stages < 5:
                deeper = smem.total_bytes(MoEConfig(*cfg.values()[:5], cfg.num_stages + 1), a, dtype,
                                          scales)
                assert deeper > fp.total or (epilogue_led and deeper == fp.total), (arch, dtype, cfg)


def test_summary_names_how_many_configs_cannot_launch_on_sm120():
    a = get_arch("sm120")
    verdicts = [FAMILY.verdict(c, a, "bf16") for c in FAMILY.configs(a, "bf16")]
    over = sum(not v.fits for v in verdicts)
    assert 0 < over < 1920
    assert FAMILY.summary(verdicts)[0].startswith(f"{over} of 1920 configs cannot launch on sm120")


def test_shipped_calibration_is_the_fit_of_the_shipped_table():
    shipped = json.loads((resources.files("tilefit.kernels.triton_moe") / "data"
                          / f"calib_triton-{smem.model_version()}.json").read_text())
    refit = smem.fit_calibration(TABLE)
    assert refit == shipped
    assert smem.check_against_table(TABLE, refit) == []
    assert all(not c["exceptions"] for per in refit["archs"].values() for c in per.values())


@pytest.mark.parametrize("installed,note", [("9.9.9", "installed triton 9.9.9 has no calibration"),
                                             (None, "triton is not installed")])
def test_model_says_when_the_installed_triton_was_not_calibrated(monkeypatch, installed, note):
    monkeypatch.setattr(smem, "_installed_triton", lambda: installed)
    smem.load_calibration.cache_clear()
    try:
        fp = FAMILY.footprint(MoEConfig(64, 128, 64, 16, 4, 3), get_arch("sm90"), "bf16")
        assert any(note in n for n in fp.notes), fp.notes
        assert fp.total == _recorded("sm90", "bf16", MoEConfig(64, 128, 64, 16, 4, 3))
    finally:
        smem.load_calibration.cache_clear()


def test_fit_recovers_known_parameters_from_a_synthetic_table():
    # buffers = stages - 1 for BM 16, stages for BM 64; a per-stage extra, a constant and an
    # epilogue floor that only the 2-stage config reaches
    entries = {}
    for bm, off in ((16, 1), (64, 0)):
        for s in (2, 3, 4, 5):
            stage = (bm * 64 + 64 * 128) * 2
            fig = (s - off) * stage + (16 * s if bm == 64 else 0) + (512 if bm == 64 else 0)
            if bm == 16:
                fig = max(fig, 40000)
            entries[f"sm90/bf16/{bm},128,64,4,{s}"] = fig
    calib = smem.fit_calibration({"triton_version": "0.0.0", "entries": entries})
    c = calib["archs"]["sm90"]["bf16"]
    assert c["offset_by_block_m"] == {"16": 1, "64": 0}
    assert c["extra"] == {"16,128,64,4": [0, 0, 40000], "64,128,64,4": [16, 512, 0]}
    assert not c["exceptions"]
    entries["sm90/bf16/64,128,64,4,3"] += 8  # a figure no line explains is kept, not hidden
    calib = smem.fit_calibration({"triton_version": "0.0.0", "entries": entries})
    assert calib["archs"]["sm90"]["bf16"]["exceptions"] == {"64,128,64,4,3": entries[
        "sm90/bf16/64,128,64,4,3"]}
    assert smem.check_against_table({"entries": entries}, calib) == []


@pytest.mark.parametrize("text,dtype,msg", [
    ("48,64,64,1,4,3", "bf16", "not a power of two"),
    ("16,64,64,1,4,6", "bf16", "outside the bf16 grid"),
    ("512,64,64,1,4,3", "bf16", "outside the bf16 grid"),
    ("16,64,512,1,4,3", "fp8-block", "outside the fp8-block grid"),
    ("16,64,64,1,4,3", "fp8_w8a8", "fp8 .per-tensor scales. or fp8-block"),
    ("16,64,64,1,4,3", "e4m3", "does not say how the fp8 weights are scaled"),
    ("16,64,64,1,4", "bf16", "needs 6"),
    ("16,64,a,1,4,3", "bf16", "must be an integer"),
    ("16,64,64,1,4,3", "int4", "unknown dtype"),
])
def test_parse_config_rejects_bad_input(text, dtype, msg):
    with pytest.raises(UsageError, match=msg):
        FAMILY.parse_config(text, dtype)


def test_config_value_and_json_keys():
    cfg = FAMILY.parse_config("64,128,64,16,4,3", "bf16")
    assert cfg == MoEConfig(64, 128, 64, 16, 4, 3) and hash(cfg) == hash(MoEConfig(64, 128, 64, 16, 4, 3))
    assert list(cfg.as_dict()) == list(GRID) and cfg.as_dict()["BLOCK_SIZE_N"] == 128
    assert MoEConfig.from_dict(cfg.as_dict()) == cfg
    with pytest.raises(AttributeError):
        cfg.block_m = 32  # frozen


@pytest.mark.parametrize("arch", ["sm80", "sm86", "sm89", "sm90", "sm100", "sm120"])
@pytest.mark.parametrize("batch", [1, 64, 4096])
def test_default_config_fits_and_is_in_the_grid(arch, batch):
    a = get_arch(arch)
    for dtype in FAMILY.dtypes(a):
        cfg = FAMILY.default_config(a, dtype, M=batch, E=256, topk=8)
        assert cfg in set(FAMILY.configs(a, dtype))
        assert FAMILY.verdict(cfg, a, dtype).status == FITS


def test_verify_without_triton_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_triton(name, *args, **kw):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("no triton")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_triton)
    with pytest.raises(MissingDependency, match=r"tilefit\[triton\]"):
        FAMILY.verify([MoEConfig(16, 32, 64, 1, 4, 2)], get_arch("sm90"), "bf16")


def test_family_import_and_grid_judgement_need_neither_triton_nor_torch():
    import subprocess
    import sys

    code = ("import sys; from tilefit.kernels.registry import get_family; "
            "from tilefit.hw.catalog import get_arch; f = get_family('triton-moe'); a = get_arch('sm120'); "
            "[f.verdict(c, a, 'bf16') for c in f.configs(a, 'bf16')]; "
            "print(sorted(m for m in ('triton', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_oracle_refuses_to_run_under_the_interpreter(monkeypatch):
    pytest.importorskip("triton")
    from tilefit.kernels.triton_moe.spec import compile_config

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(UsageError, match="TRITON_INTERPRET"):
        compile_config(MoEConfig(16, 32, 64, 1, 4, 2), 90, "bf16", use_cache=False)


def test_unknown_arch_is_a_usage_error():
    with pytest.raises(UsageError):
        get_arch("sm42")


# ------------------------------------------------------------------ live compiles (slow)

@pytest.mark.slow
def test_live_oracle_agrees_with_model_on_random_configs(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path))
    rng = random.Random()  # a fresh sample every run
    picks = [("sm120", "bf16"), ("sm90", "bf16"), ("sm120", "fp8-block"), ("sm90", "fp8-block"),
             (rng.choice(["sm80", "sm86", "sm89", "sm100"]), "bf16"), ("sm100", "fp8-block"),
             ("sm90", "fp8"), (rng.choice(["sm89", "sm100", "sm120"]), "fp8")]
    checks = []
    for arch, dtype in picks:
        a = get_arch(arch)
        cfgs = rng.sample(FAMILY.configs(a, dtype), 2)
        checks += FAMILY.verify(cfgs, a, dtype)
    assert len(checks) >= 8
    bad = [(c.arch.name, c.config.label(), c.model_bytes, c.oracle_bytes) for c in checks
           if not c.agrees]
    assert not bad, bad


@pytest.mark.slow
def test_live_oracle_agrees_with_the_row_scale_model(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path))
    rng = random.Random()  # a fresh sample every run
    checks = []
    for arch in ("sm90", "sm120", rng.choice(["sm89", "sm100"])):
        a = get_arch(arch)
        narrow = [c for c in FAMILY.configs(a, "fp8-block") if c.block_n <= 128]
        checks += FAMILY.verify(rng.sample(narrow, 3), a, "fp8-block", scales="row")
    bad = [(c.arch.name, c.config.label(), c.model_bytes, c.oracle_bytes) for c in checks
           if not c.agrees]
    assert len(checks) == 9 and not bad, bad


@pytest.mark.slow
def test_group_size_m_gemm2_other_shapes_and_fp16_do_not_change_shared_memory(tmp_path,
                                                                               monkeypatch):
    pytest.importorskip("triton")
    from tilefit.kernels.triton_moe.spec import compile_config

    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path))
    rng = random.Random(3)
    for arch in ("sm90", "sm120"):
        a = get_arch(arch)
        for cfg in rng.sample(FAMILY.configs(a, "bf16", grid="distinct"), 2):
            want = smem.total_bytes(cfg, a, "bf16")
            variants = [compile_config(MoEConfig(*cfg.values()[:3], gm, *cfg.values()[4:]),
                                       a.cc_int, "bf16").shared for gm in (16, 64)]
            variants.append(compile_config(cfg, a.cc_int, "bf16", gemm="gemm2").shared)
            variants.append(compile_config(cfg, a.cc_int, "fp16").shared)
            variants.append(compile_config(cfg, a.cc_int, "bf16",
                                           shape={"N": 512, "K": 256, "tokens": 1}).shared)
            assert variants == [want] * len(variants), (arch, cfg.label(), variants)


@pytest.mark.slow
def test_oracle_caches_on_disk_by_target(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from tilefit.kernels.triton_moe.spec import compile_config

    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path))
    cfg = MoEConfig(16, 32, 64, 1, 4, 2)
    first = compile_config(cfg, 120, "bf16")
    again = compile_config(cfg, 120, "bf16")
    other = compile_config(cfg, 90, "bf16")
    assert not first.cached and again.cached and not other.cached
    assert again.shared == first.shared and first.triton_version == TABLE["triton_version"]
    files = list((tmp_path / "triton").iterdir())
    assert len(files) == 2 and all(f.suffix == ".json" for f in files)
    assert json.loads(files[0].read_text())["shared"] in (first.shared, other.shared)


# ------------------------------------------------------------------ two fp8 dtypes

def test_fp8_is_per_tensor_and_fp8_block_is_block_scaled():
    a = get_arch("sm90")
    assert tuple(FAMILY.dtypes(a)) == ("bf16", "fp16", "fp8", "fp8-block")
    # both take the whole grid, BLOCK_SIZE_N 32/64 and BLOCK_SIZE_K 64 included
    cfg = FAMILY.parse_config("64,64,64,1,4,3", "fp8")
    assert FAMILY.parse_config("64,64,64,1,4,3", "fp8-block") == cfg
    assert not FAMILY.extrapolated(cfg, "fp8") and not FAMILY.extrapolated(cfg, "fp8-block")
    # the recorded figures differ: per-tensor fp8 is the plain pipeline, fp8-block adds scale scratch
    big = MoEConfig(128, 128, 128, 1, 4, 3)
    assert _recorded("sm90", "fp8", big) == smem.total_bytes(big, a, "fp8") == (3 * (128 * 128 * 2))
    assert smem.total_bytes(big, a, "fp8-block") == _recorded("sm90", "fp8-block", big)
    assert FAMILY.default_config(a, "fp8", M=1, E=256).block_k == 128  # 16x64x128 bucket
    assert FAMILY.default_config(a, "fp8", M=4096, E=256, topk=8).block_n == 256
    assert FAMILY.default_config(a, "fp8-block", M=4096, E=256, topk=8).block_k == 128


def test_tables_written_before_fp8_block_are_read_with_the_new_name():
    # Before format 2 the family's only fp8 was block-scaled and named "fp8" (tilefit 3.6.0 tables).
    old_table = {"triton_version": "3.6.0", "entries": {"sm90/fp8/64,128,128,4,3": 99, "sm90/bf16/16,32,64,4,2": 7}}
    up = smem.upgrade_table(old_table)
    assert up["format"] == 2 and up["entries"] == {"sm90/fp8-block/64,128,128,4,3": 99,
                                                   "sm90/bf16/16,32,64,4,2": 7}
    old_calib = {"triton_version": "3.6.0", "archs": {"sm90": {"bf16": 1, "fp8": 2}}}
    assert smem.upgrade_table(old_calib)["archs"] == {"sm90": {"bf16": 1, "fp8-block": 2}}
    # a format-2 table is left as it is: its "fp8" is per-tensor
    assert smem.upgrade_table(TABLE) is TABLE and TABLE["format"] == 2
    # the old shipped calibration (fp8 = block) refits to the same block-scaled figures
    legacy = {**TABLE, "entries": {k.replace("/fp8-block/", "/fp8/"): v for k, v in TABLE["entries"].items()
                                   if "/fp8/" not in k}}
    del legacy["format"]
    refit = smem.fit_calibration(legacy)
    assert refit["archs"]["sm90"]["fp8-block"] == smem.fit_calibration(TABLE)["archs"]["sm90"]["fp8-block"]
