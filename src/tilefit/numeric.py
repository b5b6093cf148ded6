"""Numbers from text, checked before they are converted: an integer's digits are counted before
int() sees them (Python refuses strings over 4,300 digits with a bare ValueError, and no count
tilefit takes is more than a few digits long), and a float must be finite (nan and inf are never
a timeout, a bandwidth or a budget). Every refusal is a UsageError that names what was read."""

from __future__ import annotations

import math

from tilefit.errors import UsageError

# No count tilefit takes (GPUs, tokens, trials, workers, repetitions) comes near a billion.
MAX_COUNT = 10**9


def shown(text: str, limit: int = 40) -> str:
    """`text` quoted for a message, cut to `limit` characters with its full length said."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit // 2]!r}... ({len(text):,} characters)"


def bounded_int(text: str, what: str, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """Decimal digits (an optional sign) -> int in minimum..maximum, the digits counted first."""
    s = str(text).strip()
    body = s[1:] if s[:1] in "+-" else s
    if not body.isdecimal():
        raise UsageError(f"{what} must be an integer, got {shown(str(text))}")
    if len(body.lstrip("0")) > len(str(maximum)):
        raise UsageError(f"{what} {shown(s)} is out of range ({minimum:,}..{maximum:,})")
    value = int(s[: len(s) - len(body)] + (body.lstrip("0") or "0"))  # int() counts leading zeros too
    if not minimum <= value <= maximum:
        raise UsageError(f"{what} {value:,} is out of range ({minimum:,}..{maximum:,})")
    return value


def finite_float(text: str, what: str, *, positive: bool = False) -> float:
    """A finite float (nan, inf and -inf refused); with `positive`, above zero."""
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{what} must be a number, got {shown(str(text))}") from None
    if not math.isfinite(value):
        raise UsageError(f"{what} must be a finite number, got {text}")
    if positive and not value > 0:
        raise UsageError(f"{what} must be a positive number, got {text}")
    return value
