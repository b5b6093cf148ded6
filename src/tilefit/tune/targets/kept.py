"""What a GPU worker keeps of the weights it times against: per GEMM shape, the weights and their
rotated copies (tilefit_moe.py), for the WEIGHTS_KEPT shapes used last, while all kept take at
most a budget of the device's memory (WEIGHTS_SHARE of it; none off a CUDA device, where only the
shape in use is kept).

Why two: a layer's gemm1 and gemm2 are searched side by side on one GPU worker, so its requests
alternate between the two shapes, and remaking a shape's weights at each switch (random numbers,
fp8 quantisation, the copies) made the first probe after a switch a median 6.6-6.9 ms slower in
bf16 and 13-16 ms in fp8-block, 343-381 switches a run (the H200 traces of benchmarks/RESULTS.md,
session 7). GLM-5 TP8 bf16's two shapes with their copies take under 20 GB, within a quarter of an
H200's 141 GB; on a 32 GB GPU the second shape is not kept, as before.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from tilefit.tune.targets.base import TuneShape

WEIGHTS_KEPT = 2
WEIGHTS_SHARE = 0.25


class KeptWeights:
    """Per shape, named parts (e.g. "weights", "rotated"), least recently used first out."""

    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self._kept: OrderedDict[TuneShape, dict[str, Any]] = OrderedDict()

    def get(self, shape: TuneShape, part: str) -> Any:
        """The part kept for `shape` (now the most recently used), or None."""
        parts = self._kept.get(shape)
        if parts is None or part not in parts:
            return None
        self._kept.move_to_end(shape)
        return parts[part]

    def make_room(self, shape: TuneShape, nbytes: int) -> None:
        """Drop other shapes, least recently used first, until at most WEIGHTS_KEPT - 1 others
        are left and everything kept with `nbytes` more for `shape` fits the budget."""
        for other in [s for s in self._kept if s != shape]:
            others = sum(1 for s in self._kept if s != shape)
            if others < WEIGHTS_KEPT and self.nbytes() + nbytes <= self.budget:
                break
            del self._kept[other]

    def put(self, shape: TuneShape, part: str, value: Any) -> Any:
        self._kept.setdefault(shape, {})[part] = value
        self._kept.move_to_end(shape)
        return value

    def shapes(self) -> list[TuneShape]:
        """Kept shapes, least recently used first."""
        return list(self._kept)

    def nbytes(self) -> int:
        """Bytes of the tensors kept (a tensor held twice, like copy 0 of the rotated copies,
        once)."""
        seen: dict[int, int] = {}
        for parts in self._kept.values():
            for tensor in _tensors(parts):
                seen[id(tensor)] = tensor.numel() * tensor.element_size()
        return sum(seen.values())


def _tensors(value: Any) -> list[Any]:
    if hasattr(value, "element_size"):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []
