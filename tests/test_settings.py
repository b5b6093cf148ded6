"""TILEFIT_* settings: typed, defaulted, and bad values are a UsageError naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tilefit.errors import UsageError
from tilefit.settings import from_environ


def test_defaults():
    s = from_environ({})
    assert s.cache_dir == Path.home() / ".cache" / "tilefit"
    assert s.flashinfer_data is None and s.nvcc_jobs is None and s.cuda_home == Path("/usr/local/cuda")


def test_values(tmp_path):
    s = from_environ({"TILEFIT_CACHE_DIR": str(tmp_path), "TILEFIT_NVCC_JOBS": "3"})
    assert s.cache_dir == tmp_path and s.nvcc_jobs == 3


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_bad_job_count(bad):
    with pytest.raises(UsageError, match="TILEFIT_NVCC_JOBS"):
        from_environ({"TILEFIT_NVCC_JOBS": bad})
