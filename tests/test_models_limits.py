"""Model config files are read with limits: no device, FIFO or oversized file is read, no integer of
thousands of digits reaches int(), and a path the OS refuses is one line and exit 2."""

from __future__ import annotations

import json
import os
import pathlib
import time

import pytest

from tilefit.errors import UsageError
from tilefit.models import load_model
from tilefit.models.loader import MAX_CONFIG_BYTES

MIXTRAL = {"num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": 4096, "intermediate_size": 14336,
           "num_hidden_layers": 32}


def stat_refusing(fragment: str):
    """A Path.stat that raises PermissionError for paths containing `fragment` (root may search any
    folder, so tests run as root simulate the refusal)."""
    real_stat = pathlib.Path.stat

    def stat(self, *a, **k):
        if fragment in str(self):
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *a, **k)

    return stat


def _one_line_exit_2(r, needle):
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1 and needle in r.err and "Traceback" not in r.err


@pytest.fixture
def quick():
    start = time.monotonic()
    yield
    assert time.monotonic() - start < 1.0


def test_dev_zero_is_not_read(cli, quick):
    _one_line_exit_2(cli("plan", "--model", "/dev/zero", "--gpu", "h100"), "/dev/zero is not a regular file")


def test_fifo_without_writer_does_not_block(cli, tmp_path, quick):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    _one_line_exit_2(cli("plan", "--model", str(fifo), "--gpu", "h100"), "is not a regular file")
    _one_line_exit_2(cli("plan", "--model", str(tmp_path), "--gpu", "h100"), "is not a regular file")


def test_oversized_config_is_refused_with_its_size_before_reading(cli, tmp_path, quick):
    big = tmp_path / "config.json"
    with open(big, "wb") as f:  # sparse: 500 MB on paper, nothing on disk
        f.truncate(500 * 10**6)
    _one_line_exit_2(cli("plan", "--model", str(big), "--gpu", "h100"), "500,000,000 bytes, over the 4 MiB limit")


def test_config_at_the_bound_is_read(tmp_path):
    text = json.dumps({**MIXTRAL, "pad": ""})
    (tmp_path / "config.json").write_text(text[:-1] + " " * (MAX_CONFIG_BYTES - len(text)) + "}")
    assert (tmp_path / "config.json").stat().st_size == MAX_CONFIG_BYTES
    assert load_model(str(tmp_path)).num_experts == 8
    (tmp_path / "config.json").write_text(" " + (tmp_path / "config.json").read_text())
    with pytest.raises(UsageError, match="4,194,305 bytes"):
        load_model(str(tmp_path))


def test_oversized_quant_file_is_refused(cli, tmp_path, quick):
    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL))
    with open(tmp_path / "hf_quant_config.json", "wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)
    _one_line_exit_2(cli("plan", "--model", str(tmp_path), "--gpu", "h100"), "hf_quant_config.json is 4,194,305 bytes")
    (tmp_path / "hf_quant_config.json").unlink()
    os.symlink("/dev/zero", tmp_path / "hf_quant_config.json")
    _one_line_exit_2(cli("plan", "--model", str(tmp_path), "--gpu", "h100"), "hf_quant_config.json is not a regular file")


@pytest.mark.parametrize("field", ["num_local_experts", "unused_field"])
def test_integer_of_5000_digits_even_unused(cli, tmp_path, field, quick):
    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL)[:-1] + f', "{field}": {"9" * 5000}}}')
    _one_line_exit_2(cli("plan", "--model", str(tmp_path), "--gpu", "h100"), "an integer of 5,000 digits")


def test_name_over_255_characters(cli, quick):
    for name in ("a" * 300, "./" + "a" * 300, "x/" * 3000 + "config.json", "a" * 300 + ".json"):
        r = cli("plan", "--model", name, "--gpu", "h100")
        assert r.code == 2 and r.err.count("\n") == 1, r.err
        assert "File name too long" in r.err or "unknown model" in r.err or "no such file" in r.err


def test_folder_without_search_permission(cli, tmp_path, monkeypatch, quick):
    """As root, chmod 000 does not stop reads, so the refusal is simulated at os.stat as well."""
    model = tmp_path / "locked" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(MIXTRAL))
    if os.geteuid() != 0:
        (tmp_path / "locked").chmod(0)
        try:
            _one_line_exit_2(cli("plan", "--model", str(model), "--gpu", "h100"), "Permission denied")
        finally:
            (tmp_path / "locked").chmod(0o755)
    monkeypatch.setattr(pathlib.Path, "stat", stat_refusing("locked"))
    _one_line_exit_2(cli("plan", "--model", str(model), "--gpu", "h100"), "Permission denied")


def test_unreadable_config_file(cli, tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL))
    real_open = os.open

    def refuse(path, *a, **k):
        if str(path).endswith("config.json"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", refuse)
    _one_line_exit_2(cli("plan", "--model", str(tmp_path), "--gpu", "h100"), "cannot read")
