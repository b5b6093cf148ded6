"""Runs of caught tactic failures, folded by a parallel reader's worker into one record.

A failure-dense log (an SM120 warmup) is mostly caught tactic failures, each with its backtrace,
and from all but the first and the last of a run of them the tracker learns counts only. A worker
(parallel.py) feeds the middle of such a run to a scratch Tracker and sends what it counted (a
`Fold`); the main process merges that (`merge`) instead of replaying every failure.

Exact by construction, since the scratch tracker runs the tracker's own code over the same lines.
A failure folds only where its effect is counts alone, whatever the tracker saw before it:
- its line's matches are failures only (no marker), one a skipped tactic (a caught, benign event
  that leaves nothing pending: verdict.Tracker._merge), none a sticky CUDA error;
- it is no quoted source line, and no traceback can be open: no line that may open one lies
  within TRACEBACK_LINES before it (nor the start of the piece: an earlier piece may hold one);
- its backtrace follows at once, inside the window it opens, and another line ends it.
The first and the last failure of a run stay lines: the first creates the failure class (first
line, message, fields), the last is the open failure later lines may attach details to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilefit.diagnose.events import ERROR, EXCEPTION, FATAL, MARKER_KINDS, STICKY, TACTIC_SKIPPED, TRACEBACK
from tilefit.diagnose.analyze import LineReader
from tilefit.diagnose.diagnosis import FailureClass
from tilefit.diagnose.lineshape import TOOLS, is_source
from tilefit.diagnose.verdict import TRACEBACK_LINES, Tracker

# Record kinds (parallel.py): (line within the piece, kind, payload).
GATED, FRAME, RUN, FOLD = 0, 1, 2, 3
Record = tuple[int, int, Any]
MIN_RUN = 3  # failures in a run before its middle folds (the first and last stay lines)


@dataclass(frozen=True, slots=True)
class Fold:
    """What a scratch tracker counted over the middle of a run (lines local to the piece)."""

    cls: FailureClass
    engines: tuple[tuple[str, int], ...]
    also: frozenset[str]
    arch_votes: tuple[tuple[str, int], ...]
    last_time: float | None
    tool: str | None
    seen: int
    last: int          # the last line read: the last failure's last frame
    window_until: int  # the end of the window open after it (parallel._Replay.window_until) ...
    chained: bool      # ... or of the window before, if that ends later: no line between them


def fold(records: list[Record], reader: LineReader, covered: set[int] | None = None, opened: int = 0,
         hold: int = 0) -> tuple[list[Record], int, int]:
    """`records` of one piece, or of its next part, with the middle of each run of foldable
    failures folded. `covered`: the first lines of the RUN records whose gated line before them
    covers() them, when the reader knows already (it asked while reading); None: ask again.
    `opened`: the last line that may have opened a traceback (0 at the piece's start: the previous
    piece's). Returns the records, `opened` for the next part, and how many records were used:
    the last run, when it reaches the end of `records` and they hold at most `hold` records from
    its start on, is left for the next part (its next failure may be on its way). A run cut in two
    folds as two runs, the failures at the cut staying lines: exact, only less folded."""
    out: list[Record] = []
    i, n = 0, len(records)
    while i < n:
        j = i  # records[i:j] are foldable (gated line, its frames) pairs
        while j + 1 < n and _foldable(records[j], records[j + 1], reader, opened, covered):
            j += 2
        if j + 1 >= n and n - i <= hold:
            return out, opened, i
        if (j - i) // 2 >= MIN_RUN:
            out.extend(records[i:i + 2])
            before = records[i + 1][0] + records[i + 1][2][0] - 1  # the first failure's last frame
            out.append((records[i + 2][0], FOLD, _count(records[i + 2:j - 2], reader, before)))
            out.extend(records[j - 2:j])
            i = j
        elif j > i:
            out.extend(records[i:j])
            i = j
        else:
            opened = max(opened, _may_open_traceback(records[i], reader))
            out.append(records[i])
            i += 1
    return out, opened, n


def _may_open_traceback(record: Record, reader: LineReader) -> int:
    """The last line of a record the tracker may read as a traceback's start (0: none): one that
    holds a traceback rule's needle (a rule matches only where its needle is)."""
    needles = [cr.rule.needle for cr in reader.rules.rules if cr.rule.kind == TRACEBACK]
    line, kind, payload = record
    if kind == GATED and any(n in t for t in payload[0] for n in needles):
        return line
    if kind == RUN:
        return max((line + i for i, t, _ in payload[2] if any(n in t for n in needles)), default=0)
    return 0


def covers(gated: Record, count: int, reader: LineReader) -> bool:
    """Whether the tracker reads the `count` frames after a gated line inside the window that line
    opens, whatever its state: a caught tactic failure's window (its event is made even inside a
    traceback, unless the line is quoted source) at least that wide. The tracker then takes only
    their details, so a worker need not read their needles."""
    line, kind, payload = gated
    if kind != GATED:
        return False
    segments, packed, tiers = payload
    if tiers or len(segments) != 1 or packed[0] is None:
        return False
    skipped, _, window, _ = _facts(packed[0][3], reader)
    return skipped and count <= window and not is_source(segments[0][packed[0][0]:], True)


def _foldable(gated: Record, run: Record, reader: LineReader, opened: int, covered: set[int] | None) -> bool:
    line = gated[0]
    if run[1] != RUN or run[0] != line + 1 or line - opened <= TRACEBACK_LINES:
        return False
    if not (run[0] in covered if covered is not None else covers(gated, run[2][0], reader)):
        return False
    return _facts(gated[2][1][0][3], reader)[1]


def unresolving(packed: list[Any], reader: LineReader) -> bool:
    """Whether a line's matches (packed, per segment) can leave an error for a later served
    request to resolve. A caught tactic failure cannot, whatever error it quotes: its event is
    benign and caught (verdict.Tracker._merge); only a traceback marker on its line still counts."""
    return any(p is not None and _facts(p[3], reader)[3] for p in packed)


_FACTS: dict[int, tuple[Any, tuple[bool, bool, int, bool]]] = {}


def _facts(matches: Any, reader: LineReader) -> tuple[bool, bool, int, bool]:
    """(a skipped tactic among them, failures only and none sticky, the failures' widest window,
    unresolving) of a line's packed matches; cached like lineshape.shape (a line packs once)."""
    got = _FACTS.get(id(matches))
    if got is not None and got[0] is matches:
        return got[1]
    rules = [reader.rules.rules[i].rule for i, _ in matches]
    skipped = any(r.kind == TACTIC_SKIPPED for r in rules)
    deciding = [r for r in rules if r.kind == TRACEBACK] if skipped else rules
    facts = (skipped, not any(r.kind in MARKER_KINDS or r.kind in STICKY for r in rules),
             max((r.window for r in rules if r.kind not in MARKER_KINDS), default=0),
             any(r.severity in (ERROR, FATAL) or r.kind in (EXCEPTION, TRACEBACK) for r in deciding))
    if len(_FACTS) >= 1024:
        _FACTS.clear()
    _FACTS[id(matches)] = (matches, facts)
    return facts


def _count(middle: list[Record], reader: LineReader, last: int) -> Fold:
    """Feed the middle of a run to a scratch tracker (`last`: the line read before it); what it
    counted, and the window the parallel replay would hold after it.

    A failure's effect on the scratch tracker does not depend on its state (no traceback, no
    pending error, no open failure it could be quoted under), and a run repeats a few failures
    (the same line analysis, backtrace and rank, by identity: the reader caches them): a repeat
    adds its first occurrence's counts again and moves the last line and time; its tactic, tile,
    rank and fields were added already and are kept once."""
    scratch = Tracker(reader.rules)
    scratch.reader = reader  # the worker's caches
    repeats: dict[tuple[Any, ...], tuple[int, Counts]] = {}
    chained, until = True, 0
    for k in range(0, len(middle), 2):
        (line, _, (segments, packed, _)), (first, _, (count, found, _)) = middle[k], middle[k + 1]
        p = packed[0]
        key = (id(p[3]), id(p[4]), id(found), p[1], tuple([tool in segments[0] for tool in TOOLS]))
        got = repeats.get(key)
        if got is None:
            before = _counts(scratch)
            want = scratch.process(line, segments, True, packed)  # > 0: covers() held
            scratch.frame_details(first, found)
            repeats[key] = want, _minus(_counts(scratch), before)
        else:
            want, added = got
            _add(scratch, added, line, p[2])
        if line > last + 1:  # a line between ends the window before (parallel._Replay._gap)
            chained, until = False, 0
        until, last = max(until, line + want), first + count - 1
    if set(scratch.classes) != {TACTIC_SKIPPED} or scratch.pending or scratch.fatal or scratch.sticky \
            or scratch.ready or scratch.progress or scratch.traceback or scratch.activity:
        raise AssertionError("a folded failure changed more than counts")  # a bug in _foldable
    return Fold(cls=scratch.classes[TACTIC_SKIPPED], engines=tuple(scratch.engines.items()),
                also=frozenset(scratch.also), arch_votes=tuple(scratch.arch_votes.items()),
                last_time=scratch.last_time, tool=scratch.hints.get("tool"), seen=scratch.seen,
                last=last, window_until=until, chained=chained)


Counts = tuple[int, int, int, dict[str, int], dict[str, int]]


def _counts(t: Tracker) -> Counts:
    """The scratch tracker's additive counts: failures, survived, lines seen, per engine, per arch."""
    fc = t.classes.get(TACTIC_SKIPPED)
    return fc.count if fc else 0, fc.survived if fc else 0, t.seen, dict(t.engines), dict(t.arch_votes)


def _minus(after: Counts, before: Counts) -> Counts:
    return (after[0] - before[0], after[1] - before[1], after[2] - before[2],
            {k: n - before[3].get(k, 0) for k, n in after[3].items() if n != before[3].get(k, 0)},
            {k: n - before[4].get(k, 0) for k, n in after[4].items() if n != before[4].get(k, 0)})


def _add(t: Tracker, added: Counts, line: int, when: float | None) -> None:
    """A repeat's counts (see _counts) added again; its line and time are the latest."""
    fc = t.classes[TACTIC_SKIPPED]
    fc.count += added[0]
    fc.survived += added[1]
    fc.last_line = line
    t.seen += added[2]
    for engine, n in added[3].items():
        t.engines[engine] += n
    for arch, n in added[4].items():
        t.arch_votes[arch] += n
    if when is not None:
        t.last_time = when


def merge(tracker: Tracker, f: Fold, base: int) -> None:
    """Count a fold (its lines after `base`) into `tracker`, as if it had read those failures
    (the replay's window: see Fold.window_until)."""
    for engine, n in f.engines:
        tracker.engines[engine] = tracker.engines.get(engine, 0) + n
    tracker.also.update(f.also)
    for arch, n in f.arch_votes:
        tracker.arch_votes[arch] = tracker.arch_votes.get(arch, 0) + n
    if f.last_time is not None:
        tracker.last_time = f.last_time
    if f.tool is not None:
        tracker.hints.setdefault("tool", f.tool)
    tracker.seen += f.seen
    cls = f.cls
    cls.last_line += base
    tracker.classes[TACTIC_SKIPPED].merge(cls)  # the run's first failure, a line, made the class
    tracker.open = None  # the run's last failure, a line, opens its own
