"""Folds matched lines into a verdict, in constant memory.

`Tracker.process` is the parser's callback: it turns one line's rule matches into at most one
failure event plus marker events, counts failures per class, attaches backtrace details (tile,
arch) to the failure they belong to, and keeps just enough state to decide at the end. The
principle (issue 14):
- `fatal` needs a process-ending event: a FATAL line (a death report, an exit code, a traceback
  that reached a process's outermost frame), a sticky CUDA error (it poisons the CUDA context, even
  inside a tactic an autotuner skipped), or an ERROR nothing shows the process outlived;
- an ERROR is caught only when the same process (rank) shows progress after it, or the server
  becomes ready; after the server is ready, a request's error does not end it;
- `recovered` needs a ready line after the failures; a run with progress but no ready line is
  `in-progress`; a log with neither is `unknown`;
- the cause is the most specific uncaught error, never a failure an autotuner caught.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from tilefit.diagnose import events as ev
from tilefit.diagnose.events import DETAIL_LINES, Event, Rule
from tilefit.diagnose.analyze import LineReader
from tilefit.diagnose.diagnosis import (
    FATAL, HEALTHY, IN_PROGRESS, RECOVERED, UNKNOWN, VERDICTS, Diagnosis, FailureClass,
)
from tilefit.diagnose.parser import is_backtrace_frame
from tilefit.diagnose.sglang_warmup import SglangWarmup
from tilefit.diagnose.lineshape import (
    ATTACHED, FAILURE_HINTS, NOT_FAILURES, VLLM_PROCS, WARNING_LEVEL, backtrace, cause_kind, is_source, phase,
    ready_line, TOOLS, remember, shape, specificity, tile_of,
)
from tilefit.diagnose.rules import ENGINE_RANK, RuleSet

__all__ = ["Tracker", "Diagnosis", "FailureClass", "VERDICTS", "HEALTHY", "RECOVERED", "FATAL", "IN_PROGRESS",
           "UNKNOWN"]

TRACEBACK_LINES = 400   # a traceback's exception line is looked for this far

_EXC_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?::\s|:?\s*$)")
_SEVERITY = {s: i for i, s in enumerate(ev.SEVERITIES)}
_MARKER_KINDS = ev.MARKER_KINDS
_QUOTED_TILE_KINDS = (ev.CUTLASS_INIT, ev.UNSUPPORTED_TILE)  # tile errors a caught tactic quotes


class Tracker:
    """The parser's callback plus the running state of one log."""

    def __init__(self, rules: RuleSet):
        self.rules = rules
        self.reader = LineReader(rules)
        self.classes: dict[str, FailureClass] = {}
        self.engines: dict[str, int] = {}    # engines whose rule decided a line
        self.also: set[str] = set()           # engines whose rules matched too (quoted errors)
        self.arch_votes: dict[str, int] = {}
        self.hints: dict[str, Any] = {}
        self.versions: dict[str, str] = {}   # tool -> version the log printed (first seen)
        # unresolved errors: the first per kind and rank, and how many failures it stands for
        self.pending: dict[tuple[str, str | None], list[Any]] = {}
        self.fatal: dict[str, Event] = {}                       # process-end lines since the last ready
        self.sticky: dict[str | None, Event] = {}               # first sticky CUDA error per process
        self.ready: Event | None = None
        self.warmup = SglangWarmup()  # sglang's own start, which looks like serving
        self.progress: Event | None = None
        self.activity = False  # an engine's logger at work (in-progress evidence only)
        self.traceback: Event | None = None
        self.open: tuple[Event, int] | None = None               # failure whose backtrace may follow
        self.last_time: float | None = None
        self.first_failure_time: float | None = None
        self.first_failure_line: int | None = None
        self.seen = 0

    def needs(self) -> tuple[str, ...]:
        """The weak tiers of lines (Rule.tier) that could still change the verdict: serving lines
        until the server is ready with no unresolved error after that, an engine logger's activity
        until one such line was seen."""
        serving = self.ready is None or bool(self.pending) or bool(self.fatal)
        if serving:
            return (ev.SERVING,) if self.activity else (ev.SERVING, ev.ACTIVITY)
        return () if self.activity else (ev.ACTIVITY,)

    # -- the parser callback ----------------------------------------------------------------
    def process(self, line: int, segments: list[str], gated: bool = True, packed: list[Any] | None = None
                ) -> int:
        """One line's segments (`packed`: their analyses, made by another process's LineReader)."""
        if self.traceback is not None and line - self.traceback.line > TRACEBACK_LINES:
            self.traceback = None
        if not gated:
            # A line inside a failure's window with no needle: only its backtrace details matter,
            # and the window ends at the first line that is not a backtrace frame.
            frame = False
            for text in segments:
                if is_backtrace_frame(text):
                    frame = True
                    self._attach(line, self._details(text))
            return 0 if frame else -1
        want = 0
        for i, text in enumerate(segments):
            info = self.reader.line(text) if packed is None else \
                (None if packed[i] is None else self.reader.unpack(text, packed[i]))
            want = max(want, self._segment(line, text, info))
        return want

    def frames(self, first: int, raw: bytes) -> None:
        """Backtrace frames inside a failure's window (lines first, first+1, ...; their bytes):
        their details only. The scanner hands over a run of frames at once, and the reader
        caches a run's details, so a repeated backtrace costs one call and one lookup."""
        self.frame_details(first, self.reader.run(raw))

    def frame_details(self, first: int, found: Any) -> None:
        """frames() with the details already read: (offset from `first`, details) where non-empty.
        Within the open failure's window a run adds its sum (lineshape.backtrace) at once."""
        if self.traceback is not None and first - self.traceback.line > TRACEBACK_LINES:
            self.traceback = None
        span, votes, tiles, fields = backtrace(found)
        if self.open is not None and first + span > self.open[1]:
            for i, d in found:  # the window closes inside the run
                self._attach(first + i, self._vote(d))
            return
        for arch, n in votes:
            self.arch_votes[arch] = self.arch_votes.get(arch, 0) + n
        if self.open is not None:
            e, fc = self.open[0], self.classes.get(self.open[0].kind)
            for tile, finalize in tiles:
                self._add_tile(e, tile, finalize)
            for key, value in fields:
                e.fields.setdefault(key, value)
                if fc is not None:
                    fc.note(key, value)

    def _segment(self, line: int, text: str, info: Any) -> int:
        if info is None:
            if self.open is not None:
                self._attach(line, self._details(text))
            return 0
        body, rank, when, matches, found = info
        if rank is not None and rank.startswith(VLLM_PROCS):
            self._count_engine("vllm")  # vLLM's own process tags name the engine
        if when is not None:
            self.last_time = when
        details = self._vote(found) if (matches or self.open or self.traceback) else {}
        if "tool" not in self.hints:
            for tool in TOOLS:
                if tool in text:
                    self.hints["tool"] = tool
        if not matches:
            self._attach(line, details)
            return 0
        if self.traceback is not None and rank is None:
            rank = self.traceback.rank
        want = 0
        mixed = False
        for r, f in matches:
            if r.kind in _MARKER_KINDS:
                mixed = True
                e = Event(line, r.kind, r.severity, r.engine, r.name, text.strip(), rank, when, dict(r.fields))
                e.fields.update(f)
                self._marker(e)
                self.seen += 1
                want = max(want, r.window)
        # The reader's cached tuple when every match is a failure (see shape); a fresh list else.
        failures = [(r, f) for r, f in matches if r.kind not in _MARKER_KINDS] if mixed else matches
        if failures and is_source(body, self.traceback is not None):
            failures = ()  # a traceback quoting the code that raised: the exception line follows
        if failures:
            e = self._merge(line, text, body, rank, when, failures, details)
            if e is not None:
                self.seen += 1
                want = max(want, self._failure(e, max(r.window for r, _ in failures)))
        return want

    def _details(self, text: str) -> dict[str, Any]:
        return self._vote(self.reader.details(text))

    def _vote(self, details: dict[str, Any]) -> dict[str, Any]:
        """Count the arch a line names (details are shared and read-only)."""
        arch = details.get("arch")
        if arch:
            self.arch_votes[arch] = self.arch_votes.get(arch, 0) + 1
        return details

    # -- markers -----------------------------------------------------------------------------
    def _marker(self, e: Event) -> None:
        self._count_engine(e.engine)
        was = self.ready
        self.ready, take = self.warmup.see(e, self.ready, self.engines)
        if was is not None and was.kind == ev.PROGRESS and (self.progress is None or self.progress.line < was.line):
            self.progress = was  # uvicorn's start, taken back from ready
        if not take:
            return
        if e.kind == ev.READY:
            self.ready = e
            for first, weight in self.pending.values():
                self._survived(first, weight)
            self.pending.clear()
            self.fatal.clear()
            self.traceback = None
        elif e.kind == ev.PROGRESS and e.fields.get("activity"):
            self.activity = True
        elif e.kind == ev.PROGRESS:
            self.progress = e
            # The same process went on: its errors were caught (sticky ones are never pending).
            for key in [k for k in self.pending if k[1] == e.rank]:
                self._survived(*self.pending.pop(key))
        elif e.kind == ev.TRACEBACK:
            self.traceback = e
        remember(e, self.hints, self.versions)

    def _progressed(self, e: Event) -> bool:
        """Whether the process of `e` logged progress after it."""
        p = self.progress
        return p is not None and p.line > e.line and p.rank == e.rank

    def _survived(self, e: Event, weight: int) -> None:
        e.caught = True
        fc = self.classes.get(e.kind)
        if fc is not None:
            fc.survived += weight

    # -- failures ----------------------------------------------------------------------------
    def _merge(self, line: int, text: str, body: str, rank: str | None, when: float | None,
               matches: list[tuple[Rule, dict[str, str]]], details: dict[str, Any]) -> Event | None:
        """One event for all failure rules that matched a line: the most specific kind, the
        highest severity; a line an autotuner logged ("Skipping tactic ...: <error>") stays a
        caught tactic failure whatever error it quotes."""
        kind, severity, rule, fields, skipped = shape(matches)
        in_tb = self.traceback is not None
        if kind == ev.LOGGED_ERROR and in_tb:
            return None  # vLLM prefixes every traceback line with ERROR: the exception line decides
        if in_tb and _EXC_LINE.match(body):
            # The exception that ends a traceback was not caught where it was raised.
            if not skipped and _SEVERITY[severity] < _SEVERITY[ev.ERROR]:
                severity = ev.ERROR
            self.traceback = None
        elif kind == ev.EXCEPTION and severity == ev.BENIGN and len(body) == len(text) \
                and text[:1].isalpha() and not text.startswith("Error"):
            # An exception line at column 0 with no logger prefix is how Python prints the end of
            # an uncaught exception's traceback (its top may be cut from the excerpt). A bare
            # "Error: ..." is no Python exception name (C++ programs print it).
            severity = ev.ERROR
        if kind == ev.EXIT and fields.get("code") in (0, "0", None):
            return None
        e = Event(line, kind, ev.BENIGN if skipped else severity, rule.engine, rule.name, text.strip(),
                  rank, when if when is not None else self.last_time, dict(fields), caught=skipped)
        # A line's engine is its deciding rule's: a FlashInfer autotuner line that quotes a
        # TensorRT-LLM C++ error is FlashInfer's (its MoE kernels are TensorRT-LLM's, inside it).
        self._count_engine(rule.engine)
        self.also.update(r.engine for r, _ in matches)
        if details:
            for key in ("arch", "dtype_hint", "finalize", "gemm"):
                if key in details:
                    e.fields.setdefault(key, details[key])
        tile = details.get("tile") or tile_of(fields)
        if tile:
            e.tiles.append(tile)
            e.fields["tile"] = tile
        if fields.get("arch_cc"):
            e.fields.setdefault("arch", f"sm{fields['arch_cc']}")
        return e

    def _failure(self, e: Event, window: int) -> int:
        fc = self.classes.get(e.kind)
        if fc is None:
            fc = self.classes[e.kind] = FailureClass(e.kind)
        fc.add(e)
        for t in e.tiles:
            fc.add_tile(t, bool(e.fields.get("finalize")) and t == e.fields.get("tile"))
        if e.caught:
            fc.survived += e.weight
        if self.first_failure_line is None:
            self.first_failure_line, self.first_failure_time = e.line, e.time
        if e.kind in ev.STICKY or e.fields.get("reason") in ev.STICKY:
            # A sticky CUDA error poisons the process's context, caught or not.
            self.sticky.setdefault(e.rank, e)
        elif e.severity == ev.FATAL:
            self.fatal.setdefault(e.kind, e)
        elif e.severity == ev.ERROR and not e.caught:
            slot = self.pending.setdefault((e.kind, e.rank), [e, 0])
            slot[1] += e.weight
        if window or e.kind in ev.TILE_KINDS:
            # A caught tactic failure owns the error lines that quote it (the next line may carry
            # "Failed to initialize cutlass ..." and then the backtrace).
            if self.open and self.open[0].kind == ev.TACTIC_SKIPPED and e.kind in _QUOTED_TILE_KINDS \
                    and e.line - self.open[0].line <= DETAIL_LINES:
                self._absorb(self.open[0], e)
            else:
                self.open = (e, e.line + max(window, DETAIL_LINES))
        return window

    def _absorb(self, owner: Event, e: Event) -> None:
        """A tile error quoted under a caught tactic failure: caught too, tiles shared."""
        e.caught = True
        fc = self.classes[e.kind]
        fc.survived += e.weight
        slot = self.pending.get((e.kind, e.rank))
        if slot is not None:
            slot[1] -= e.weight
            if slot[0] is e or slot[1] <= 0:
                del self.pending[(e.kind, e.rank)]
        owner.fields.setdefault("reason", e.kind)
        for t in e.tiles:
            self._add_tile(owner, t, bool(e.fields.get("finalize")) and t == e.fields.get("tile"))

    def _attach(self, line: int, details: dict[str, Any]) -> None:
        if not self.open or not details:
            return
        e, until = self.open
        if line > until:
            self.open = None
            return
        if details.get("tile"):
            self._add_tile(e, details["tile"], bool(details.get("finalize")))
        for key in ATTACHED:
            if key in details:
                e.fields.setdefault(key, details[key])
                fc = self.classes.get(e.kind)
                if fc is not None:
                    fc.note(key, details[key])

    def _add_tile(self, e: Event, tile: str, finalize: bool = False) -> None:
        if tile not in e.tiles:
            e.tiles.append(tile)
        fc = self.classes.get(e.kind)
        if fc is not None:
            fc.add_tile(tile, finalize)

    def _count_engine(self, engine: str) -> None:
        self.engines[engine] = self.engines.get(engine, 0) + 1

    # -- the end -------------------------------------------------------------------------------
    def finish(self, lines: int, nbytes: int, *, arch: str | None = None, gpu: str | None = None,
               arch_source: str | None = None) -> Diagnosis:
        ready = self.ready
        ended = [e for e in self.fatal.values() if not e.caught]
        sticky = list(self.sticky.values())
        classes = dict(self.classes)
        cut: Event | None = None
        tb = self.traceback
        if tb is not None and not self.pending and not ended and not sticky \
                and (ready is None or tb.line > ready.line) and not self._progressed(tb) \
                and not WARNING_LEVEL.search(tb.text):
            # Nothing else decides, and the log ends inside a traceback (its exception line cut
            # off): an error nothing caught.
            # (Counted in copies: finish() may run again while --follow reads on.)
            cut = Event(tb.line, ev.EXCEPTION, ev.ERROR, tb.engine, tb.rule, tb.text, tb.rank, tb.time)
            classes[ev.EXCEPTION] = copy.deepcopy(classes.get(ev.EXCEPTION)) or FailureClass(ev.EXCEPTION)
            classes[ev.EXCEPTION].add(cut)
        # After the server is ready a request's error does not end it, unless the process ended
        # after all; before, nothing caught it.
        pending = [slot[0] for slot in self.pending.values()
                   if not slot[0].caught and (ready is None or slot[0].line < ready.line or ended or sticky)]
        candidates = sticky + pending + ended + ([cut] if cut is not None else [])
        failures = sorted(classes.values(), key=lambda f: f.first_line)
        decisive: Event | None = None
        cause = settle = None
        confirmed = False
        if candidates:
            verdict = FATAL
            decisive = min(candidates, key=lambda e: (specificity(cause_kind(e)), e.line))
            cause = cause_kind(decisive)
            confirmed = bool(ended or sticky)
            if not confirmed:
                who = f" from {decisive.rank}" if decisive.rank else ""
                settle = (f"the log stops at this error with no line showing the process end: an exit or "
                          f"death line (an exit code, 'Killed', 'Received sigquit', 'EngineCore failed to "
                          f"start') would confirm it; a progress line{who} after it would show it was caught")
        elif ready is not None:
            real = [f for f in failures if f.kind not in NOT_FAILURES]
            verdict = RECOVERED if real else HEALTHY
            decisive = ready
        # hints a process prints on its way count (a version, a default config), an MLIR failure note not
        elif self.progress is not None or self.activity or any(h not in FAILURE_HINTS for h in self.hints) \
                or ev.TACTIC_SKIPPED in self.classes:
            verdict = IN_PROGRESS
            decisive = self.progress
            settle = ready_line(self.engines, self.progress.fields.get("phase") if self.progress else None)
        else:
            verdict = UNKNOWN
        seconds = None
        if self.ready is not None and self.first_failure_time is not None and self.ready.time is not None \
                and self.first_failure_line is not None and self.first_failure_line < self.ready.line:
            seconds = round(self.ready.time - self.first_failure_time, 3)
        if arch is None and self.arch_votes:
            arch = max(self.arch_votes, key=lambda a: (self.arch_votes[a], a))
            arch_source = "log"
        seen = [e for e in ENGINE_RANK if e in self.engines or e in self.also]
        engine = next((e for e in ENGINE_RANK if e in self.engines and e != "generic"),
                      next((e for e in seen if e != "generic"), "generic" if seen else None))
        hints = dict(self.hints)
        if self.versions:
            hints["versions"] = dict(self.versions)
        return Diagnosis(
            verdict=verdict, engine=engine, components=[e for e in seen if e not in (engine, "generic")],
            arch=arch, arch_source=arch_source, gpu=gpu, failures=failures, decisive=decisive,
            cause=cause, confirmed=confirmed, ready=self.ready, phase=phase(self.progress),
            seconds_to_ready=seconds, lines=lines, bytes=nbytes, hints=hints, settle=settle,
            ended=min(ended, key=lambda e: e.line) if ended else None,
        )
