"""The tuning journal: one JSON line per measurement, flushed and fsynced as it is made.

A line holds target, shape, batch (null for a compile result, which holds for every batch),
config (its JSON keys; the target's config type everywhere but on disk), result, the time it was
written ("t", Unix seconds), and the context it was measured in: the GPU and the software versions.
`Journal(path, resume=True)` reads earlier lines back (a torn last line from a SIGKILL is dropped)
so a resumed run skips what is already measured, but only lines measured on the same GPU with the
same Triton/torch (and engine) versions: after an upgrade the old lines are kept on disk and
measured again (`Journal.stale` counts them). The same file doubles as a recorded landscape for
the replay target. Lines of format 1 (no "v", or "v": 1) were written when the tuner's only fp8
was 128x128 block-scaled and called it "fp8": their shape keys are read as "fp8-block".
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilefit.errors import UsageError
from tilefit.tune.results import Result, from_json, to_json

FORMAT = 2
# Versions that do not change a timing: tilefit's own is left out of the resume key, so that
# resuming with a fixed CLI is not a re-measure (the kernel's code is keyed by Triton's cache).
_UNKEYED_VERSIONS = ("tilefit",)

ConfigFromDict = Callable[[dict[str, Any]], Any]


def context_key(context: Mapping[str, Any]) -> tuple[Any, ...]:
    """What must match for a journal line to answer a lookup: the GPU and the versions."""
    versions = context.get("versions") or {}
    return (context.get("gpu"),
            tuple(sorted((k, str(v)) for k, v in versions.items() if k not in _UNKEYED_VERSIONS)))


def describe_context(context: Mapping[str, Any]) -> str:
    """'NVIDIA H200, triton 3.6.0, torch 2.11.0' for messages."""
    gpu, versions = context_key(context)
    return ", ".join([str(gpu or "unknown GPU")] + [f"{k} {v}" for k, v in versions])


@dataclass(frozen=True, slots=True)
class Entry:
    target: str
    shape: str  # TuneShape.key()
    batch: int | None  # None: a compile result
    config: Any
    result: Result
    t: float | None = None  # when the line was written (epoch seconds; absent in early journals)
    context: Mapping[str, Any] = field(default_factory=dict)  # gpu, versions

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.target, self.shape, self.batch, self.config)


def _entry(raw: bytes, from_dict: ConfigFromDict) -> Entry:
    """One journal line -> Entry; one of _NOT_AN_ENTRY when it is not one."""
    d = json.loads(raw)
    return Entry(d["target"], _shape_key(d["shape"], d.get("v", 1)), d["batch"], from_dict(d["config"]),
                 from_json(d["result"]), d.get("t"),
                 {"gpu": d.get("gpu"), "versions": d.get("versions") or {}})


def _shape_key(key: str, version: int) -> str:
    """A line's shape key in today's dtype names ('...,k=8,fp8' of format 1 -> '...,k=8,fp8-block')."""
    if int(version) < 2 and key.endswith(",fp8"):
        return key + "-block"
    return key


_NOT_AN_ENTRY = (ValueError, KeyError, TypeError, AttributeError, UsageError)


def read_entries(path: str | os.PathLike[str], from_dict: ConfigFromDict) -> Iterator[Entry]:
    """Every complete line of a journal, configs read back with `from_dict` (the target's
    `config_space.from_dict`); a torn last line is skipped, a bad middle line is an error.
    A last line that parses whole is complete even without its newline (a write cut one byte
    short, an editor or a copy that dropped it)."""
    p = Path(path)
    try:
        lines = p.read_bytes().split(b"\n")
    except OSError as e:
        raise UsageError(f"cannot read journal {p}: {e.strerror or e}") from None
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            yield _entry(raw, from_dict)
        except _NOT_AN_ENTRY as e:
            if n == len(lines):
                return  # no newline after it: the line a kill cut short
            raise UsageError(f"journal {p} line {n} is not a tilefit journal entry ({e}); "
                             f"move it aside or start without --resume") from None


class Journal:
    """Append-only, thread-safe; `lookup` answers from lines already written (this run or earlier)."""

    def __init__(self, path: str | os.PathLike[str], *, resume: bool, context: Mapping[str, Any],
                 from_dict: ConfigFromDict, sync: bool = True):
        self.path = Path(path)
        self.sync = sync  # fsync every line (off only for bulk recordings that can be redone)
        self.context = dict(context)  # versions and GPU, written on every line
        self._known: dict[tuple[Any, ...], Result] = {}
        self._lock = threading.Lock()
        self.resumed = 0
        self.stale = 0  # lines measured on another GPU or with other versions: measured again
        self.stale_contexts: list[str] = []
        self._from_dict = from_dict
        try:  # a folder without search permission or a name too long: one line, not a traceback
            info = self.path.stat()
            size: int | None = info.st_size
        except (FileNotFoundError, NotADirectoryError):
            size = None
        except OSError as e:
            raise UsageError(f"cannot read journal {self.path}: {e.strerror or e}") from None
        if size is not None and not stat.S_ISREG(info.st_mode):  # a FIFO would block the read
            raise UsageError(f"journal {self.path} is not a regular file; choose another --out folder")
        try:
            if resume and size is not None:
                mine = context_key(self.context)
                for e in read_entries(self.path, from_dict):
                    if context_key(e.context) == mine:
                        self._known[e.key] = e.result
                        continue
                    self.stale += 1
                    text = describe_context(e.context)
                    if text not in self.stale_contexts:
                        self.stale_contexts.append(text)
                self.resumed = len(self._known)
                self._mend_tail()
            elif size:
                raise UsageError(f"journal {self.path} exists; pass --resume to continue it, or "
                                 f"choose another --out folder")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab")
        except OSError as e:
            raise UsageError(f"cannot write journal {self.path}: {e.strerror or e}") from None

    def _mend_tail(self) -> None:
        """Make the next append start on a fresh line: a last line without its newline is kept
        (newline added) when it is a whole entry, which read_entries counted as resumed, and cut
        when it is torn, which read_entries skipped."""
        with open(self.path, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            f.seek(0)  # only then is the journal read a second time
            data = f.read()
            start = data.rfind(b"\n") + 1
            try:
                _entry(data[start:], self._from_dict)
            except _NOT_AN_ENTRY:
                f.truncate(start)
                return
            f.seek(size)
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())

    def lookup(self, target: str, shape: str, batch: int | None, config: Any) -> Result | None:
        with self._lock:
            return self._known.get((target, shape, batch, config))

    def record(self, target: str, shape: str, batch: int | None, config: Any,
               result: Result) -> None:
        line = {"v": FORMAT, "target": target, "shape": shape, "batch": batch,
                "config": config.as_dict(), "result": to_json(result),
                "t": round(time.time(), 3), **self.context}
        data = (json.dumps(line, sort_keys=False) + "\n").encode()
        with self._lock:
            self._file.write(data)
            self._file.flush()
            if self.sync:
                os.fsync(self._file.fileno())
            self._known[(target, shape, batch, config)] = result

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def active_seconds(path: str | os.PathLike[str], max_gap_s: float = 120.0) -> float:
    """Seconds the journal's writer was working: the sum of gaps between consecutive lines, gaps
    longer than `max_gap_s` (a kill and a later --resume) left out. Lines before "t" existed
    count nothing."""
    stamps = []
    for raw in Path(path).read_bytes().split(b"\n"):
        try:
            stamps.append(float(json.loads(raw)["t"]))
        except (ValueError, KeyError, TypeError):
            continue
    return sum(b - a for a, b in zip(stamps, stamps[1:]) if 0 <= b - a <= max_gap_s)
