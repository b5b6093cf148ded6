"""Folds matched lines into a verdict, in constant memory.

`Tracker.process` is the parser's callback: it turns one line's rule matches into at most one
failure event plus marker events, counts failures per class, attaches backtrace details (tile,
arch) to the failure they belong to, and keeps just enough state to decide at the end:
- an ERROR stays pending until something shows the process lived on: a ready line, or progress
  from the same rank (a tuning sweep that continues after an OutOfResources);
- a FATAL line (Killed, core dump, engine died, non-zero exit) ends the process;
- the cause of a fatal end is the most specific pending error or fatal line, never a failure an
  autotuner or sweep caught (skipped tactics).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tilefit.diagnose import events as ev
from tilefit.diagnose.events import DETAIL_LINES, Event, Rule
from tilefit.diagnose.parser import (
    detail_fields, is_backtrace_frame, strip_prefix, tile_from_enum, tile_from_text,
)
from tilefit.diagnose.rules import ENGINE_RANK, RuleSet

HEALTHY, RECOVERED, FATAL, IN_PROGRESS, UNKNOWN = "healthy", "recovered", "fatal", "in-progress", "unknown"
VERDICTS = (HEALTHY, RECOVERED, FATAL, IN_PROGRESS, UNKNOWN)

MAX_DISTINCT = 64       # tiles / tactics / ranks kept per failure class
TRACEBACK_LINES = 400   # a traceback's exception line is looked for this far
MESSAGE_CHARS = 240

_NUMERIC = frozenset({"required", "limit", "count", "code", "bs", "at", "configs"})
_EXC_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?::\s|:?\s*$)")
_SPECIFIC = {k: i for i, k in enumerate(ev.CAUSE_PRIORITY + (ev.LOGGED_ERROR,))}
_SEVERITY = {s: i for i, s in enumerate(ev.SEVERITIES)}
_MARKER_KINDS = (ev.READY, ev.PROGRESS, ev.TRACEBACK, ev.HINT)  # lines that mark, never fail
_QUOTED_TILE_KINDS = (ev.CUTLASS_INIT, ev.UNSUPPORTED_TILE)  # tile errors a caught tactic quotes


def _specificity(kind: str) -> int:
    """Rank of a failure kind as a cause: lower is more specific (unlisted kinds last)."""
    return _SPECIFIC.get(kind, len(_SPECIFIC))


@dataclass
class FailureClass:
    """Everything counted about one failure kind."""

    kind: str
    count: int = 0
    first_line: int = 0
    last_line: int = 0
    message: str = ""
    severity: str = ev.BENIGN
    survived: int = 0          # events an autotuner/sweep caught or the process outlived
    tiles: list[str] = field(default_factory=list)
    finalize_tiles: list[str] = field(default_factory=list)  # seen with the fused FINALIZE epilogue
    tactics: list[str] = field(default_factory=list)
    ranks: list[str] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    first_time: float | None = None

    def add(self, e: Event) -> None:
        if self.count == 0:
            self.first_line, self.message, self.first_time = e.line, e.text[:MESSAGE_CHARS], e.time
            self.fields = {k: v for k, v in e.fields.items() if isinstance(v, (str, int, float, bool))}
        self.count += e.weight
        self.last_line = e.line
        if _SEVERITY[e.severity] > _SEVERITY[self.severity]:
            self.severity = e.severity
        tactic = e.fields.get("tactic")
        if tactic is not None:
            _add_distinct(self.tactics, str(tactic))
        if e.rank:
            _add_distinct(self.ranks, e.rank)

    def add_tile(self, tile: str, finalize: bool = False) -> None:
        _add_distinct(self.tiles, tile)
        if finalize:
            _add_distinct(self.finalize_tiles, tile)


def _add_distinct(items: list[str], value: str) -> None:
    if value not in items and len(items) < MAX_DISTINCT:
        items.append(value)


@dataclass
class Diagnosis:
    verdict: str
    engine: str | None
    components: list[str]
    arch: str | None
    arch_source: str | None
    gpu: str | None
    failures: list[FailureClass]
    decisive: Event | None
    cause: str | None
    confirmed: bool            # fatal: a line showed the process end (else: the log stops at an error)
    ready: Event | None
    phase: str | None
    seconds_to_ready: float | None
    lines: int
    bytes: int
    hints: dict[str, Any]
    explanations: list[Any] = field(default_factory=list)

    def failure(self, kind: str) -> FailureClass | None:
        return next((f for f in self.failures if f.kind == kind), None)


class Tracker:
    """The parser's callback plus the running state of one log."""

    def __init__(self, rules: RuleSet):
        self.rules = rules
        self.classes: dict[str, FailureClass] = {}
        self.engines: dict[str, int] = {}
        self.arch_votes: dict[str, int] = {}
        self.hints: dict[str, Any] = {}
        # unresolved errors: the first per kind and rank, and how many failures it stands for
        self.pending: dict[tuple[str, str | None], list[Any]] = {}
        self.fatal: dict[str, Event] = {}                       # process-end lines since the last ready
        self.ready: Event | None = None
        self.first_ready: Event | None = None
        self.progress: Event | None = None
        self.traceback: Event | None = None
        self.open: tuple[Event, int] | None = None               # failure whose backtrace may follow
        self.last_time: float | None = None
        self.first_failure_time: float | None = None
        self.first_failure_line: int | None = None
        self.seen = 0

    # -- the parser callback ----------------------------------------------------------------
    def process(self, line: int, segments: list[str], gated: bool = True) -> int:
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
        for text in segments:
            want = max(want, self._segment(line, text))
        return want

    def _segment(self, line: int, text: str) -> int:
        candidates = self.rules.candidates(text)
        if not candidates:
            if self.open is not None:
                self._attach(line, self._details(text))
            return 0
        body, rank, when = strip_prefix(text)
        if when is not None:
            self.last_time = when
        matches = self.rules.match(text, body, candidates)
        details = self._details(text) if (matches or self.open or self.traceback) else {}
        if "tool" not in self.hints:
            for tool in ("benchmark_moe", "tuning_fused_moe_triton"):
                if tool in text:
                    self.hints["tool"] = tool
        if not matches:
            self._attach(line, details)
            return 0
        if self.traceback is not None and rank is None:
            rank = self.traceback.rank
        want = 0
        failures = [(r, f) for r, f in matches if r.kind not in _MARKER_KINDS]
        for r, f in matches:
            if r.kind in _MARKER_KINDS:
                e = Event(line, r.kind, r.severity, r.engine, r.name, text.strip(), rank, when, dict(r.fields))
                e.fields.update(f)
                self._marker(e)
                self.seen += 1
                want = max(want, r.window)
        if failures:
            e = self._merge(line, text, body, rank, when, failures, details)
            if e is not None:
                self.seen += 1
                want = max(want, self._failure(e, max(r.window for r, _ in failures)))
        return want

    def _details(self, text: str) -> dict[str, Any]:
        details = detail_fields(text)
        arch = details.get("arch")
        if arch:
            self.arch_votes[arch] = self.arch_votes.get(arch, 0) + 1
        return details

    # -- markers -----------------------------------------------------------------------------
    def _marker(self, e: Event) -> None:
        self._count_engine(e.engine)
        if e.kind == ev.READY:
            self.ready = e
            if self.first_ready is None:
                self.first_ready = e
            for first, weight in self.pending.values():
                self._survived(first, weight)
            self.pending.clear()
            self.fatal.clear()
            self.traceback = None
        elif e.kind == ev.PROGRESS:
            self.progress = e
            for key in [k for k in self.pending if k[1] == e.rank]:
                self._survived(*self.pending.pop(key))
        elif e.kind == ev.TRACEBACK:
            self.traceback = e
        elif e.kind == ev.HINT:
            hint = e.fields.get("hint", e.rule)
            self.hints.setdefault(hint, {k: v for k, v in e.fields.items() if k != "hint"} or True)
            if e.fields.get("mlir_pass"):
                self.hints["mlir_pass"] = e.fields["mlir_pass"]
        if e.fields.get("device"):
            self.hints.setdefault("device", e.fields["device"])

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
        fields: dict[str, Any] = {}
        for _, f in matches:
            fields.update({k: _number(v) if k in _NUMERIC else v for k, v in f.items()})
        kinds = [r.kind for r, _ in matches]
        skipped = ev.TACTIC_SKIPPED in kinds
        if skipped:
            kind = ev.TACTIC_SKIPPED
            reasons = [k for k in kinds if k != ev.TACTIC_SKIPPED and k in _SPECIFIC]
            if reasons:
                fields["reason"] = min(reasons, key=_SPECIFIC.__getitem__)
        else:
            # "RuntimeError: <what>" is an exception line by form; a rule that names <what> wins.
            named = [k for k in kinds if k != ev.EXCEPTION] or kinds
            kind = min(named, key=_specificity)
        severity = max((r.severity for r, _ in matches), key=_SEVERITY.__getitem__)
        in_tb = self.traceback is not None
        if kind == ev.LOGGED_ERROR and in_tb:
            return None  # vLLM prefixes every traceback line with ERROR: the exception line decides
        if in_tb and _EXC_LINE.match(body):
            # The exception that ends a traceback was not caught where it was raised.
            if not skipped and _SEVERITY[severity] < _SEVERITY[ev.ERROR]:
                severity = ev.ERROR
            self.traceback = None
        if kind == ev.EXIT and fields.get("code") in (0, "0", None):
            return None
        rule = min(matches, key=lambda m: _specificity(m[0].kind))[0]
        e = Event(line, kind, ev.BENIGN if skipped else severity, rule.engine, rule.name, text.strip(),
                  rank, when if when is not None else self.last_time, fields, caught=skipped)
        for r, _ in matches:
            self._count_engine(r.engine)
        for key in ("arch", "dtype_hint", "finalize", "gemm"):
            if key in details:
                e.fields.setdefault(key, details[key])
        tile = details.get("tile") or _tile_of(fields)
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
        if e.severity == ev.FATAL:
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
        for key in ("arch", "dtype_hint", "gemm"):
            if key in details:
                e.fields.setdefault(key, details[key])
                fc = self.classes.get(e.kind)
                if fc is not None:
                    fc.fields.setdefault(key, details[key])

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
        pending = [slot[0] for slot in self.pending.values()]
        candidates = [e for e in pending + list(self.fatal.values()) if not e.caught]
        failures = sorted(self.classes.values(), key=lambda f: f.first_line)
        decisive: Event | None = None
        cause = None
        confirmed = False
        if candidates:
            verdict = FATAL
            decisive = min(candidates, key=lambda e: (_specificity(e.kind), e.line))
            cause = decisive.kind
            confirmed = bool(self.fatal)
        elif self.ready is not None:
            verdict = RECOVERED if failures else HEALTHY
            decisive = self.ready
        elif self.seen:
            verdict = IN_PROGRESS
            decisive = self.progress
        else:
            verdict = UNKNOWN
        seconds = None
        if self.ready is not None and self.first_failure_time is not None and self.ready.time is not None \
                and self.first_failure_line is not None and self.first_failure_line < self.ready.line:
            seconds = round(self.ready.time - self.first_failure_time, 3)
        if arch is None and self.arch_votes:
            arch = max(self.arch_votes, key=lambda a: (self.arch_votes[a], a))
            arch_source = "log"
        seen = [e for e in ENGINE_RANK if e in self.engines]
        engine = next((e for e in seen if e != "generic"), "generic" if seen else None)
        return Diagnosis(
            verdict=verdict, engine=engine, components=[e for e in seen if e not in (engine, "generic")],
            arch=arch, arch_source=arch_source, gpu=gpu, failures=failures, decisive=decisive,
            cause=cause, confirmed=confirmed, ready=self.ready, phase=_phase(self.progress),
            seconds_to_ready=seconds, lines=lines, bytes=nbytes, hints=dict(self.hints),
        )


def _number(text: str) -> int | str:
    """A numeric field as an int; text when it is no plain integer or too long to be one that
    matters (int() refuses more than 4,300 digits, and no byte count or exit code has 19)."""
    digits = text[1:] if text.startswith("-") else text
    return int(text) if digits.isdecimal() and len(digits) <= 18 else text


def _tile_of(fields: dict[str, Any]) -> str | None:
    if fields.get("tile_enum"):
        return tile_from_enum(fields["tile_enum"])
    if fields.get("tile_text"):
        return tile_from_text(fields["tile_text"])
    return None


def _phase(e: Event | None) -> str | None:
    if e is None:
        return None
    phase = str(e.fields.get("phase", "starting"))
    extra = [f"{k}={e.fields[k]}" for k in ("bs", "op", "step") if k in e.fields]
    if "done" in e.fields and "total" in e.fields:
        extra.append(f"{e.fields['done']}/{e.fields['total']}")
    return phase + (f" ({', '.join(extra)})" if extra else "") + f", line {e.line}"
