"""The tuner on a real GPU: a config compiled by a compile worker (the compiler oracle, no GPU)
must be what the GPU worker's launch finds in Triton's cache, at every batch size. Otherwise each
first launch would compile again, serially, on the GPU worker."""

from __future__ import annotations

import pytest

from tilefit.kernels.triton_moe.config import MoEConfig
from tilefit.tune.targets.base import TuneShape


@pytest.mark.gpu
@pytest.mark.parametrize("gemm", ["gemm1", "gemm2"])
def test_precompiled_config_serves_the_launch_at_every_batch(gemm, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    from triton import knobs

    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    target = TilefitMoETarget(gpu="h200", warmup_ms=1, rep_ms=2)
    shape = TuneShape(gemm, 8, 1024, 256, 4, "bf16", 16)
    config = MoEConfig(16, 64, 64, 1, 4, 3)
    target.compile(config, shape)  # what a compile worker does
    hits: list[bool] = []
    previous = knobs.compilation.listener

    def listen(*, src, cache_hit, **_):
        if getattr(src, "name", "") == "fused_moe_kernel":
            hits.append(cache_hit)

    knobs.compilation.listener = listen
    try:
        for batch in (1, 3, 64):  # num_valid = 4, 12, 256: below 16, odd, a multiple of 16
            assert target.run(config, shape, batch) > 0
            assert target.check(config, shape, batch) is None
    finally:
        knobs.compilation.listener = previous
    assert hits == [True], hits  # one JIT lookup, served by the worker's compile
