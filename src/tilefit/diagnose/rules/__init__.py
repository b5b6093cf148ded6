"""All diagnosis rules, one module per engine, compiled once into a `RuleSet`.

The rule set has two halves: a byte-level gate (one regex built from every rule's needle, searched
over whole chunks of the log so that ordinary lines cost no Python work), and the per-line matcher
that runs only on lines the gate let through.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from itertools import combinations
from functools import lru_cache

from tilefit.diagnose.events import DETAIL_LINES, TIERS, CompiledRule, Rule
from tilefit.diagnose.rules import cutlass, deepep, flashinfer, generic, sglang, trtllm, triton, vllm

ENGINE_MODULES = (sglang, vllm, trtllm, flashinfer, triton, cutlass, deepep, generic)

# Which engine names a log when several matched: a server over a tuner over a library.
ENGINE_RANK = ("sglang", "vllm", "trtllm", "triton", "flashinfer", "cutlass", "deepep", "generic")


def all_rules() -> tuple[Rule, ...]:
    return tuple(r for m in ENGINE_MODULES for r in m.RULES)


def _reduce(needles: list[bytes]) -> list[bytes]:
    """A needle that contains another needle adds nothing to a gate."""
    return [n for n in needles if not any(o != n and o in n for o in needles)]


def _trie_pattern(needles: list[bytes]) -> bytes:
    """An alternation grouped by first byte, so the regex engine tests one branch per candidate
    position instead of every needle (measured about 10% faster than a flat alternation)."""
    groups: dict[bytes, list[bytes]] = defaultdict(list)
    for n in sorted(set(needles), key=lambda b: (-len(b), b)):
        groups[n[:1]].append(n[1:])
    parts = []
    for first, rests in sorted(groups.items()):
        alts = b"|".join(re.escape(r) for r in rests)
        parts.append(re.escape(first) + (b"(?:" + alts + b")" if len(rests) > 1 else alts))
    return b"|".join(parts)


# Printable ASCII from the commonest byte to the rarest in the 299 real logs of tests/fixtures/real
# (2026-12-01; space 12%, 'e' 7%, ... 'P' 0.4%, 'K' 0.06%, 'Z' 0.01%). A byte's weight halves
# every 6 places, about as its frequency falls.
_COMMON = b' etrnasoilcpdu0hg1:m"/-2_f.=,k3yb4vw586(]79)[PxT^RIFEAOC\'MNLSDG#qWU|;B`V<>j*zKH%+XQ!J~?\\&@Y{}Z$'
_WEIGHT = {b: 2 ** (-i / 6) for i, b in enumerate(_COMMON)}


def _weight(byte: int) -> float:
    return _WEIGHT.get(byte, 2 ** (-len(_COMMON) / 6))


def _anchors(needles: list[bytes]) -> set[int]:
    """Few rare bytes such that every needle holds one: a greedy weighted set cover, then pruned.
    (Needles as bits of an int per byte: this runs before a reader forks, on every diagnose.)"""
    unique = sorted(set(needles))
    holds: dict[int, int] = {}  # byte -> the needles holding it
    for i, n in enumerate(unique):
        for b in set(n):
            holds[b] = holds.get(b, 0) | 1 << i
    everyone = left = (1 << len(unique)) - 1
    chosen: set[int] = set()
    while left:
        best = min((b for b, m in holds.items() if m & left),
                   key=lambda b: (_weight(b) / (holds[b] & left).bit_count(), b))
        chosen.add(best)
        left &= ~holds[best]
    for b in sorted(chosen, key=_weight, reverse=True):
        covered = 0
        for c in chosen - {b}:
            covered |= holds[c]
        if covered == everyone:
            chosen.discard(b)
    return chosen


def _gate_pattern(needles: list[bytes]) -> bytes:
    """The gate: like _trie_pattern, but each needle starts at its rarest anchor byte (_anchors)
    and a lookbehind checks the bytes before it ("ipping tactic(?<=Skipping tactic)"). Python's
    regex engine skips to a byte of the branches' first-byte set and then tries the branches: a
    gate whose first bytes are common ('t', 'x', '(' , 'D') tries them at one byte in seven of a
    failure-dense log. Needles hold no LF, so a match lies inside the line that holds its needle,
    and the first match is in the first line holding one. Branches go commonest first (the engine
    tries them in order). Measured: 120 -> 170 MB/s on the dense log's bytes, 150 -> 215 sparse."""
    anchors = _anchors(needles)
    groups: dict[int, list[bytes]] = defaultdict(list)
    for n in sorted(set(needles), key=lambda b: (-len(b), b)):
        i = min((j for j in range(len(n)) if n[j] in anchors), key=lambda j: (_weight(n[j]), j))
        groups[n[i]].append(re.escape(n[i + 1:]) + (b"(?<=" + re.escape(n) + b")" if i else b""))
    parts = []
    for first, rests in sorted(groups.items(), key=lambda g: (-_weight(g[0]), g[0])):
        alts = b"|".join(rests)
        parts.append(re.escape(bytes([first])) + (b"(?:" + alts + b")" if len(rests) > 1 else alts))
    return b"|".join(parts)


class RuleSet:
    """Compiled rules plus the chunk gate."""

    def __init__(self, rules: tuple[Rule, ...]):
        dupes = {n for (_, n), count in Counter((r.engine, r.name) for r in rules).items() if count > 1}
        if dupes:
            raise ValueError(f"duplicate rule names within an engine: {sorted(dupes)}")
        too_wide = [r.name for r in rules if r.window > DETAIL_LINES]
        if too_wide:  # the parallel reader sends at most DETAIL_LINES frames after a gated line
            raise ValueError(f"rule windows wider than {DETAIL_LINES} lines: {too_wide}")
        self.rules = tuple(CompiledRule(r, re.compile(r.pattern) if r.pattern else None) for r in rules)
        self.index = {id(cr.rule): i for i, cr in enumerate(self.rules)}  # rule -> its position
        needles = _reduce([r.needle.encode() for r in rules if r.gate])
        self.gate = re.compile(_gate_pattern(needles))
        self.needles = tuple(sorted(set(needles)))
        # The gate without the needles of weak tiers a reader no longer needs, per set of tiers
        # still needed (see Rule.tier): a serving log costs no Python work per served request.
        self.gates: dict[tuple[str, ...], re.Pattern[bytes]] = {}
        for k in range(len(TIERS) + 1):
            for keep in combinations(TIERS, k):
                kept = _reduce([r.needle.encode() for r in rules if r.gate and (not r.tier or r.tier in keep)])
                self.gates[keep] = re.compile(_gate_pattern(kept)) if kept else re.compile(b"(?!)")
        # Per line: which gate needles occur, then only the rules holding them. (findall does not
        # report a needle that starts inside another's match; no two gate needles overlap so.)
        texts = [n.decode() for n in self.needles]
        self._find = re.compile(_trie_pattern(self.needles).decode())
        self._by_needle: dict[str, tuple[int, ...]] = {
            t: tuple(i for i, cr in enumerate(self.rules) if cr.rule.gate and t in cr.rule.needle) for t in texts}

    def weak_tiers(self, text: str) -> tuple[str, ...]:
        """() when a line holds a needle of an ordinary rule; else the weak tiers whose needles it holds."""
        tiers = {self.rules[i].rule.tier for i in self.candidates(text)}
        return () if "" in tiers or not tiers else tuple(sorted(tiers))

    def needle_in(self, text: str) -> bool:
        """Whether any gate needle occurs in `text` (the byte gate's verdict on a decoded line)."""
        return self._find.search(text) is not None

    def candidates(self, text: str) -> list[int]:
        """Indexes of the rules whose needles occur in `text` (a superset of the matching rules)."""
        found = set(self._find.findall(text))
        if not found:
            return []
        if len(found) == 1:
            return list(self._by_needle[found.pop()])
        return sorted({i for n in found for i in self._by_needle[n]})

    def match(self, text: str, body: str | None = None, candidates: list[int] | None = None
              ) -> list[tuple[Rule, dict[str, str]]]:
        """Every rule that matches `text` (`body`: the text without its prefix), with its fields."""
        out = []
        body = text if body is None else body
        if candidates is None:
            candidates = self.candidates(text)
        for i in candidates:
            cr = self.rules[i]
            fields = cr.match(text, body)
            if fields is not None:
                out.append((cr.rule, fields))
        return out


@lru_cache(maxsize=1)
def default_rules() -> RuleSet:
    return RuleSet(all_rules())
