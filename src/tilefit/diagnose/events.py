"""The vocabulary of a diagnosis: rules (what a log line means), events (a rule that matched a line)
and the failure classes the verdict counts. Engine modules under `rules/` are lists of `Rule` values;
the parser turns matching lines into `Event`s and `verdict.py` folds events into a `Diagnosis`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# A failure's backtrace is read from this many following lines (and no rule window is wider: the
# parallel reader sends at most this many frames after a gated line).
DETAIL_LINES = 40
# The device_name=... part of an engine's fused-MoE config file name (as the tuners and vLLM print it).
DEVICE_NAME_FIELD = r"device_name=(?P<device>[^,\]'\"=]{1,80}?)(?:,|\.json)"

# How much a matched line matters. Ordered: a later one outranks an earlier one.
MARKER = "marker"    # progress, readiness, context (traceback start, a hint)
BENIGN = "benign"    # a failure the program survives by design (a skipped tactic or config)
ERROR = "error"      # a failure that kills the process unless something later shows it lived on
FATAL = "fatal"      # the process or run ended (Killed, core dump, non-zero exit, engine died)
SEVERITIES = (MARKER, BENIGN, ERROR, FATAL)
SERVING, ACTIVITY = "serving", "activity"   # Rule.tier values
TIERS = (SERVING, ACTIVITY)

# Marker kinds: what the run was doing.
READY = "ready"              # the server answers, or the tuner wrote its result
PROGRESS = "progress"        # loading, warmup, autotuning, CUDA-graph capture, tuning sweep
TRACEBACK = "traceback"      # "Traceback (most recent call last):" opens an exception block
HINT = "hint"                # context for explanations (default config in use, GPU name)
MARKER_KINDS = (READY, PROGRESS, TRACEBACK, HINT)  # lines that mark, never fail

# Failure classes. Benign ones never decide a fatal verdict.
TACTIC_SKIPPED = "tactic-skipped"
CUTLASS_INIT = "cutlass-init-failed"
UNSUPPORTED_TILE = "unsupported-tile"
TRITON_OOR = "triton-out-of-resources"
TRITON_CRASH = "triton-compiler-crash"
CUDA_OOM = "cuda-oom"
ILLEGAL_ACCESS = "illegal-memory-access"
ILLEGAL_INSTRUCTION = "illegal-instruction"
CUDA_ERROR = "cuda-error"
NCCL = "nccl-error"
EXCEPTION = "python-exception"
ASSERTION = "assertion-failed"    # a C++ assertion (TensorRT-LLM's TLLM_CHECK): thrown, caught or not
UNCAUGHT = "uncaught-exception"   # a traceback that reached a process's outermost frame
NO_CONFIG = "no-valid-config"     # "Have not found any valid GEMM config": evidence, never a cause
ENGINE_DIED = "engine-died"
KILLED = "killed"
CRASHED = "crashed"          # segfault / abort / core dump
EXIT = "nonzero-exit"
LOGGED_ERROR = "logged-error"

# When several errors share the final incident, the one that names the root cause wins; the
# generic "something died" kinds only decide when nothing more specific was logged.
CAUSE_PRIORITY = (
    CUDA_OOM, ILLEGAL_INSTRUCTION, ILLEGAL_ACCESS, NCCL, TRITON_CRASH, TRITON_OOR, CUTLASS_INIT,
    UNSUPPORTED_TILE, CUDA_ERROR, ASSERTION, EXCEPTION, UNCAUGHT, CRASHED, KILLED, ENGINE_DIED, EXIT,
)

# A CUDA error that poisons the process's CUDA context: every later kernel in that process fails,
# so the process is lost even when an autotuner "skipped" the tactic that raised it and a progress
# bar followed. (Out-of-memory is not sticky: it has its own kind.)
STICKY = frozenset({ILLEGAL_ACCESS, ILLEGAL_INSTRUCTION, CUDA_ERROR})

# Kinds whose tiles the CUTLASS fit engine can explain.
TILE_KINDS = (TACTIC_SKIPPED, CUTLASS_INIT, UNSUPPORTED_TILE)


@dataclass(frozen=True, slots=True)
class Rule:
    """One kind of log line. `needle` is a literal every matching line contains: it feeds the fast
    chunk scan, so it should start with a character that is rare in ordinary log text. `pattern`
    (optional) is a regex searched in the line whose named groups become the event's fields.
    `example` is a line in the engine's real format; tests check the rule matches it.
    `window` asks the parser to hand over that many following lines (backtraces, traceback bodies)
    even when they contain no needle. `gate=False` rules only look at lines inside such a window.
    """

    name: str
    engine: str
    kind: str
    severity: str
    needle: str
    example: str
    pattern: str | None = None
    window: int = 0
    gate: bool = True
    body: bool = False  # match the line with its rank/time/level prefix removed
    fields: tuple[tuple[str, Any], ...] = ()  # constant fields added to every event
    # "" for most rules. "serving" / "activity": lines a busy server prints all the time (served
    # requests, engine statistics, logger INFO lines). They matter only until they have said what
    # they can say (ready / at work), so the reader stops gating them then (see RuleSet.gates).
    tier: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"rule {self.name}: unknown severity {self.severity!r}")
        if self.needle not in self.example:
            raise ValueError(f"rule {self.name}: its example does not contain its needle")


@dataclass(frozen=True, slots=True)
class CompiledRule:
    rule: Rule
    regex: re.Pattern[str] | None

    def match(self, text: str, body: str) -> dict[str, str] | None:
        """The named groups of a match (empty when the rule has no pattern), or None."""
        if self.rule.needle not in text:
            return None
        if self.regex is None:
            return {}
        m = self.regex.search(body if self.rule.body else text)
        if m is None:
            return None
        return {k: v for k, v in m.groupdict().items() if v is not None}


@dataclass(slots=True)
class Event:
    """A rule that matched one line. `fields` holds what the rule extracted (tile, tactic, arch,
    required/limit bytes, counts); detail lines that follow (backtraces) add tiles and arch."""

    line: int
    kind: str
    severity: str
    engine: str
    rule: str
    text: str
    rank: str | None = None
    time: float | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    tiles: list[str] = field(default_factory=list)
    caught: bool = False  # an autotuner or sweep caught it: counts as benign, never a cause

    @property
    def weight(self) -> int:
        """How many failures this line reports ('Skipped 20 unsupported tactic(s)' counts 20)."""
        count = self.fields.get("count", 1)
        return max(1, count) if isinstance(count, int) else 1
