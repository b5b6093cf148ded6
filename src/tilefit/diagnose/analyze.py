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
from tilefit.diagnose.prefixes import peel_line
from tilefit.diagnose.rules import RuleSet

CACHE_LINES = 1024  # distinct lines remembered; a cache that fills is emptied and refilled
CACHE_RUNS = 256    # distinct backtraces (runs of frames) remembered, likewise
# A hex address ("0x7f3c2a6f1e9d", "[0x55d0c1a2]", "(+0x9c0e21)") up to a word's end. Blanking its
# digits (keeping "0x") changes no detail_fields result: no pattern there reads a character after
# an "x", and the word-end keeps "0xe2m1"-like words whole (tests/test_diagnose_parser.py checks
# it on random frames). No leading \b: the literal "0x" lets the regex engine skip ahead (5x faster).
_ADDRESS = re.compile(rb"0x[0-9a-fA-F]+\b")

Matches = tuple[tuple[Rule, dict[str, str]], ...]
LineInfo = tuple[str, "str | None", "float | None", Matches, dict[str, Any]]  # body, rank, time, ...
# The same, picklable cheaply: rules by their index in the rule set.
Found = tuple[tuple[int, dict[str, Any]], ...]  # (offset in a run of frames, its details)
PackedMatches = tuple[tuple[int, dict[str, str]], ...]
Packed = tuple[int, "str | None", "float | None", PackedMatches, dict[str, Any]]


class LineReader:
    """Cached per-line analysis for one rule set."""

    def __init__(self, rules: RuleSet):
        self.rules = rules
        # key -> (matches, details, the matches packed, weak tiers) or None (no needle)
        self._lines: dict[str, tuple[Matches, dict[str, Any], PackedMatches, tuple[str, ...]] | None] = {}
        self._frames: dict[str, dict[str, Any]] = {}
        self._runs: dict[bytes, Found] = {}
        self._unpacked: dict[int, tuple[PackedMatches, Matches]] = {}

    def _entry(self, text: str) -> tuple[int, str | None, float | None, Any]:
        """(body offset, rank, time, cached analysis or None) of a line."""
        pos, rank, when, bare = peel_line(text)
        # The prefix's digits (time, pid, source line) change on every line and match no rule field.
        key = text[pos:] + "\0" + bare if pos else text
        hit = self._lines.get(key, False)
        if hit is False:
            candidates = self.rules.candidates(text)
            if candidates:
                matches = tuple(self.rules.match(text, text[pos:], candidates))
                index, rules = self.rules.index, self.rules.rules
                tiers = {rules[i].rule.tier for i in candidates}
                hit = (matches, detail_fields(text), tuple((index[id(r)], f) for r, f in matches),
                       () if "" in tiers else tuple(sorted(tiers)))
            else:
                hit = None
            if len(self._lines) >= CACHE_LINES:
                self._lines.clear()
                self._unpacked.clear()
            self._lines[key] = hit
        return pos, rank, when, hit

    def line(self, text: str) -> LineInfo | None:
        """(body, rank, time, matches, details) of a line; None when no rule's needle occurs in it."""
        pos, rank, when, hit = self._entry(text)
        if hit is None:
            return None
        return text[pos:], rank, when, hit[0], hit[1]

    def tiers(self, text: str) -> tuple[str, ...]:
        """RuleSet.weak_tiers(text), cached with the line's analysis."""
        return self.gated(text)[1]

    def gated(self, text: str) -> tuple[Packed | None, tuple[str, ...]]:
        """(pack(text), tiers(text)) at the cost of one."""
        pos, rank, when, hit = self._entry(text)
        if hit is None:
            return None, ()
        packed = hit[2]
        self._unpacked[id(packed)] = (packed, hit[0])
        return (pos, rank, when, packed, hit[1]), hit[3]

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

    def run(self, raw: bytes) -> Found:
        """The details of a run of backtrace frames (`raw`: its LF-terminated lines) as (offset,
        details) where not empty, cached under the run with its addresses blanked."""
        key = _ADDRESS.sub(b"0x", raw)
        got = self._runs.get(key)
        if got is None:
            texts = raw.decode("utf-8", "replace").split("\n")
            texts.pop()  # after the last LF
            got = tuple((i, d) for i, d in enumerate(map(self.details, texts)) if d)
            if len(self._runs) >= CACHE_RUNS:
                self._runs.clear()
            self._runs[key] = got
        return got

    def pack(self, text: str) -> Packed | None:
        """line(text) for another process: the body as an offset, rules as indexes."""
        return self.gated(text)[0]

    def unpack(self, text: str, packed: Packed) -> LineInfo:
        pos, rank, when, matches, details = packed
        # In the process that packed it: the cached tuple itself (lineshape.shape caches by it).
        got = self._unpacked.get(id(matches))
        if got is not None and got[0] is matches:
            return text[pos:], rank, when, got[1], details
        rules = self.rules.rules
        return text[pos:], rank, when, tuple((rules[i].rule, f) for i, f in matches), details
