"""The flashinfer-python version an engine release pins (Requires-Dist in its wheel's METADATA):
the FlashInfer `pip install sglang==X` brings, so the tactic list (and blocklist ids) it runs."""

from __future__ import annotations

import re
from pathlib import Path

from wheel_facts import wheels

_PIN = re.compile(r"^Requires-Dist:\s*flashinfer[-_]python(?:\[[^\]]*\])?\s*==\s*([0-9][^\s;,]*)(.*)$",
                  re.M | re.I)


def pin(root: Path) -> str | None:
    """'0.7.2' when the wheel pins flashinfer-python==0.7.2 (also under an extra), else None."""
    for meta in root.glob("*.dist-info/METADATA"):
        m = _PIN.search(meta.read_text(errors="replace"))
        if m:
            return m.group(1)
    return None


def table(cache: Path) -> str:
    out = ["# flashinfer-python version each engine release pins (Requires-Dist ==, read from the",
           "# wheels' METADATA by scripts/engine_facts.py --write-pins). A release not listed pins none",
           "# (vLLM 0.9.0-0.10.0 and 0.20.2 onwards, where FlashInfer is an unpinned dependency).", ""]
    out.append("[sources]")
    repos = {"sglang": "sgl-project/sglang", "vllm": "vllm-project/vllm"}
    for engine in ("sglang", "vllm"):
        vs = wheels.versions_cached(cache, engine)
        out.append(f'{engine}_pins = ["{repos[engine]}", "*.dist-info/METADATA (Requires-Dist: '
                   f'flashinfer-python==X)", "{vs[0]}-{vs[-1]} wheels"]')
    for engine in ("sglang", "vllm"):
        out += ["", f"[{engine}]"]
        for v in wheels.versions_cached(cache, engine):
            p = pin(cache / engine / v)
            if p:
                out.append(f'"{v}" = "{p}"')
    return "\n".join(out) + "\n"
