"""tune/targets/gpu_timing.py without a GPU: the turn order of configs timed together (the timing
itself runs in tests/test_tune_gpu.py on a GPU)."""

from __future__ import annotations

from tilefit.tune.targets.gpu_timing import _rotated


def test_each_pass_starts_one_config_later():
    assert [_rotated(3, i) for i in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    assert _rotated(1, 5) == [0] and _rotated(0, 2) == []
