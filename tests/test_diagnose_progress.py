"""`diagnose` progress on large files: the reader reports the bytes it has read (serial and parallel
paths add up to the file's size, and the verdict is the same with or without a listener), and the
CLI draws a bar for a large file only on a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tilefit.diagnose import Diagnoser
from tilefit.diagnose.events import DETAIL_LINES
from tilefit.diagnose.parallel import scan_file

REAL = Path(__file__).resolve().parent / "fixtures" / "real"


def _big_log(tmp_path: Path) -> Path:
    """Real excerpts (tests/fixtures/real, sources in their sidecars) joined many times over: a
    file of a few hundred KB whose pieces end inside lines."""
    text = b"".join(p.read_bytes() for p in sorted(REAL.glob("sglang-*.log"))[:12])
    path = tmp_path / "joined.log"
    path.write_bytes(text * 20)
    return path


def test_serial_read_reports_every_byte(tmp_path):
    path = _big_log(tmp_path)
    seen: list[int] = []
    dg = Diagnoser()
    dg.read_file(str(path), workers=1, progress=seen.append)
    assert sum(seen) == path.stat().st_size
    assert len(seen) >= 1
    plain = Diagnoser()
    plain.read_file(str(path), workers=1)
    assert dg.result().verdict == plain.result().verdict


def test_parallel_pieces_report_every_byte_once(tmp_path):
    path = _big_log(tmp_path)
    size = path.stat().st_size
    piece = 64 << 10
    seen: list[int] = []
    dg = Diagnoser()
    lines, nbytes = scan_file(str(path), dg.tracker.process, workers=2, detail_lines=DETAIL_LINES,
                              piece=piece, progress=seen.append)
    assert nbytes == size
    assert sum(seen) == size
    assert len(seen) == -(-size // piece)  # one call per piece
    assert all(n == piece for n in seen[:-1])


class _RecordingBar:
    """Stands in for cli.progress.Bar on a terminal: records what the reader reports."""

    made: list[_RecordingBar] = []

    def __init__(self, description: str, total: float, **_: object):
        self.description, self.total, self.done, self.live = description, total, 0, True
        _RecordingBar.made.append(self)

    def __enter__(self) -> _RecordingBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def advance(self, amount: float = 1) -> None:
        self.done += amount


def test_cli_bar_for_a_large_file(cli, tmp_path, monkeypatch):
    import tilefit.cli.diagnose_cmd as cmd
    import tilefit.cli.progress as progress

    path = _big_log(tmp_path)
    without = cli("diagnose", str(path), "--json")
    monkeypatch.setattr(cmd, "PROGRESS_FROM", 0)
    monkeypatch.setattr(progress, "Bar", _RecordingBar)
    _RecordingBar.made.clear()
    with_bar = cli("diagnose", str(path), "--json")
    assert with_bar.code == without.code and with_bar.out == without.out
    (bar,) = _RecordingBar.made
    assert bar.total == bar.done == path.stat().st_size
    assert bar.description == f"reading {path.name}"


@pytest.mark.parametrize("size", [0, 1])
def test_no_bar_off_a_terminal(cli, tmp_path, monkeypatch, size):
    import tilefit.cli.diagnose_cmd as cmd

    path = tmp_path / "tiny.log"
    path.write_bytes(b"x" * size)
    monkeypatch.setattr(cmd, "PROGRESS_FROM", 0)  # a bar is made, but stderr is not a terminal
    r = cli("diagnose", str(path))
    assert r.err == ""
