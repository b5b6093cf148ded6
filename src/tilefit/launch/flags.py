"""Reading an engine's arguments against a table of the flags that matter, the way its parser
would: `--flag value` and `--flag=value`, store-true switches, argparse's unique-prefix
abbreviations (sglang, vLLM; not TensorRT-LLM's click), and vLLM's underscore spellings.

Flags not in the table are checked against every flag the engine's parser accepts (read from the
wheels into data/flags.toml): known ones are `ignored`, the rest `unknown`; none is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from tilefit._toml import load_package_toml
from tilefit.errors import UsageError

KINDS = ("int", "float", "str", "bool", "ints", "negbool")


@dataclass(frozen=True, slots=True)
class Flag:
    """A flag that changes tilefit's answer: its spellings, the value's kind, tilefit's name."""

    names: tuple[str, ...]
    name: str  # key in the parsed values, e.g. "tp"
    kind: str = "int"  # int | float | str | bool (store_true) | ints (one or more) | negbool
    note: str = ""  # e.g. "removed in sglang 0.5.3": said when the flag is used

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown flag kind {self.kind!r}")


@dataclass(slots=True)
class Parsed:
    values: dict[str, object] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seen: dict[str, str] = field(default_factory=dict)  # tilefit name -> the spelling used


@lru_cache(maxsize=None)
def table(engine: str) -> tuple[Flag, ...]:
    """The flags that matter for `engine` (data/tables.toml)."""
    rows = load_package_toml("tilefit.launch", "tables.toml")[engine]
    return tuple(Flag(tuple(r["names"]), r.get("value", key), r.get("kind", "int"), r.get("note", ""))
                 for key, r in rows.items())


@lru_cache(maxsize=None)
def known_flags(engine: str) -> frozenset[str]:
    """Every flag the engine's parser accepts in some version read."""
    return frozenset(load_package_toml("tilefit.launch", "flags.toml").get(engine, {}))


@lru_cache(maxsize=None)
def flag_releases(engine: str) -> dict[str, tuple[str, str]]:
    """flag -> (first, last) release read that has it (data/flags.toml)."""
    rows = load_package_toml("tilefit.launch", "flags.toml").get(engine, {})
    return {flag: (str(span[0]), str(span[1])) for flag, span in rows.items()}


def _release_key(version: str) -> tuple[tuple[int, ...], int]:
    """'0.4.1.post4' -> ((0, 4, 1), 4): releases in order, post builds after their release."""
    release, _, post = version.partition(".post")
    parts = tuple(int(x) for x in re.findall(r"\d+", release)[:4])
    return parts + (0,) * (4 - len(parts)), int(post or 0)


@lru_cache(maxsize=None)
def versions_read(engine: str) -> str:
    """Which releases of `engine` the flag table was read from, e.g. 'sglang wheels 0.4.0-0.5.23
    (92 versions)': a flag outside them may be another release's, not a typo."""
    return str(load_package_toml("tilefit.launch", "flags.toml").get("sources", {}).get(engine, engine))


def _is_flag(word: str) -> bool:
    if not word.startswith("-") or word == "-":
        return False
    try:
        float(word)
        return False  # a negative number is a value
    except ValueError:
        return True


def _convert(flag: Flag, spelled: str, raw: str) -> object:
    try:
        if flag.kind == "int":
            return int(raw)
        if flag.kind == "float":
            return float(raw)
    except ValueError:
        hint = " (a shell variable tilefit cannot resolve: give its value)" if "$" in raw else ""
        raise UsageError(f"{spelled} {raw!r}: expected {'an integer' if flag.kind == 'int' else 'a number'}"
                         f"{hint}") from None
    return raw


def parse_args(args: list[str] | tuple[str, ...], table: tuple[Flag, ...], engine: str, *,
               abbrev: bool = True, underscores: bool = False) -> Parsed:
    """Parse `args` with `table`; other flags are sorted into ignored/unknown."""
    by_name = {n: f for f in table for n in f.names}
    known = known_flags(engine)
    out = Parsed()
    words = list(args)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not _is_flag(word):
            out.positionals.append(word)
            continue
        spelled, eq, inline = word.partition("=")
        name = spelled.replace("_", "-") if underscores and spelled.startswith("--") else spelled
        flag = by_name.get(name) or by_name.get(spelled)
        if flag is None and name not in known and abbrev and name.startswith("--"):
            name = _abbreviation(name, set(by_name) | known, out, engine)
            flag = by_name.get(name)
        if flag is None:
            # Value-taking or not is unknown for flags outside the table: a following word that
            # is not a flag is taken as this flag's value (engines put positionals first).
            if not eq and i < len(words) and not _is_flag(words[i]):
                i += 1
            base = name.split(".", 1)[0]  # vLLM's --attention-config.key=value
            (out.ignored if name in known or base in known else out.unknown).append(spelled)
            continue
        out.seen[flag.name] = spelled
        if flag.note:
            out.notes.append(f"{spelled}: {flag.note}")
        if flag.kind == "bool":
            out.values[flag.name] = inline.lower() not in ("false", "0") if eq else True
            continue
        if flag.kind == "negbool":
            out.values[flag.name] = False
            continue
        if flag.kind == "ints":
            values = [inline] if eq else []
            while not eq and i < len(words) and not _is_flag(words[i]):
                values.append(words[i])
                i += 1
            try:
                out.values[flag.name] = tuple(int(v) for part in values for v in part.replace(",", " ").split())
            except ValueError:
                raise UsageError(f"{spelled} {' '.join(values)!r}: expected integers") from None
            if not out.values[flag.name]:
                raise UsageError(f"{spelled} needs at least one value")
            continue
        if eq:
            raw = inline
        elif i < len(words):
            raw = words[i]
            i += 1
        else:
            raise UsageError(f"{spelled} needs a value")
        out.values[flag.name] = _convert(flag, spelled, raw)
    return out


def _abbreviation(name: str, candidates: set[str], out: Parsed, engine: str) -> str:
    """argparse's allow_abbrev: a unique prefix of one flag stands for it. A prefix that several
    flags share across releases stands for the one flag it is unique to in the newest release
    where it is unique (data/flags.toml's [first, last] releases; a flag missing there counts in
    every release), as that release's parser reads it."""
    matches = sorted(c for c in candidates if c.startswith(name))
    if len(matches) == 1:
        out.notes.append(f"{name} is read as {matches[0]} (the parser accepts a unique prefix)")
        return matches[0]
    if len(matches) > 1:
        releases = flag_releases(engine)
        spans = {m: releases.get(m, ("0", "99999")) for m in matches}
        # Where the set of matching flags changes: each one's first and last release.
        points = sorted({r for span in spans.values() for r in span}, key=_release_key, reverse=True)
        for at in points:
            alive = [m for m, (lo, hi) in spans.items()
                     if _release_key(lo) <= _release_key(at) <= _release_key(hi)]
            if len(alive) == 1:
                out.notes.append(f"{name} is read as {alive[0]}: the prefix is unique to it in {engine} "
                                 f"{at}, the newest release read where it is unique; other releases "
                                 f"read it otherwise or refuse it")
                return alive[0]
        out.notes.append(f"{name} is ambiguous: {', '.join(matches[:4])}")
    return name
