"""TOML loading for the packaged catalogs (tomllib on 3.11+, tomli before)."""

from __future__ import annotations

import sys
from importlib import resources
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


def load_package_toml(package: str, name: str) -> dict[str, Any]:
    """Read `data/<name>` shipped inside `package`."""
    text = resources.files(package).joinpath("data", name).read_text(encoding="utf-8")
    return tomllib.loads(text)
