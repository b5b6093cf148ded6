"""The memory figures an engine prints at start-up, read from a log (to compare with a plan).

sglang: "Load weight end. ... mem usage=X GB" (GB = bytes / 2**30) and "KV Cache is allocated.
#tokens: N, K size: X GB, V size: Y GB" (or "KV size: X GB" for MLA); vLLM: "Model loading took X
GiB", "Available KV cache memory: X GiB", "GPU KV cache size: N tokens", "Maximum concurrency for N
tokens per request: Xx"; sglang's resolved "mem_fraction_static=X" (server_args=ServerArgs(...)).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WEIGHTS = (re.compile(r"Load weight end\..*?mem usage=([\d.]+) GB"), re.compile(r"Model loading took ([\d.]+) GiB"))
_SG_KV = re.compile(r"KV Cache is allocated\..*?#tokens: (\d+), (?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)")
_V_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_V_AVAIL = re.compile(r"Available KV cache memory: (-?[\d.]+) GiB")
_V_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_SG_FRACTION = re.compile(r"ServerArgs\(.*?\bmem_fraction_static=([\d.]+)")


@dataclass(frozen=True, slots=True)
class Printed:
    weights_gib: float | None = None
    kv_tokens: int | None = None
    kv_gib: float | None = None  # sglang: K + V (or KV) size; vLLM: available KV cache memory
    concurrency: tuple[int, float] | None = None  # (tokens per request, requests at once)
    mem_fraction: float | None = None  # sglang's mem_fraction_static as its ServerArgs print it


def read_printed(text: str) -> Printed:
    """The first of each figure in `text` (ranks print the same; the first is rank 0's or the engine's)."""
    weights = next((float(m.group(1)) for r in _WEIGHTS if (m := r.search(text))), None)
    kv_tokens: int | None = None
    kv_gib: float | None = None
    if m := _SG_KV.search(text):
        kv_tokens = int(m.group(1))
        kv_gib = float(m.group(2)) + float(m.group(3)) if m.group(2) else float(m.group(4))
    if m := _V_TOKENS.search(text):
        kv_tokens = int(m.group(1).replace(",", ""))
    if m := _V_AVAIL.search(text):
        kv_gib = float(m.group(1))
    conc = _V_CONC.search(text)
    fraction = _SG_FRACTION.search(text)
    return Printed(weights, kv_tokens, kv_gib,
                   (int(conc.group(1).replace(",", "")), float(conc.group(2))) if conc else None,
                   float(fraction.group(1)) if fraction else None)
