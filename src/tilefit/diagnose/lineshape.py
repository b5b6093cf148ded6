"""How one log line reads, apart from any state: the failure its rule matches make (kind,
severity, deciding rule, fields), whether it is a source line a traceback quotes or a warning-level
line, the numbers and tiles in its fields, and the words a verdict uses for phases and settling.
verdict.Tracker calls these for every matched line, so repeated lines are answered from a cache.
"""

from __future__ import annotations

import re
from typing import Any

from tilefit.diagnose import events as ev
from tilefit.diagnose.events import Event, Rule
from tilefit.diagnose.parser import tile_from_enum, tile_from_text

_SEVERITY = {s: i for i, s in enumerate(ev.SEVERITIES)}

NUMERIC = frozenset({"required", "limit", "count", "code", "bs", "at", "configs"})
SPECIFIC = {k: i for i, k in enumerate(ev.CAUSE_PRIORITY + (ev.LOGGED_ERROR,))}


def specificity(kind: str) -> int:
    """Rank of a failure kind as a cause: lower is more specific (unlisted kinds last)."""
    return SPECIFIC.get(kind, len(SPECIFIC))


SHAPES: dict[int, tuple[Any, tuple[str, str, Rule, dict[str, Any], bool]]] = {}


def shape(matches: Any) -> tuple[str, str, Rule, dict[str, Any], bool]:
    """(kind, severity, deciding rule, fields, skipped) of a line's failure matches. The line
    reader hands out one tuple per distinct line, so a failure-dense log computes this once per
    distinct line (the tuple itself is kept with its result: an id is never reused while cached)."""
    got = SHAPES.get(id(matches))
    if got is not None and got[0] is matches:
        return got[1]
    fields: dict[str, Any] = {}
    for r, f in matches:
        if r.fields:  # a rule's constant fields (an exit code a macro implies, the library that trapped)
            fields.update(r.fields)
        fields.update({k: number(v) if k in NUMERIC else v for k, v in f.items()})
    kinds = [r.kind for r, _ in matches]
    skipped = ev.TACTIC_SKIPPED in kinds
    if skipped:
        kind = ev.TACTIC_SKIPPED
        reasons = [k for k in kinds if k != ev.TACTIC_SKIPPED and k in SPECIFIC]
        if reasons:
            fields["reason"] = min(reasons, key=SPECIFIC.__getitem__)
    else:
        # "RuntimeError: <what>" is an exception line by form; a rule that names <what> wins.
        named = [k for k in kinds if k != ev.EXCEPTION] or kinds
        kind = min(named, key=specificity)
    severity = max((r.severity for r, _ in matches), key=_SEVERITY.__getitem__)
    rule = next(r for r, _ in matches if r.kind == ev.TACTIC_SKIPPED) if skipped else \
        min(matches, key=lambda m: specificity(m[0].kind))[0]
    shape = (kind, severity, rule, fields, skipped)
    if isinstance(matches, tuple):
        if len(SHAPES) >= 1024:
            SHAPES.clear()
        SHAPES[id(matches)] = (matches, shape)
    return shape


ATTACHED = ("arch", "dtype_hint", "gemm")  # what a backtrace frame adds to its failure's fields
# A run of frames as the tracker applies it: its last offset, arch votes, (tile, fused FINALIZE)
# pairs and ATTACHED fields (first values), each in order of first appearance.
Backtrace = tuple[int, tuple[tuple[str, int], ...], tuple[tuple[str, bool], ...], tuple[tuple[str, Any], ...]]
BACKTRACES: dict[int, tuple[Any, Backtrace]] = {}


def backtrace(found: Any) -> Backtrace:
    """The sum of a run of frames' details ((offset, details) where not empty), cached like shape:
    the line reader hands out one tuple per distinct run."""
    got = BACKTRACES.get(id(found))
    if got is not None and got[0] is found:
        return got[1]
    votes: dict[str, int] = {}
    tiles: dict[tuple[str, bool], None] = {}
    fields: dict[str, Any] = {}
    for _, d in found:
        if d.get("arch"):
            votes[d["arch"]] = votes.get(d["arch"], 0) + 1
        if d.get("tile"):
            tiles[(d["tile"], bool(d.get("finalize")))] = None
        for key in ATTACHED:
            if key in d:
                fields.setdefault(key, d[key])
    summary = (max((i for i, _ in found), default=0), tuple(votes.items()), tuple(tiles), tuple(fields.items()))
    if isinstance(found, tuple):
        if len(BACKTRACES) >= 1024:
            BACKTRACES.clear()
        BACKTRACES[id(found)] = (found, summary)
    return summary


# Counted and shown, but a ready log with only these is healthy: "no valid GEMM config" warnings.
NOT_FAILURES = (ev.NO_CONFIG,)
# Hints that are an error's fragment (rules/triton.py: the MLIR pass failure notes), not work going on.
FAILURE_HINTS = ("mlir-failure", "mlir_pass")


# Tuning scripts a line may name (the last named one is the log's tool, unless one was named before).
TOOLS = ("benchmark_moe", "tuning_fused_moe_triton")

# vLLM's process names in its "(Name pid=N)" tags (vLLM 0.11.0: v1/engine/core.py, multiproc_executor.py).
VLLM_PROCS = ("EngineCore", "VllmWorker", "Worker_", "APIServer", "VllmWorkerProcess")


def is_source(body: str, in_traceback: bool) -> bool:
    """A line of source code a traceback quotes ('    raise RuntimeError("NCCL error: ...")'):
    indented by four inside a traceback, or a raise statement anywhere."""
    return (in_traceback and body.startswith("    ")) or body.lstrip().startswith("raise ")


# A line logged at warning level (glog "W1112 00:26:33", Python "WARNING", TensorRT-LLM "[W]"): a
# traceback there is a warning's, not an uncaught exception.
WARNING_LEVEL = re.compile(r"(?:^|[\s\]:])W\d{4} \d\d:\d\d:\d\d|\bWARNING\b|\[W\]")


def remember(e: Event, hints: dict[str, Any], versions: dict[str, str]) -> None:
    """What a marker line tells for later: tool versions, hints (the first of each), device name."""
    if e.kind == ev.HINT and e.fields.get("tool"):
        tool = str(e.fields["tool"]).lower().replace(" ", "-").replace("_", "-")
        tool = "tensorrt-llm" if tool.startswith("tensorrt") else tool
        versions.setdefault(tool, str(e.fields.get("version")))
    elif e.kind == ev.HINT:
        hint = e.fields.get("hint", e.rule)
        hints.setdefault(hint, {k: v for k, v in e.fields.items() if k != "hint"} or True)
        if e.fields.get("mlir_pass"):
            hints["mlir_pass"] = e.fields["mlir_pass"]
    if e.fields.get("vllm_version"):
        versions.setdefault("vllm", str(e.fields["vllm_version"]))
    if e.fields.get("trtllm_version"):
        versions.setdefault("tensorrt-llm", str(e.fields["trtllm_version"]))
    if e.fields.get("device"):
        hints.setdefault("device", e.fields["device"])


def cause_kind(e: Event) -> str:
    """A skipped tactic that hit a sticky CUDA error is that error as a cause."""
    return e.fields.get("reason", e.kind) if e.kind == ev.TACTIC_SKIPPED else e.kind


BENCHMARK_PHASE = "benchmark results"  # rules/triton.py bench-kernel-time


def ready_line(engines: dict[str, int], phase: str | None = None) -> str:
    """Which line would settle an in-progress log: the engine's ready line (`phase`: the last
    progress line's phase, when it has one)."""
    if phase == BENCHMARK_PHASE:
        return ("benchmarking: the tuning script without --tune prints 'Kernel time' once per batch "
                "size and exits, writing no config file; an exit or death line would show it failed")
    if "sglang" in engines:
        line = "'The server is fired up and ready to roll!'"
    elif "vllm" in engines or "trtllm" in engines:
        line = "'Application startup complete.'"
    elif "triton" in engines:
        line = "'Writing best config to ...' (the tuning script's last step)"
    else:
        line = "the server's ready line"
    return f"still starting: {line} would show it ready; an exit or death line would show it failed"


def number(text: str) -> int | str:
    """A numeric field as an int; text when it is no plain integer or too long to be one that
    matters (int() refuses more than 4,300 digits, and no byte count or exit code has 19)."""
    digits = text[1:] if text.startswith("-") else text
    return int(text) if digits.isdecimal() and len(digits) <= 18 else text


def tile_of(fields: dict[str, Any]) -> str | None:
    if fields.get("tile_enum"):
        return tile_from_enum(fields["tile_enum"])
    if fields.get("tile_text"):
        return tile_from_text(fields["tile_text"])
    return None


def phase(e: Event | None) -> str | None:
    if e is None:
        return None
    phase = str(e.fields.get("phase", "starting"))
    extra = [f"{k}={e.fields[k]}" for k in ("bs", "op", "step") if k in e.fields]
    if "done" in e.fields and "total" in e.fields:
        extra.append(f"{e.fields['done']}/{e.fields['total']}")
    return phase + (f" ({', '.join(extra)})" if extra else "") + f", line {e.line}"
