"""What one attempt to compile and time a config gave: a value, never an exception.

The tuner, the journal and the diagnoser speak these types. Each case turns into a small JSON
object (`to_json`) and back (`from_json`), so a journal line holds one result exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union


@dataclass(frozen=True, slots=True)
class Ok:
    """Median kernel time in microseconds."""

    time_us: float
    kind = "ok"


@dataclass(frozen=True, slots=True)
class DoesNotFit:
    """A resource the launch needs exceeds the device's limit (e.g. shared memory)."""

    resource: str
    required: int
    limit: int
    kind = "does-not-fit"


@dataclass(frozen=True, slots=True)
class CompileFailed:
    message: str
    kind = "compile-failed"


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    """The kernel compiled but failed to launch or run (or gave wrong results)."""

    message: str
    kind = "launch-failed"


@dataclass(frozen=True, slots=True)
class Timeout:
    seconds: float
    phase: str = ""  # "compile" | "run"
    kind = "timeout"


@dataclass(frozen=True, slots=True)
class Crashed:
    """The worker process died: a signal number (e.g. 11 for SIGSEGV) or an exit code."""

    signal: int | None
    exit_code: int | None = None
    phase: str = ""
    kind = "crashed"


Result = Union[Ok, DoesNotFit, CompileFailed, LaunchFailed, Timeout, Crashed]
_CASES: dict[str, type] = {c.kind: c for c in (Ok, DoesNotFit, CompileFailed, LaunchFailed,
                                               Timeout, Crashed)}


def time_of(result: Result) -> float:
    """Time for ranking: failures rank after every measured config."""
    return result.time_us if isinstance(result, Ok) else float("inf")


def to_json(result: Result) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": result.kind}
    for name in result.__slots__:  # type: ignore[union-attr]
        out[name] = getattr(result, name)
    return out


def from_json(data: dict[str, Any]) -> Result:
    kind = data.get("kind")
    if kind not in _CASES:
        raise ValueError(f"unknown result kind {kind!r}; known: {', '.join(_CASES)}")
    cls = _CASES[kind]
    return cls(**{k: data[k] for k in cls.__slots__ if k in data})


def describe(result: Result) -> str:
    """One human line."""
    if isinstance(result, Ok):
        return f"{result.time_us:.2f} us"
    if isinstance(result, DoesNotFit):
        return f"does not fit: {result.resource} needs {result.required:,} > {result.limit:,}"
    if isinstance(result, Timeout):
        return f"timed out after {result.seconds:g} s ({result.phase or 'run'})"
    if isinstance(result, Crashed):
        how = f"signal {result.signal}" if result.signal else f"exit code {result.exit_code}"
        return f"worker crashed ({how}) during {result.phase or 'run'}"
    label = "compile failed" if isinstance(result, CompileFailed) else "launch failed"
    return f"{label}: {result.message}"


def parse_out_of_resources(message: str) -> DoesNotFit | None:
    """Triton's `out of resource: shared memory, Required: X, Hardware limit: Y` as a DoesNotFit."""
    import re

    m = re.search(r"out of resource:\s*([\w ]+?),\s*Required:\s*(\d+),\s*Hardware limit:\s*(\d+)",
                  message)
    if not m:
        return None
    return DoesNotFit(m.group(1).strip(), int(m.group(2)), int(m.group(3)))
