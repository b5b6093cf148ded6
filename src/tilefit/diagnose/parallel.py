"""Diagnose a large regular file with several processes, with the same result as the serial reader.

The costly part of reading a log is the gate (one regex over every byte). Workers each gate one
piece of the file with their own `LineScanner` and send back only the lines that matter: gated
lines and the backtrace frames after them. This process replays those lines, in file order, to the
tracker, re-applying the window rules the serial scanner applies, so the tracker sees exactly what
it would have seen. A line belongs to the piece it starts in; a worker finishes its last line past
the piece's end. Memory stays bounded: at most two pieces per worker are in flight.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor

from tilefit.diagnose.parser import MAX_LINE, LineScanner, is_backtrace_frame

PIECE = 4 << 20
READ = 1 << 20

Record = tuple[int, list[str], bool]  # (line number within the piece, segments, gated)


def _scan_piece(path: str, start: int, stop: int, detail_lines: int, gate: bytes,
                max_line: int = MAX_LINE) -> tuple[int, list[Record]]:
    """Lines starting in [start, stop): their count, and the records this piece owes the tracker.
    `gate`: the rule set's gate pattern (sent as its source: a compiled pattern is rebuilt here)."""
    records: list[Record] = []

    def collect(line: int, segments: list[str], gated: bool) -> int:
        if gated:  # every gated line may open a window: send its frames, the tracker decides
            records.append((line, segments, True))
            return detail_lines
        # Frames right after a gated line (or at the top of the piece: the previous piece's gated
        # line may own them); the first other line ends the run.
        if any(is_backtrace_frame(s) for s in segments):
            records.append((line, segments, False))
            return 0
        return -1

    scanner = LineScanner(re.compile(gate), collect, max_line=max_line)
    scanner.open_window(detail_lines)  # leading frames may continue the previous piece's backtrace
    with open(path, "rb") as f:
        pos = 0 if start == 0 else _first_line_start(f, start, stop)
        if pos is None or pos >= stop:
            return 0, []  # no line starts in this piece: a longer line runs through it
        f.seek(pos)
        got = pos
        while got < stop:
            data = f.read(min(READ, stop - got))
            if not data:
                break
            got += len(data)
            scanner.feed(data)
        if scanner.mid_line:
            while True:  # the last line started here: finish it past the piece's end
                data = f.read(READ)
                if not data:
                    scanner.close()
                    break
                nl = data.find(b"\n")
                if nl >= 0:
                    scanner.feed(data[:nl + 1])
                    break
                scanner.feed(data)
    return scanner.lines, records


def _first_line_start(f, start: int, stop: int) -> int | None:
    """The offset of the first line that starts at or after `start` (before `stop`), or None."""
    off = start - 1
    f.seek(off)
    while off < stop:
        block = f.read(min(READ, stop - off))
        if not block:
            return None
        nl = block.find(b"\n")
        if nl >= 0:
            return off + nl + 1
        off += len(block)
    return None


def scan_file(path: str, process: Callable[[int, list[str], bool], int], *, workers: int,
              detail_lines: int, gate: re.Pattern[bytes], piece: int = PIECE) -> tuple[int, int]:
    """Feed `process` the lines of `path` that the serial reader would (gated by `gate`, the
    tracker's rule set's); returns (lines, bytes)."""
    size = os.path.getsize(path)
    starts = list(range(0, size, piece)) or [0]
    base = 0
    window_until = 0
    last = 0
    with ProcessPoolExecutor(max_workers=workers) as ex:
        pending: deque[Future] = deque()
        nxt = 0
        while nxt < len(starts) or pending:
            while nxt < len(starts) and len(pending) < 2 * workers:
                s = starts[nxt]
                pending.append(ex.submit(_scan_piece, path, s, min(size, s + piece), detail_lines,
                                         gate.pattern))
                nxt += 1
            nlines, records = pending.popleft().result()
            for local, segments, gated in records:
                line = base + local
                if gated:
                    want = process(line, segments, True)
                    if want > 0:
                        window_until = max(window_until, line + want)
                    elif want < 0:
                        window_until = 0
                elif line <= window_until and line == last + 1:
                    if process(line, segments, False) < 0:
                        window_until = 0
                else:
                    continue
                last = line
            base += nlines
    return base, size


MAX_DEFAULT_WORKERS = 3  # each worker is a ~19 MB Python process: 3 keep the tree under 100 MB


def default_workers() -> int:
    return max(1, min(MAX_DEFAULT_WORKERS, os.cpu_count() or 1))
