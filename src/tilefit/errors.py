"""Errors that reach the user. The CLI turns `UsageError` into one line on stderr and exit code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class TilefitError(Exception):
    """Base class for errors tilefit reports to the user without a traceback."""

    exit_code = 2


class UsageError(TilefitError):
    """Bad input: an unknown name, a malformed file, a value out of range. Exit code 2."""


class NotModelled(UsageError):
    """A model or path tilefit has no model for yet: alone, an error; inside a larger answer (check's
    memory section), the part it stands for is left out and said so."""


class MissingDependency(UsageError):
    """An optional dependency (triton, torch, nvcc, headers) is needed and absent."""


def unknown_name(kind: str, name: str, known: Iterable[str], listing: str) -> UsageError:
    """An error for an unknown catalog name that suggests close matches and the listing command."""
    known = sorted(set(known))
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ";"
    return UsageError(f"unknown {kind} {name!r}{hint} see `{listing}`")
