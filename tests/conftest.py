"""Shared test setup: the one `gpu` marker's skip logic, and a CLI runner."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run, so a red CI is reproducible and never a
# coin toss; TILEFIT_HYPOTHESIS_EXPLORE=1 draws fresh examples when hunting for new failures.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile("explore" if os.environ.get("TILEFIT_HYPOTHESIS_EXPLORE") == "1" else "repeatable")

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
GOLDEN = Path(__file__).resolve().parent / "golden"


def _cuda_available() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU on this machine (CI has none; run through the GPU machine)"
    return True, ""


def pytest_collection_modifyitems(config, items):
    if not any("gpu" in item.keywords for item in items):
        return
    ok, why = _cuda_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=why)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_settings():
    """Settings are read from the environment once per process; tests that monkeypatch
    TILEFIT_* variables get them read again."""
    from tilefit.settings import settings

    settings.cache_clear()
    yield
    settings.cache_clear()


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli():
    """Run `tilefit ARGS` in-process and capture exit code, stdout and stderr."""
    from tilefit.cli.main import main

    def run(*args: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse errors
                code = e.code if isinstance(e.code, int) else 2
        return CliResult(code, out.getvalue(), err.getvalue())

    return run


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/* from the current output (also TILEFIT_UPDATE_GOLDEN=1)")


def pytest_configure(config):
    if config.getoption("--update-golden"):
        os.environ["TILEFIT_UPDATE_GOLDEN"] = "1"  # check_golden reads this, in any import of conftest


def check_golden(name: str, text: str) -> None:
    """Compare `text` with tests/golden/<name>. A missing golden file is a failure everywhere;
    `pytest --update-golden` (or TILEFIT_UPDATE_GOLDEN=1) writes it, and rewrites a changed one."""
    path = GOLDEN / name
    if os.environ.get("TILEFIT_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"golden file {path} is missing: run pytest --update-golden to write it, then review it"
    assert text == path.read_text(encoding="utf-8"), \
        f"output differs from {path} (pytest --update-golden to accept, then review the diff)"
