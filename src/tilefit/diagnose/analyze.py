"""What one log line says, with no state: its prefix (rank, time), the rules it matches with their
fields, and the kernel details it names (tile, arch, dtype, fusion). The verdict's tracker folds
these into a diagnosis; the parallel reader's workers can compute them too.

Failure-dense logs repeat themselves: an SM120 warmup prints the same autotuner line and the same
backtrace frames thousands of times, differing only in timestamps, tactic ids and addresses. So
the analysis of a line is cached under the line without its timestamp digits, and a frame's
details under the frame without its address: a repeat costs a dictionary lookup, not a dozen
regular expressions.
"""

from __future__ import annotations

import re
from typing import Any

from tilefit.diagnose.events import Rule
from tilefit.diagnose.parser import detail_fields
from tilefit.diagnose.prefixes import peel
from tilefit.diagnose.rules import RuleSet

CACHE_LINES = 1024  # distinct lines remembered; a cache that fills is emptied and refilled
_DIGITS = re.compile(r"\d")

Matches = tuple[tuple[Rule, dict[str, str]], ...]
LineInfo = tuple[str, "str | None", "float | None", Matches, dict[str, Any]]  # body, rank, time, ...
# The same, picklable cheaply: rules by their index in the rule set.
Packed = tuple[int, "str | None", "float | None", tuple[tuple[int, dict[str, str]], ...], dict[str, Any]]


class LineReader:
    """Cached per-line analysis for one rule set."""

    def __init__(self, rules: RuleSet):
        self.rules = rules
        self._lines: dict[str, tuple[Matches, dict[str, Any]] | None] = {}
        self._frames: dict[str, dict[str, Any]] = {}

    def line(self, text: str) -> LineInfo | None:
        """(body, rank, time, matches, details) of a line; None when no rule's needle occurs in it."""
        pos, rank, when = peel(text)
        # The prefix's digits (time, pid, source line) change on every line and match no rule field.
        key = text[pos:] + "\0" + _DIGITS.sub("", text[:pos]) if pos else text
        hit = self._lines.get(key, False)
        if hit is False:
            candidates = self.rules.candidates(text)
            if candidates:
                hit = (tuple(self.rules.match(text, text[pos:], candidates)), detail_fields(text))
            else:
                hit = None
            if len(self._lines) >= CACHE_LINES:
                self._lines.clear()
            self._lines[key] = hit
        if hit is None:
            return None
        return text[pos:], rank, when, hit[0], hit[1]

    def details(self, text: str) -> dict[str, Any]:
        """detail_fields(text), cached under the text without a leading frame number and address."""
        parts = text.split(None, 2)
        key = parts[2] if len(parts) == 3 and parts[1].startswith("0x") else text
        got = self._frames.get(key)
        if got is None:
            got = detail_fields(text)
            if len(self._frames) >= CACHE_LINES:
                self._frames.clear()
            self._frames[key] = got
        return got

    def pack(self, text: str) -> Packed | None:
        """line(text) for another process: the body as an offset, rules as indexes."""
        info = self.line(text)
        if info is None:
            return None
        body, rank, when, matches, details = info
        index = self.rules.index
        return len(text) - len(body), rank, when, tuple((index[id(r)], f) for r, f in matches), details

    def unpack(self, text: str, packed: Packed) -> LineInfo:
        pos, rank, when, matches, details = packed
        rules = self.rules.rules
        return text[pos:], rank, when, tuple((rules[i].rule, f) for i, f in matches), details
