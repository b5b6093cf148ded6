"""The prefixes engines, loggers and collectors put before a log line: ranks, worker tags, levels and
timestamps. `peel(text)` removes them in any order and says where the body starts, which rank and
which timestamp they carried. Each prefix is tried only when the line starts with a character it can
start with, so a line costs one or two anchored matches per prefix layer. `peel_line` caches where
the prefixes lie per line shape: a failure-dense log repeats a few shapes with new digits.
"""

from __future__ import annotations

import calendar
import re
from functools import lru_cache

_ISO = r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?"

# (first characters, pattern). Named groups: ts (ISO time), tts (TensorRT-LLM time), vts (vLLM's
# month-day time), ranks ("DP0 TP2 EP2", "rank3"), proc/vrank (vLLM and Ray process tags).
_PREFIXES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # vLLM / Ray process tags: "(EngineCore_DP0 pid=4123)", "(EngineCore pid=7)", "(Worker_PP0_TP1 pid=77)",
    # "(VllmWorker rank=0 pid=5)", "(BenchmarkWorker pid=9, ip=10.0.0.2)"
    ("(", re.compile(r"\((?P<proc>[A-Za-z][\w.-]{0,60}?)(?: rank=(?P<vrank>\d{1,6}))? pid=\d{1,9}"
                     r"(?:, ip=[\d.]{1,40})?\) ?")),
    # docker compose with timestamps: "2026-05-01 19:59:08.164 | "; Python logging:
    # "2025-10-06 20:05:22,123 - WARNING - autotuner.py:484 - flashinfer.jit: "
    ("0123456789", re.compile(rf"(?P<ts>{_ISO})(?:\s{{0,4}}\|\s{{0,4}}| - [A-Z]{{1,8}} - "
                              r"(?:[^\s:]{1,80}:\d{1,7} - )?(?:[\w.]{1,80}: )?)")),
    # sglang: "[2025-10-06 20:05:22 DP0 TP0 EP0] " (older: no ranks; newer: "[... TP0 EP0]")
    ("[", re.compile(r"\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?P<ranks>(?: [A-Z]{2,4}\d{1,5}){0,6})\] ?")),
    # "[TP3] ", "[DP0 TP2 EP2] ", "[rank3]: ", "[Rank 3] "
    ("[", re.compile(r"\[(?P<ranks>[A-Z]{2,4}\d{1,5}(?: [A-Z]{2,4}\d{1,5}){0,6}|[Rr]ank ?\d{1,6})\]:? ?")),
    # sglang <= 0.1: "[gpu_id=0] "
    ("[", re.compile(r"\[gpu_id=(?P<ranks>\d{1,4})\] ?")),
    # TensorRT-LLM's Python logger: "[10/06/2025-20:05:22] [TRT-LLM] [W] ", or without the time
    ("[", re.compile(r"\[(?P<tts>\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d)\] ?")),
    ("[", re.compile(r"\[TRT-LLM\](?: ?\[[A-Z]\])? ?")),
    # vLLM logger: "INFO 10-06 20:05:22 [file.py:123] " (older: "file.py:123] ")
    ("DIWEC", re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<vts>\d\d-\d\d \d\d:\d\d:\d\d)"
                         r"(?:\.\d{1,6})? (?:\[[^\]]{0,120}\]|\S{1,120}\.py:\d{1,7}\]) ?")),
    # uvicorn's own level: "INFO:     "
    ("IWE", re.compile(r"(?:INFO|WARNING|ERROR):\s{1,5}(?=\S)")),
    # docker compose service: "sglang-1  | ", "vllm-service  | "
    ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
     re.compile(r"[A-Za-z][\w.-]{0,60}\s{1,8}\| ?")),
)
_BY_FIRST: dict[str, tuple[re.Pattern[str], ...]] = {}
for _chars, _rx in _PREFIXES:
    for _c in _chars:
        _BY_FIRST[_c] = _BY_FIRST.get(_c, ()) + (_rx,)


def _one(patterns: tuple[re.Pattern[str], ...]) -> re.Pattern[str]:
    """The prefixes a character may start, as one regex: an alternation tries its branches in
    order, as peel tried the patterns, in one call (a line starting with '[' was five). Group
    names get the branch's number ('ranks_2'); peel reads them without it."""
    if len(patterns) == 1:
        return patterns[0]
    branches = [_GROUP.sub(lambda g, i=i: f"(?P<{g.group(1)}_{i}>", p.pattern) for i, p in enumerate(patterns)]
    return re.compile("|".join(f"(?:{b})" for b in branches))


_GROUP = re.compile(r"\(\?P<(\w+)>")


_FIRST: dict[str, re.Pattern[str]] = {c: _one(p) for c, p in _BY_FIRST.items()}

_RANK_TAG = re.compile(r"\[(?:rank|Rank )(\d{1,6})\]")
_MIDNIGHT: dict[tuple[int, int, int], int] = {}


def _seconds(year: int, month: int, day: int, hh: int, mm: int, ss: int, frac: str = "") -> float | None:
    if not (1 <= month <= 12 and 1 <= day <= 31 and hh < 24 and mm < 60 and ss < 62):
        return None
    key = (year, month, day)
    base = _MIDNIGHT.get(key)
    if base is None:
        try:
            base = calendar.timegm((year, month, day, 0, 0, 0, 0, 0, 0))
        except (ValueError, OverflowError):
            return None
        if len(_MIDNIGHT) > 4096:
            _MIDNIGHT.clear()
        _MIDNIGHT[key] = base
    return base + hh * 3600 + mm * 60 + ss + (float("0." + frac) if frac else 0.0)


def _when(kind: str, ts: str) -> float | None:
    if kind == "ts":  # 2025-10-06 20:05:22[,.]123: the second cached (a log prints many lines a second)
        base = _second(kind, ts[:19])
        return base + float("0." + ts[20:]) if base is not None and len(ts) > 20 else base
    return _second(kind, ts)


@lru_cache(maxsize=4096)
def _second(kind: str, ts: str) -> float | None:
    if kind == "ts":  # 2025-10-06 20:05:22
        return _seconds(int(ts[0:4]), int(ts[5:7]), int(ts[8:10]), int(ts[11:13]), int(ts[14:16]), int(ts[17:19]))
    if kind == "tts":  # 10/06/2025-20:05:22
        return _seconds(int(ts[6:10]), int(ts[0:2]), int(ts[3:5]), int(ts[11:13]), int(ts[14:16]),
                        int(ts[17:19]))
    # vts, 10-06 20:05:22: vLLM prints no year; 2000 keeps differences right
    return _seconds(2000, int(ts[0:2]), int(ts[3:5]), int(ts[6:8]), int(ts[9:11]), int(ts[12:14]))


Span = tuple[int, int]
# Where a line's prefixes end, where its rank is ("ranks" | "proc" | "tag", span, vLLM rank span)
# and where each prefix layer's timestamp is (kind, span).
Layers = tuple[int, "tuple[str, Span, Span | None] | None", tuple[tuple[str, Span], ...]]


def _layers(text: str) -> Layers:
    """Where a line's prefixes, rank and timestamps lie (see Layers)."""
    pos = 0
    rank: tuple[str, Span, Span | None] | None = None
    times: list[tuple[str, Span]] = []
    n = len(text)
    for _ in range(6):
        if pos >= n:
            break
        rx = _FIRST.get(text[pos])
        m = rx.match(text, pos) if rx is not None else None
        if m is None or m.end() == pos:
            break
        g = {k.partition("_")[0]: (v, m.span(k)) for k, v in m.groupdict().items() if v}
        if rank is None:
            if "ranks" in g:
                rank = ("ranks", g["ranks"][1], None) if g["ranks"][0].strip() else None
            elif "proc" in g and g["proc"][0] != "APIServer":
                rank = ("proc", g["proc"][1], g["vrank"][1] if "vrank" in g else None)
        kind = next((k for k in ("ts", "tts", "vts") if k in g), None)
        if kind is not None:
            times.append((kind, g[kind][1]))
        pos = m.end()
    if rank is None and "ank" in text:
        m = _RANK_TAG.search(text)
        if m:
            rank = ("tag", m.span(1), None)
    return pos, rank, tuple(times)


def _read(text: str, layers: Layers) -> tuple[int, str | None, float | None]:
    """peel's answer for a line from where its parts lie (the first valid timestamp wins)."""
    pos, where, times = layers
    rank = None
    if where is not None:
        kind, (a, b), vrank = where
        if kind == "ranks":
            rank = text[a:b].strip()
        elif kind == "proc":
            rank = text[a:b] + (f" rank={text[vrank[0]:vrank[1]]}" if vrank else "")
        else:
            rank = "rank" + text[a:b]
    when = None
    for kind, (a, b) in times:
        when = _when(kind, text[a:b])
        if when is not None:
            break
    return pos, rank, when


def peel(text: str) -> tuple[int, str | None, float | None]:
    """(where the body starts, rank, unix time) of a line. The first timestamp wins (an outer
    collector's clock stays consistent across processes)."""
    return _read(text, _layers(text))


# ASCII digits 1-9 as 0: lines equal after this differ only in their digits' values (times, pids,
# ranks), which no prefix pattern tells apart, so they peel into the same spans.
_ZERO = bytes.maketrans(b"123456789", b"000000000")
_DIGITS = re.compile(r"\d")
_SHAPES: dict[bytes, tuple[Layers, str]] = {}


def peel_line(text: str) -> tuple[int, str | None, float | None, str]:
    """peel(text) and its prefix without digits, the spans cached per line shape (see _ZERO)."""
    key = text.encode("utf-8", "surrogatepass").translate(_ZERO)
    got = _SHAPES.get(key)
    if got is None:
        layers = _layers(text)
        got = (layers, _DIGITS.sub("", text[:layers[0]]))
        if len(_SHAPES) >= 4096:
            _SHAPES.clear()
        _SHAPES[key] = got
    return (*_read(text, got[0]), got[1])


def strip_prefix(text: str) -> tuple[str, str | None, float | None]:
    """(body, rank, unix time) of a line: known prefixes peeled off in any order."""
    pos, rank, when = peel(text)
    return text[pos:], rank, when
