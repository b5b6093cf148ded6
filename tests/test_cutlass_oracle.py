"""The nvcc + CUTLASS oracle: missing tools give one clear line; live compiles agree with the model."""

from __future__ import annotations

import shutil

import pytest

from tilefit.errors import MissingDependency
from tilefit.hw.catalog import get_arch
from tilefit.kernels.flashinfer_cutlass import FAMILY
from tilefit.oracles import nvcc_cutlass


def test_missing_headers_say_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEFIT_FLASHINFER_DATA", str(tmp_path))
    monkeypatch.setattr(nvcc_cutlass.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(nvcc_cutlass.shutil, "which", lambda name: "/bin/true")
    with pytest.raises(MissingDependency, match="pip install --no-deps flashinfer-python") as exc:
        nvcc_cutlass.toolchain()
    assert "\n" not in str(exc.value)


def test_missing_nvcc_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(nvcc_cutlass.shutil, "which", lambda name: None)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    with pytest.raises(MissingDependency, match="nvcc not found"):
        nvcc_cutlass.toolchain()


def test_probe_program_names_the_launcher_types():
    t = FAMILY.parse_config("128x256x128 finalize swap-ab", "nvfp4", get_arch("sm120"))
    line = nvcc_cutlass.probe_line(t, "x")
    assert "cutlass::arch::Sm120" in line and "cutlass::float_e2m1_t" in line
    assert ", 128, 256, 128, 1, 1, true, true, true, false>>" in line  # static cluster
    program = nvcc_cutlass._program([line])
    assert "ScaledAccPerRowBiasPerColScaleScatter" in program and "StageCountAutoCarveout" in program


def _toolchain_or_skip():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH: the live CUTLASS oracle needs the CUDA toolkit")
    try:
        return nvcc_cutlass.toolchain()
    except MissingDependency as exc:
        pytest.skip(f"FlashInfer's CUTLASS headers absent ({exc}); set TILEFIT_FLASHINFER_DATA")


@pytest.mark.slow
def test_live_oracle_agrees_with_model(tmp_path, monkeypatch):
    """Compiles two SM120 NVFP4 rows of the compiled SharedStorage table (tests/test_cutlass_family.py) (one over the limit, one exactly at it)."""
    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path))  # before settings are first read
    tc = _toolchain_or_skip()
    sm120 = get_arch("sm120")
    ts = [FAMILY.parse_config("128x256x128 finalize", "nvfp4", sm120),
          FAMILY.parse_config("128x64x128 gemm1", "nvfp4", sm120)]
    version = "0.7.4" if tc.cutlass_version == "4.5.0" else None
    if version is None:
        pytest.skip(f"headers pin CUTLASS {tc.cutlass_version}; this test compares with the 4.5.0 model")
    checks = FAMILY.verify(ts, sm120, "nvfp4", flashinfer=version, flashinfer_data=str(tc.data_dir))
    assert [c.oracle_bytes for c in checks] == [102_400, 101_376]
    assert all(c.agrees and c.extra["oracle_stages"] == c.extra["model_stages"] for c in checks)
    assert list((tmp_path / "cutlass").glob("*.json"))  # cached


@pytest.mark.slow
def test_live_oracle_sm100_fp8_no_smem_at_the_limit(tmp_path, monkeypatch):
    """One SM100 FP8 kernel on the NO_SMEM epilogue, compiled live: exactly 232,448 B, as the table says."""
    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path))
    tc = _toolchain_or_skip()
    if tc.cutlass_version != "4.5.0":
        pytest.skip(f"headers pin CUTLASS {tc.cutlass_version}; this test compares with the 4.5.0 rows")
    sm100 = get_arch("sm100")
    t = FAMILY.parse_config("64x64x128 nosmem", "fp8", sm100)
    # cluster 1x1, no finalize, no swap-AB, TmaEpi off (NO_SMEM), static cluster
    assert nvcc_cutlass.probe_line(t, "x").endswith(', 1, 1, false, false, false, false>>("x");')
    checks = FAMILY.verify([t], sm100, "fp8", flashinfer="0.7.4", flashinfer_data=str(tc.data_dir))
    assert [(c.model_bytes, c.oracle_bytes) for c in checks] == [(232_448, 232_448)]
    assert checks[0].extra["oracle_stages"] == checks[0].extra["model_stages"] == 14


def test_probe_builds_sm103_native_kernels_for_sm_103a():
    """SM103's own NVFP4 kernels get the Sm103 arch tag and kind (the probe triples MMA K) and their own
    nvcc -arch; SM100's kernels on sm103 keep Sm100."""
    sm103 = get_arch("sm103")
    ultra = FAMILY.parse_config("128x256x256 ultra 2sm", "nvfp4", sm103)
    plain = FAMILY.parse_config("128x256x256 2sm", "nvfp4", sm103)
    assert "cutlass::arch::Sm103, tf::kSm103" in nvcc_cutlass.probe_line(ultra, "x")
    assert "cutlass::arch::Sm100, tf::kSm100" in nvcc_cutlass.probe_line(plain, "x")
    assert nvcc_cutlass.ARCHS[nvcc_cutlass.build_arch(ultra)][2] == "sm_103a"
    assert "TK * (IsSM103 ? 3 : 1)" in nvcc_cutlass._program([])


@pytest.mark.slow
def test_live_oracle_sm103_ultra(tmp_path, monkeypatch):
    """One SM103-native NVFP4 kernel compiled live (nvcc -arch=sm_103a) agrees with the model."""
    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path))
    tc = _toolchain_or_skip()
    sm103 = get_arch("sm103")
    t = FAMILY.parse_config("128x128x256 ultra", "nvfp4", sm103)
    version = {"4.5.0": "0.7.4", "4.4.2": "0.6.7", "4.2.1": "0.6.0"}.get(tc.cutlass_version)
    if version is None:
        pytest.skip(f"headers pin CUTLASS {tc.cutlass_version}, which the catalog does not profile")
    checks = FAMILY.verify([t], sm103, "nvfp4", flashinfer=version, flashinfer_data=str(tc.data_dir))
    assert len(checks) == 1 and checks[0].agrees and checks[0].oracle_bytes > 200_000
    assert checks[0].extra["oracle_stages"] == checks[0].extra["model_stages"]
