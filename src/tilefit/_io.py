"""Atomic file writes: a temp file in the target folder, flushed and fsynced, then os.replace, so
a reader (or a run killed mid-write) sees the old file or the new one, never a torn one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tilefit.errors import UsageError


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as e:
        raise UsageError(f"cannot write {p}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
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
