"""The flashinfer-python version an engine release installs: its wheel pins it (Requires-Dist
flashinfer-python==X in METADATA; data/flashinfer_pins.toml, read by scripts/engine_facts.py).
FlashInfer's tactic lists and ids change between versions, so this is the list a deployment of
that engine release profiles unless FlashInfer was upgraded by hand."""

from __future__ import annotations

from functools import lru_cache

from tilefit._toml import load_package_toml
from tilefit.versions import parse_version


@lru_cache(maxsize=1)
def _pins() -> dict[str, dict[str, str]]:
    raw = load_package_toml("tilefit.engines", "flashinfer_pins.toml")
    return {k: v for k, v in raw.items() if k in ("sglang", "vllm")}


def flashinfer_pin(engine: str, version: str | None) -> str | None:
    """'0.7.2' for ('sglang', '0.5.23'); None when the version is not given, not read, or pins none."""
    if not version:
        return None
    rows = _pins().get(engine, {})
    if version in rows:
        return rows[version]
    want = parse_version(version, "engine version")
    return next((pin for v, pin in rows.items() if parse_version(v) == want), None)
