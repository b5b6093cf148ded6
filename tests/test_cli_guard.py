"""The CLI's one guard: an unexpected exception is one line, exit 70 and a traceback file; Ctrl-C is
130 without a word; a reader that closed stdout (`| head`) ends the run quietly with 0."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


def _raise(exc: BaseException):
    def run(argv):
        raise exc
    return run


def test_unexpected_exception_is_one_line_exit_70_and_a_traceback_file(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("tilefit.cli.main._run", _raise(ZeroDivisionError("division by zero")))
    r = cli("models")
    assert r.code == 70 and r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tilefit: internal error: ZeroDivisionError: division by zero; details in ")
    path = lines[0].split("details in ")[1].split()[0]
    assert path.startswith(str(tmp_path / "crashes"))
    text = open(path).read()
    assert "Traceback (most recent call last)" in text and "ZeroDivisionError" in text


def test_traceback_file_falls_back_to_the_temp_folder(cli, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(blocker))  # a file: crashes/ cannot be made under it
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setattr("tilefit.cli.main._run", _raise(RuntimeError("x\ny")))
    r = cli("models")
    assert r.code == 70 and "RuntimeError: x y; details in " + str(tmp_path) in r.err


def test_keyboard_interrupt_is_130_and_quiet(cli, monkeypatch):
    monkeypatch.setattr("tilefit.cli.main._run", _raise(KeyboardInterrupt()))
    r = cli("models")
    assert (r.code, r.out, r.err) == (130, "", "")


def test_broken_pipe_elsewhere_is_an_internal_error(cli, monkeypatch, tmp_path):
    """A BrokenPipeError from a worker's pipe is a bug, not the reader of stdout going away."""
    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("tilefit.cli.main._run", _raise(BrokenPipeError(32, "Broken pipe")))
    r = cli("models")
    assert r.code == 70 and "BrokenPipeError" in r.err


def test_closed_stdout_ends_quietly():
    """`tilefit models --json | head -c0`: the reader is gone before the first write."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "tilefit", "gpus", "--json", "--sources"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=REPO)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 0 and err == ""
    assert time.monotonic() - start < 10


def test_real_crash_through_the_console_entry(tmp_path):
    """Through a real process: the exit status a shell sees is 70, stderr one line."""
    code = ("import sys, tilefit.cli.main as m\n"
            "def boom(argv): return {}['missing']\n"
            "m._run = boom\n"
            "sys.exit(m.main(['models']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                       env={**ENV, "TILEFIT_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 70 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "internal error: KeyError: 'missing'" in r.stderr
    assert list((tmp_path / "crashes").iterdir())


@pytest.mark.parametrize("argv", [["--version"], []])
def test_ordinary_exits_unchanged(cli, argv):
    r = cli(*argv)
    assert r.code in (0, 2)


def test_internal_error_under_json_is_data_too(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("tilefit.cli.main._run", _raise(AssertionError("unreachable")))
    r = cli("models", "--json")
    assert r.code == 70 and r.json()["error"]["code"] == 70
    assert r.json()["error"]["message"].startswith("AssertionError: unreachable; details in ")
