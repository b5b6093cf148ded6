"""A `Diagnosis` as data (JSON) or as text for people: the verdict first, then the failures
table, the decisive line, and the explanations. Plain aligned text, so golden files stay stable."""

from __future__ import annotations

from typing import Any

from tilefit.diagnose.events import Event
from tilefit.diagnose.verdict import Diagnosis, FailureClass
from tilefit.text import table

TEXT_CHARS = 200


def as_dict(d: Diagnosis, source: str | None = None) -> dict[str, Any]:
    return {
        "source": source,
        "verdict": d.verdict,
        "engine": d.engine,
        "components": d.components,
        "arch": d.arch,
        "arch_source": d.arch_source,
        "gpu": d.gpu,
        "cause": d.cause,
        "confirmed": d.confirmed,
        "failures": [_failure(f) for f in d.failures],
        "decisive_line": d.decisive.line if d.decisive else None,
        "decisive": _event(d.decisive),
        "ended_line": d.ended.line if d.ended else None,
        "ended": _event(d.ended),
        "settle": d.settle,
        "ready_line": d.ready.line if d.ready else None,
        "ready": _event(d.ready),
        "phase": d.phase,
        "seconds_to_ready": d.seconds_to_ready,
        "lines": d.lines,
        "bytes": d.bytes,
        "hints": {k: v for k, v in d.hints.items() if isinstance(v, (str, int, float, bool, dict))},
        "explanations": [e.as_dict() for e in d.explanations],
    }


def _failure(f: FailureClass) -> dict[str, Any]:
    return {
        "kind": f.kind, "count": f.count, "first_line": f.first_line, "last_line": f.last_line,
        "tiles": list(f.tiles), "tactics": list(f.tactics), "ranks": list(f.ranks),
        "severity": f.severity, "survived": f.survived, "message": f.message,
        "fields": {k: v for k, v in f.fields.items() if k not in ("error",)},
    }


def _event(e: Event | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {"line": e.line, "kind": e.kind, "rank": e.rank, "text": e.text[:TEXT_CHARS]}


def human(d: Diagnosis, source: str | None = None) -> str:
    head = f"verdict: {d.verdict}"
    if d.cause:
        head += f" (cause: {d.cause}{'' if d.confirmed else ', the log stops at it'})"
    facts = [f"engine: {d.engine or 'unknown'}"]
    if d.components:
        facts.append(f"also: {', '.join(d.components)}")
    facts.append(f"arch: {d.arch or 'unknown'}" + (f" ({d.arch_source})" if d.arch and d.arch_source else ""))
    if d.gpu:
        facts.append(f"gpu: {d.gpu}")
    versions = d.hints.get("versions")
    if isinstance(versions, dict) and versions:
        facts.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    facts.append(f"{d.lines:,} lines")
    lines = [head, "  ".join(facts)]
    if source:
        lines.append(f"log: {source}")
    lines.append("")
    if d.failures:
        rows = [[f.kind, f.count, f.first_line, f.last_line, _survived(f),
                 _list(f.tiles) or _list(f.tactics, "tactic ")] for f in d.failures]
        lines.append(table(["failure", "count", "first", "last", "outcome", "tiles / tactics"], rows,
                           align="lrrrll"))
    else:
        lines.append("no failures")
    lines.append("")
    if d.decisive is not None:
        label = {"fatal": "decisive line", "in-progress": "last progress"}.get(d.verdict, "ready line")
        lines.append(f"{label} {d.decisive.line}: {_clip(d.decisive.text)}")
    if d.ended is not None and d.ended is not d.decisive:
        lines.append(f"process end line {d.ended.line}: {_clip(d.ended.text)}")
    if d.settle:
        lines.append(f"to settle it: {d.settle}")
    if d.ready is not None and d.decisive is not d.ready:
        lines.append(f"ready line {d.ready.line}: {_clip(d.ready.text)}")
    if d.phase and d.verdict != "healthy":
        lines.append(f"last phase: {d.phase}")
    if d.seconds_to_ready is not None:
        lines.append(f"first failure to ready: {d.seconds_to_ready:g} s")
    if d.explanations:
        lines.append("")
        lines.append("explanations:")
        for e in d.explanations:
            lines.append(f"  - {e.about}: {e.finding}")
            if e.remedy:
                lines.append(f"    remedy: {e.remedy}")
    return "\n".join(lines) + "\n"


def _survived(f: FailureClass) -> str:
    if f.survived >= f.count:
        return "caught/survived"
    if f.survived:
        return f"{f.survived} survived"
    return f.severity


def _list(items: list[str], prefix: str = "", n: int = 4) -> str:
    if not items:
        return ""
    more = f" +{len(items) - n}" if len(items) > n else ""
    return prefix + ", ".join(items[:n]) + more


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS - 3] + "..."
