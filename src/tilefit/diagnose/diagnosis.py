"""The result of a diagnosis: the verdict, the failure classes counted, the decisive line and
what would settle an open question. Built by verdict.Tracker, explained by explain.py, rendered by
render.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilefit.diagnose import events as ev
from tilefit.diagnose.events import Event

HEALTHY, RECOVERED, FATAL, IN_PROGRESS, UNKNOWN = "healthy", "recovered", "fatal", "in-progress", "unknown"
VERDICTS = (HEALTHY, RECOVERED, FATAL, IN_PROGRESS, UNKNOWN)

MAX_DISTINCT = 64       # tiles / tactics / ranks kept per failure class
MESSAGE_CHARS = 240
_SEVERITY = {s: i for i, s in enumerate(ev.SEVERITIES)}


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
    # The fields a backtrace added after the first event (note), kept apart for merge.
    noted: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

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

    def note(self, key: str, value: Any) -> None:
        """A field a backtrace names (arch, data type, GEMM): the first value stays."""
        self.fields.setdefault(key, value)
        self.noted.setdefault(key, value)

    def merge(self, later: FailureClass) -> None:
        """Count `later`, the same kind counted over a later stretch of the same log, into this
        class, as if its events had been added here one by one (its first event's own fields
        excepted: only what its backtraces noted is kept, as `add` would for a later event)."""
        self.count += later.count
        self.survived += later.survived
        self.last_line = later.last_line
        if _SEVERITY[later.severity] > _SEVERITY[self.severity]:
            self.severity = later.severity
        for mine, theirs in ((self.tactics, later.tactics), (self.ranks, later.ranks),
                             (self.tiles, later.tiles), (self.finalize_tiles, later.finalize_tiles)):
            for value in theirs:
                _add_distinct(mine, value)
        for key, value in later.noted.items():
            self.note(key, value)


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
    settle: str | None = None  # fatal but unconfirmed, or in-progress: the line that would decide it
    ended: Event | None = None  # fatal: the line where the process ended, when the log shows one

    def failure(self, kind: str) -> FailureClass | None:
        return next((f for f in self.failures if f.kind == kind), None)


@dataclass(frozen=True, slots=True)
class Explanation:
    """One explanation of a diagnosis (explain.py builds them; causes.py too, without a cycle)."""

    about: str      # a failure kind, or "tile 128x256x128"
    finding: str
    remedy: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"about": self.about, "finding": self.finding, "remedy": self.remedy}
