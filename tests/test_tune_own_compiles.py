"""Kernels a GPU worker compiles itself (tune/targets/own_compiles.py) are counted through Triton's
compile listener, gathered from the live workers at the end of a run (WorkerPool.stats), and a run
that had any says so and records the count (session 8: a compile-key mismatch cost ~45 s of a TP8
fp8-block run on the H200 and nothing in the run showed it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tilefit.tune import pools
from tilefit.tune.run import TuneRequest, tune
from tilefit.tune.targets import own_compiles
from tilefit.tune.targets.base import TargetSpec, TuneShape

SHAPE = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)


@pytest.fixture
def fresh(monkeypatch):
    """own_compiles with no listener installed yet, and Triton's listener restored after."""
    knobs = pytest.importorskip("triton").knobs
    monkeypatch.setattr(own_compiles, "_counts", {})
    monkeypatch.setattr(own_compiles, "_installed", False)
    monkeypatch.setattr(knobs.compilation, "listener", None)  # restored after the test
    return knobs.compilation


def _compiled(compilation, name: str, hit: bool) -> None:
    compilation.listener(src=SimpleNamespace(name=name), metadata={}, metadata_group={},
                         times=None, cache_hit=hit)


def test_counts_only_misses_of_watched_kernels_and_keeps_the_listener_before(fresh):
    seen = []
    fresh.listener = lambda **kw: seen.append((kw["src"].name, kw["cache_hit"]))
    assert own_compiles.watch("fused_moe_kernel") and own_compiles.watch("fused_moe_kernel")
    for name, hit in (("fused_moe_kernel", False), ("fused_moe_kernel", True),
                      ("silu_and_mul_kernel", False), ("fused_moe_kernel", False)):
        _compiled(fresh, name, hit)
    assert own_compiles.count("fused_moe_kernel") == 2
    assert own_compiles.count("silu_and_mul_kernel") == 0  # not watched
    assert len(seen) == 4  # the listener set before still hears every compile, once


def test_the_target_watches_from_its_first_launch(fresh):
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget
    from tilefit.kernels.triton_moe.config import MoEConfig

    target = TilefitMoETarget(gpu="h200", device="cpu")
    assert target.stats() == {} and fresh.listener is None  # nothing launched, nothing counted
    target._launch(MoEConfig(16, 64, 64, 1, 4, 2), TuneShape("gemm1", 8, 256, 128, 2, "bf16"), 4)
    assert fresh.listener is not None and target.stats() == {"own_compiles": 0}
    _compiled(fresh, "fused_moe_kernel", False)
    assert target.stats() == {"own_compiles": 1}


def test_pool_stats_sum_the_live_workers_and_start_none():
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", grid="distinct")
    from tilefit.tune.targets.fake import FakeTarget

    configs = FakeTarget(grid="distinct").space(SHAPE)[:5]
    with pools.WorkerPool(spec, [None, None, None], timeout=30.0) as pool:
        assert pool.stats(SHAPE) == {}  # no worker started yet, and none is for stats
        for c in configs:
            pool.call("run", c, SHAPE, 64)
        alive = sum(w.alive for w in pool.workers)
        assert pool.stats(SHAPE) == {"timed": 5}
        assert sum(w.alive for w in pool.workers) == alive
    assert pools.RequestPool.stats(pool, SHAPE) == {}  # the default: a pool without counters


@pytest.mark.parametrize("own", [None, 3])
def test_a_run_says_when_its_gpu_worker_compiled(tmp_path, monkeypatch, own):
    real = pools.WorkerPool.stats
    monkeypatch.setattr(pools.WorkerPool, "stats", lambda self, shape: (
        real(self, shape) if own is None or self.name != "gpu" else {"own_compiles": own}))
    said = []
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", grid="distinct")
    report = tune(TuneRequest(spec, (SHAPE,), (1, 64), tmp_path, "h200", "NVIDIA H200",
                              compile_workers=2, trials=8),
                  progress=lambda kind, data: said.append((kind, data)))
    warnings = [d["message"] for k, d in said if k == "warning"]
    assert report.gpu_own_compiles == own and report.as_dict()["gpu_own_compiles"] == own
    assert any("compiled 3 kernel(s) itself" in w for w in warnings) == (own == 3)
