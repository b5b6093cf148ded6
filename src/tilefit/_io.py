"""File edges. Writes are atomic: a temp file in the target folder, flushed and fsynced, then
os.replace, so a reader (or a run killed mid-write) sees the old file or the new one, never a torn
one. Reads of small input files (model configs) are bounded: a regular file under a size limit,
read through one descriptor, and JSON integers bounded in digits before they are converted."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from tilefit.errors import UsageError


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as e:
        raise UsageError(f"cannot write {p}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; these are ordinary shared files
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, indent: int | None = 2,
                      sort_keys: bool = False) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n")


# JSON integers longer than this are refused before int() sees them: Python refuses over 4,300
# digits with a bare ValueError, and no value in a config or a tuning file needs more than 20.
MAX_JSON_INT_DIGITS = 100


def read_small_file(path: str | os.PathLike[str], *, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; UsageError (naming `what`, e.g.
    'a model config.json') for anything else. Opened non-blocking and checked through the same
    descriptor, so a FIFO cannot hang the open and /dev/zero is never read."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise UsageError(f"cannot read {p}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise UsageError(f"{p} is not a regular file (expected {what})")
            if info.st_size > limit:
                raise UsageError(_too_big(p, info.st_size, limit, what))
            data = f.read(limit + 1)  # the file may grow after fstat
        except OSError as e:
            raise UsageError(f"cannot read {p}: {e.strerror or e}") from None
    if len(data) > limit:
        raise UsageError(_too_big(p, len(data), limit, what))
    return data


def _too_big(p: Path, size: int, limit: int, what: str) -> str:
    return (f"{p} is {size:,} bytes, over the {limit // 2**20} MiB limit for {what}; "
            f"is this the right file?")


class _LongInteger(ValueError):
    pass


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise _LongInteger(len(text.lstrip("-")))
    return int(text)


def loads_json(data: bytes, *, source: str, what: str) -> Any:
    """JSON from a file's bytes, every failure a UsageError naming `source`: not UTF-8, not JSON,
    nested too deeply, or an integer longer than MAX_JSON_INT_DIGITS digits."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{source} is not a text file (expected {what})") from None
    try:
        return json.loads(text, parse_int=_bounded_int)
    except _LongInteger as e:
        raise UsageError(f"{source} holds an integer of {e.args[0]:,} digits (more than "
                         f"{MAX_JSON_INT_DIGITS}); no value in {what} is that large") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{source} is not valid JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:
        raise UsageError(f"{source} nests too deeply to be {what}") from None
