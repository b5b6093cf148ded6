"""The layouts compare weighs: 'tp8,ep8,tp2ep4' as (tp, ep) pairs that each use the same GPUs."""

from __future__ import annotations

import re

from tilefit.errors import UsageError
from tilefit.numeric import MAX_COUNT, bounded_int

_LAYOUT_RE = re.compile(r"(?:(?:tp|ep)\d+)+")
_PART_RE = re.compile(r"(tp|ep)(\d+)")


def parse_layout(item: str) -> tuple[int, int]:
    """'tp2ep4' -> (2, 4); 'tp8' -> (8, 1); a UsageError for anything else."""
    item = item.strip().lower()
    parts = dict(_PART_RE.findall(item))
    if not _LAYOUT_RE.fullmatch(item) or len(parts) != len(_PART_RE.findall(item)):
        raise UsageError(f"bad layout {item!r}: write tpN, epN or tpNepM (e.g. tp8,ep8,tp2ep4)")
    tp, ep = (bounded_int(parts.get(k, "1"), f"layout {k}", maximum=MAX_COUNT) for k in ("tp", "ep"))
    if tp < 1 or ep < 1:
        raise UsageError(f"bad layout {item!r}: tp and ep are at least 1")
    return tp, ep


def parse_layouts(text: str | None, gpus: int) -> list[tuple[int, int]]:
    """'tp8,ep8,tp2ep4' -> [(8, 1), (1, 8), (2, 4)], each using exactly `gpus` GPUs."""
    if text is not None and not text.strip():
        raise UsageError("--layouts is empty: write tpN, epN or tpNepM (e.g. tp8,ep8,tp2ep4)")
    if not text:
        return [(gpus, 1), (1, gpus)] if gpus > 1 else [(1, 1)]
    out = []
    for item in (t.strip().lower() for t in text.split(",") if t.strip()):
        tp, ep = parse_layout(item)
        if tp * ep != gpus:
            raise UsageError(f"layout {item} uses {tp * ep} GPUs, not --gpus {gpus}")
        if (tp, ep) not in out:
            out.append((tp, ep))
    if not out:
        raise UsageError("--layouts is empty: write tpN, epN or tpNepM (e.g. tp8,ep8,tp2ep4)")
    return out
