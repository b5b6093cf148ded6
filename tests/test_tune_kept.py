"""tune/targets/kept.py: a GPU worker keeps the weights of the two GEMM shapes it used last (a
layer's gemm1 and gemm2, searched side by side, alternate on one worker) within a share of the
device's memory; off a CUDA device only the shape in use."""

from __future__ import annotations

import pytest

from tilefit.tune.targets.base import TuneShape
from tilefit.tune.targets.kept import WEIGHTS_KEPT, KeptWeights

torch = pytest.importorskip("torch")
G1 = TuneShape("gemm1", 4, 64, 32, 2, "bf16", 8)
G2 = G1.with_gemm("gemm2")
G3 = TuneShape("gemm1", 8, 64, 32, 2, "bf16", 8)


def _part(nbytes: int) -> dict:
    return {"b": torch.empty(nbytes, dtype=torch.uint8), "b_scale": None}


def test_the_two_used_last_stay_and_a_third_drops_the_least_recent():
    assert WEIGHTS_KEPT == 2
    kept = KeptWeights(budget_bytes=10_000)
    for shape in (G1, G2):
        kept.make_room(shape, 100)
        kept.put(shape, "weights", _part(100))
    assert kept.get(G1, "weights") is not None  # G1 now the most recent: G2 goes next
    kept.make_room(G3, 100)
    kept.put(G3, "weights", _part(100))
    assert kept.shapes() == [G1, G3] and kept.get(G2, "weights") is None


def test_over_the_budget_only_the_shape_in_use_is_kept():
    kept = KeptWeights(budget_bytes=150)
    kept.make_room(G1, 100)
    kept.put(G1, "weights", _part(100))
    kept.make_room(G2, 100)  # 200 bytes would not fit
    kept.put(G2, "weights", _part(100))
    assert kept.shapes() == [G2]
    kept.make_room(G2, 40)  # G2's own parts are never dropped for G2
    assert kept.shapes() == [G2]


def test_a_tensor_held_twice_counts_once():
    kept = KeptWeights(budget_bytes=0)
    w = kept.put(G1, "weights", _part(64))
    kept.put(G1, "rotated", [(w["b"], None), (w["b"].clone(), None)])
    assert kept.nbytes() == 128


def test_the_target_keeps_both_gemms_where_memory_allows_and_one_on_the_cpu():
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    t = TilefitMoETarget(gpu="h200", device="cpu")
    first = t._weights(G1)["b"]
    t._weights(G2)
    assert t.kept.shapes() == [G2] and t._weights(G1)["b"] is not first  # remade: budget 0
    t._kept = KeptWeights(budget_bytes=1 << 30)  # as on a GPU with room for both
    w1, w2 = t._weights(G1)["b"], t._weights(G2)["b"]
    for _ in range(3):  # the searches alternate: nothing is remade
        assert t._weights(G1)["b"] is w1 and t._weights(G2)["b"] is w2
        assert t._problem(G1, 16)["b"] is w1 and t._problem(G2, 16)["b"] is w2
