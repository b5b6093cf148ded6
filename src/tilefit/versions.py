"""Version strings of the engines and libraries tilefit reads (sglang, vLLM, FlashInfer, Triton):
one parser, so '0.7', '0.7.0' and '0.7.0.post1' compare equal everywhere. Pre-release and post
suffixes are dropped: the catalogs were read from releases."""

from __future__ import annotations

import re

from tilefit.errors import UsageError
from tilefit.numeric import bounded_int, shown

MAX_PART = 99_999  # each of major.minor.patch; calendar versions (2025.1) fit, 5,000 digits do not
_VERSION_RE = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(text: str, what: str = "version", example: str = "0.7.4") -> tuple[int, int, int]:
    """'0.6.8.post1' -> (0, 6, 8); '0.7' -> (0, 7, 0); anything without a leading number is a
    UsageError naming `what` (e.g. 'FlashInfer version') and an example spelling."""
    m = _VERSION_RE.match(str(text or ""))
    if not m:
        raise UsageError(f"bad {what} {shown(str(text))}; write it like {example}")
    major, minor, patch = (bounded_int(g or "0", what, maximum=MAX_PART) for g in m.groups())
    return major, minor, patch
