"""Diagnose a large regular file with several processes, with the same result as the serial reader.

The costly parts of reading a log are the gate (one regex over every byte) and the analysis of the
lines it lets through (prefixes, rules, kernel details). Workers each gate one piece of the file
with their own `LineScanner`, analyse the lines that matter (cached, see analyze.py) and send back
compact records: gated lines with their analyses, runs of backtrace frames with their details, and
runs of caught tactic failures folded into counts (fold.py: a failure-dense log costs this process
almost nothing). This process replays those records, in file order, to the tracker, re-applying the window rules the
serial scanner applies, so the tracker sees exactly what it would have seen. A line belongs to the
piece it starts in; a worker finishes its last line past the piece's end. Memory stays bounded: at
most two pieces per worker are in flight.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from tilefit.diagnose.analyze import LineReader
from tilefit.diagnose.fold import FOLD, FRAME, GATED, RUN, Record, covers, fold, merge, unresolving
from tilefit.diagnose.events import TIERS, Rule
from tilefit.diagnose.parser import MAX_LINE, LineScanner, is_backtrace_frame
from tilefit.diagnose.rules import RuleSet

PIECE = 4 << 20
# A reader reads its piece in blocks this large. Each block and the copy that joins it to the last
# block's unfinished line are malloc'd; past 128 KB glibc soon serves such blocks from the heap and
# keeps them: 1 MB blocks left a reader 9.3 MB of private memory, 256 KB 6.5 MB, for 2% of its speed
# (64 KB: 6.3 MB, 10% slower). Measured on the dense benchmark log, benchmarks/RESULTS.md.
READ = 256 << 10
# A reader folds the records it has gathered after each block once they are more than this (not
# only at the piece's end): a 4 MB piece of a failure-dense log gathers ~2,300 records (1.2 MB of
# strings and tuples) before folding, and the reader's heap keeps that space. A run of failures
# still going on at the end is held back up to this many records: a cut run folds the first
# occurrences of its failures (scratch tracker work) again.
FOLD_RECORDS = 512

# Records (fold.py): (line number within the piece, kind, payload):
#   GATED: (segments, their packed analyses, weak tiers); FRAME: segments of an ungated line that
#   is a frame; RUN: (how many frame lines, [(offset, details)] where the details are not empty,
#   [(offset, text, tiers)] of the frames that hold a needle: the serial reader may read those one
#   by one past the end of a window); FOLD: the middle of a run of caught tactic failures, counted.

_READERS: dict[tuple[Rule, ...], LineReader] = {}  # per worker process: one reader per rule set
_WORKER: list[LineReader] = []  # a pool worker's reader, made once (_start_worker)


def _reader(rules: tuple[Rule, ...]) -> LineReader:
    reader = _READERS.get(rules)
    if reader is None:
        reader = _READERS[rules] = LineReader(RuleSet(rules))
    return reader


def _start_worker(rules: tuple[Rule, ...], reader: LineReader | None = None) -> None:
    """A pool worker gets the rules once, not with every piece (24 KB pickled and hashed). A forked
    worker gets the main process's reader as it is: its compiled rules stay shared pages instead
    of being compiled again in every worker (1.1 MB of each one's private memory, 30 ms)."""
    _WORKER[:] = [reader if reader is not None else _reader(rules)]


def _scan_piece(path: str, start: int, stop: int, detail_lines: int, rules: tuple[Rule, ...] | None = None,
                max_line: int = MAX_LINE) -> tuple[int, list[Record]]:
    """Lines starting in [start, stop): their count, and the records this piece owes the tracker
    (`rules`: the worker's own when None)."""
    reader = _reader(rules) if rules is not None else _WORKER[0]
    records: list[Record] = []  # gathered since the last fold into `out`
    covered: set[int] = set()  # RUN records inside the window of the gated line before them
    out: list[Record] = []
    opened = 0  # fold(): the last line that may have opened a traceback

    def fold_some() -> None:
        """Fold the records gathered but a run of failures that may go on (fold's `hold`)."""
        nonlocal opened
        folded, opened, used = fold(records, reader, covered, opened, hold=FOLD_RECORDS)
        out.extend(folded)
        if used:
            first = records[used][0] if used < len(records) else None  # the first line kept
            del records[:used]
            kept = [] if first is None else [x for x in covered if x >= first]
            covered.clear()
            covered.update(kept)

    # Weak-tier lines (Rule.tier) change the tracker's state only the first time after a line that
    # may leave an error unresolved (a served request makes the server ready and resolves errors;
    # once ready nothing more is learnt until the next error, see Tracker.needs), so a worker sends
    # the first of each tier after each such line; a caught tactic failure or a progress line
    # cannot leave one.
    sent: set[str] = set()
    # The tiers not sent yet, remade only when `sent` changes: the scanner asks after every line
    # and frame run it hands over (three times per failure on a failure-dense log).
    needed = [TIERS]

    def needs() -> tuple[str, ...]:
        return needed[0]

    def send(tiers: tuple[str, ...]) -> None:
        if not sent.issuperset(tiers):
            sent.update(tiers)
            needed[0] = tuple(t for t in TIERS if t not in sent)

    def resend() -> None:
        if sent:
            sent.clear()
            needed[0] = TIERS

    def collect(line: int, segments: list[str], gated: bool) -> int:
        if gated:  # every gated line may open a window: send its frames, the tracker decides
            if len(segments) == 1:
                p, tiers = reader.gated(segments[0])
                packed = [p]
            else:
                tiers = _tiers(segments)
                packed = [reader.pack(t) for t in segments]
            if tiers:
                send(tiers)
            elif unresolving(packed, reader):
                resend()
            records.append((line, GATED, (segments, packed, tiers)))
            return detail_lines
        # Frames right after a gated line (or at the top of the piece: the previous piece's gated
        # line may own them); the first other line ends the run.
        if any(is_backtrace_frame(s) for s in segments):
            records.append((line, FRAME, segments))
            return 0
        return -1

    gate = reader.rules.gate.search

    def frames(first: int, raw: bytes) -> None:
        count = raw.count(b"\n")
        if records and records[-1][0] == first - 1 and covers(records[-1], count, reader):
            covered.add(first)  # fold() need not ask again
            records.append((first, RUN, (count, reader.run(raw), [])))
            return
        # The frames that hold a needle, found by the byte gate over the whole run (needles are
        # ASCII: a decoded line holds one exactly when its bytes do).
        gated = []
        m = gate(raw)
        while m is not None:
            start = raw.rfind(b"\n", 0, m.start()) + 1
            stop = raw.index(b"\n", m.start())
            t = raw[start:stop].decode("utf-8", "replace")
            gated.append((raw.count(b"\n", 0, start), t, _tiers([t])))
            m = gate(raw, stop + 1)
        if any(not tiers and unresolving([reader.pack(t)], reader) for _, t, tiers in gated):
            resend()
        records.append((first, RUN, (count, reader.run(raw), gated)))

    def _tiers(segments: list[str]) -> tuple[str, ...]:
        """The weak tiers a gated line holds only (see Rule.tier); () when an ordinary needle."""
        found = [reader.tiers(t) for t in segments]
        return () if any(not f for f in found) else tuple(sorted({x for f in found for x in f}))

    scanner = LineScanner(reader.rules.gate, collect, max_line=max_line, frames=frames,
                          gates=reader.rules.gates, needs=needs, frames_only=True)
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
            if len(records) > FOLD_RECORDS:
                fold_some()
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
    out.extend(fold(records, reader, covered, opened)[0])  # hold=0: every run ends with the piece
    return scanner.lines, out


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


class _Replay:
    """Feeds records to the tracker with the serial scanner's window rules."""

    def __init__(self, tracker: Any):
        self.tracker = tracker
        self.window_until = 0  # last line of the open window
        self.last = 0          # last line the tracker saw

    def _gap(self, line: int) -> None:
        """Lines the workers did not send lie before `line`: inside a window they were not frames
        (which closes it), outside one they do not matter. Either way no window is open now."""
        if line > self.last + 1:
            self.window_until = 0

    def gated(self, line: int, segments: list[str], packed: list[Any] | None, tiers: tuple[str, ...] = ()
              ) -> None:
        inside = line == self.last + 1 and line <= self.window_until
        if tiers and not set(tiers) & set(self.tracker.needs()):
            # The serial reader's gate no longer holds these needles (Tracker.needs): outside a
            # window it skips the line, inside one it hands it over as an ungated line.
            if inside:
                self.frame(line, segments)
            return
        self._gap(line)
        want = self.tracker.process(line, segments, True, packed)
        if want > 0:
            self.window_until = max(self.window_until, line + want)
        elif want < 0:
            self.window_until = 0
        self.last = line

    def frame(self, line: int, segments: list[str]) -> None:
        self._gap(line)
        if line <= self.window_until and line == self.last + 1:
            if self.tracker.process(line, segments, False) < 0:
                self.window_until = 0
            self.last = line

    def feed(self, records: list[Record], base: int) -> None:
        """One piece's records (its lines after `base`), in order."""
        for local, kind, payload in records:
            line = base + local
            if kind == GATED:
                self.gated(line, *payload)
            elif kind == FRAME:
                self.frame(line, payload)
            elif kind == RUN:
                self.run(line, *payload)
            else:  # FOLD: counts merged; the window the replay would hold after its failures
                merge(self.tracker, payload, base)
                until = base + payload.window_until
                self.last = base + payload.last
                self.window_until = max(self.window_until, until) if payload.chained else until

    def run(self, first: int, count: int, found: list[tuple[int, dict[str, Any]]],
            gated: list[tuple[int, str, tuple[str, ...]]]) -> None:
        self._gap(first)
        inside = 0
        if first <= self.window_until and first == self.last + 1:
            inside = min(count, self.window_until - first + 1)
            self.tracker.frame_details(first, [(i, d) for i, d in found if i < inside])
            self.last = first + inside - 1
        if inside == count:
            return
        # Past the window the serial scanner reads these one by one: only gated ones count (and one
        # may open a new window that takes the frames after it).
        texts = {i: (t, tiers) for i, t, tiers in gated}
        for i in range(inside, count):
            line = first + i
            if line <= self.window_until and line == self.last + 1:
                self.tracker.frame_details(line, [(0, d) for j, d in found if j == i])
                self.last = line
            elif i in texts:
                self.gated(line, [texts[i][0]], None, texts[i][1])


def _context() -> Any:
    """Readers forked from this process on Linux (Python 3.14 starts them from a fork server
    instead): they then share its modules and compiled rules, which the memory per reader counts
    on. Elsewhere the platform's default."""
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return None


def scan_file(path: str, process: Any, *, workers: int, detail_lines: int, gate: Any = None,
              piece: int = PIECE, progress: Any = None) -> tuple[int, int]:
    """Feed the tracker whose bound `process` method is given the lines of `path` that the serial
    reader would; returns (lines, bytes). (`gate` is kept for callers: the tracker's rule set gates.)
    `progress`, when given, is told each piece's size once its lines are replayed."""
    tracker = process.__self__
    rules = tuple(cr.rule for cr in tracker.rules.rules)
    size = os.path.getsize(path)
    starts = list(range(0, size, piece)) or [0]
    base = 0
    replay = _Replay(tracker)
    gc.freeze()  # forked readers then share this process's objects instead of copying them
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=_start_worker,
                                 initargs=(rules, tracker.reader)) as ex:
            pending: deque[Future] = deque()
            nxt = taken = 0
            while nxt < len(starts) or pending:
                while nxt < len(starts) and len(pending) < 2 * workers:
                    s = starts[nxt]
                    pending.append(ex.submit(_scan_piece, path, s, min(size, s + piece), detail_lines))
                    nxt += 1
                nlines, records = pending.popleft().result()
                replay.feed(records, base)
                base += nlines
                if progress is not None:  # pieces finish in order: this one started at starts[taken]
                    progress(min(size, starts[taken] + piece) - starts[taken])
                taken += 1
    finally:
        gc.unfreeze()
    return base, size


# Readers by default, at most. On the failure-dense 1 GB log on a 16-core H200 host
# (benchmarks/RESULTS.md, issue 16): 10 readers 461-539 MB/s at 66 MB (the process tree's PSS),
# 12: 536-569 MB/s at 75 MB, 16: 653-683 MB/s at 91-93 MB; a reader adds about 4.5 MB. 12 keep
# both goals (>= 400 MB/s, < 100 MB) with margin. The main process only merges what readers
# send: it needs no core of its own.
MAX_DEFAULT_WORKERS = 12


def default_workers() -> int:
    """One reader per core, at most MAX_DEFAULT_WORKERS."""
    return max(1, min(MAX_DEFAULT_WORKERS, os.cpu_count() or 1))
