"""Numbers in arguments are checked before conversion: an integer of 5,000 digits (past Python's
4,300-digit limit for int()) is one line and exit 2 wherever it is typed, and float options refuse
nan and inf."""

from __future__ import annotations

import time

import pytest

from tilefit.errors import UsageError
from tilefit.numeric import bounded_int, finite_float
from tilefit.settings import from_environ

D = "9" * 5000


@pytest.mark.parametrize("args, needle", [
    (["check", "--model", "mixtral-8x7b", "--gpu", "h100", "--engine", "sglang", "--engine-version", D],
     "engine version '99999999999999999999'... (5,000 characters) is out of range"),
    (["check", "--model", "mixtral-8x7b", "--gpu", "h100", "--engine", "sglang", "--backend",
      "flashinfer-cutlass", "--flashinfer", D], "FlashInfer version"),
    (["fit", "--family", "flashinfer-cutlass", "--arch", "sm90", "--flashinfer", D], "FlashInfer version"),
    (["compare", "--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--layouts", "tp" + D], "layout tp"),
    (["compare", "--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--layouts", "tp2ep" + D], "layout ep"),
    (["fit", "--family", "flashinfer-cutlass", "--arch", "sm90", "--config", D + "x128x128"], "tile size"),
    (["fit", "--family", "flashinfer-cutlass", "--arch", "sm90", "--config", f"128x128x128 c{D}x1x1"],
     "cluster size"),
    (["fit", "--family", "triton-moe", "--arch", "sm90", "--config", D + ",64,64,1,4,3"], "config"),
    (["plan", "--model", "mixtral-8x7b", "--gpu", "h100", "--tp", D], "positive integer up to 1,000,000,000"),
    (["plan", "--model", "mixtral-8x7b", "--gpu", "h100", "--batch", "1," + D], "positive integer"),
    (["compare", "--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", D], "positive integer"),
    (["tune", "--model", "mixtral-8x7b", "--trials", D], "positive integer"),
    (["tune", "--model", "mixtral-8x7b", "--budget", "nan"], "positive number, got 'nan'"),
    (["tune", "--model", "mixtral-8x7b", "--compile-timeout", "inf"], "positive number, got 'inf'"),
    (["tune", "--model", "mixtral-8x7b", "--run-timeout=-inf"], "positive number"),
    (["tune", "--model", "mixtral-8x7b", "--mem-bandwidth", "1e999"], "positive number"),
    (["tune", "--model", "mixtral-8x7b", "--peak-tflops", "NaN"], "positive number"),
])
def test_huge_integers_and_non_finite_floats_are_one_line_exit_2(cli, args, needle):
    start = time.monotonic()
    r = cli(*args)
    assert time.monotonic() - start < 1.0
    assert r.code == 2, (r.code, r.err[-300:])
    assert r.err.count("\n") == 1 and needle in r.err, r.err[:300]
    assert len(r.err) < 400  # the digits are not echoed back whole


def test_bounded_int():
    assert bounded_int("007", "n") == 7 and bounded_int(" +12 ", "n") == 12
    assert bounded_int("1" + "0" * 9, "n") == 10**9
    for bad, msg in [("1" + "0" * 10, "out of range"), ("1e3", "must be an integer"), ("", "must be an integer"),
                     ("²", "must be an integer"), ("-1", "out of range"), ("0" * 5000 + "5", None)]:
        if msg is None:
            assert bounded_int(bad, "n") == 5  # leading zeros are not magnitude
            continue
        with pytest.raises(UsageError, match=msg):
            bounded_int(bad, "n")


def test_finite_float():
    assert finite_float("1.5", "x") == 1.5
    for bad in ("nan", "inf", "-inf", "1e400", "x"):
        with pytest.raises(UsageError, match="x must be a"):
            finite_float(bad, "x")
    with pytest.raises(UsageError, match="positive"):
        finite_float("0", "x", positive=True)


@pytest.mark.parametrize("bad", ["²", D, "+0"])
def test_settings_counts(bad):
    with pytest.raises(UsageError, match="TILEFIT_NVCC_JOBS"):
        from_environ({"TILEFIT_NVCC_JOBS": bad})


def test_compile_workers_capped_by_the_cores(cli):
    from tilefit.tune.pools import default_compile_workers

    start = time.monotonic()
    r = cli("tune", "--model", "mixtral-8x7b", "--target", "fake", "--compile-workers", "100000")
    assert time.monotonic() - start < 1.0
    assert r.code == 2 and r.err.count("\n") == 1
    assert f"--compile-workers 100,000 is more than the {default_compile_workers()} CPU core(s)" in r.err


def test_nvcc_jobs_capped_by_the_cores(monkeypatch):
    import os

    from tilefit.oracles.nvcc_cutlass import nvcc_job_count

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setenv("TILEFIT_NVCC_JOBS", "512")
    assert nvcc_job_count() == 4 and nvcc_job_count(2) == 2 and nvcc_job_count(64) == 4
    monkeypatch.setenv("TILEFIT_NVCC_JOBS", "3")
    from tilefit.settings import settings

    settings.cache_clear()
    assert nvcc_job_count() == 3
