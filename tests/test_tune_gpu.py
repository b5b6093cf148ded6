"""The tuner on a real GPU: a config compiled by a compile worker (the compiler oracle, no GPU)
must be what the GPU worker's launch finds in Triton's cache, at every batch size and for every
GROUP_SIZE_M of the tile (one compile per compile key). Otherwise each first launch would compile
again, serially, on the GPU worker."""

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
    config = MoEConfig(16, 64, 64, 16, 4, 3)
    target.compile(target.compile_key(config), shape)  # what a compile worker does
    hits: list[bool] = []
    previous = knobs.compilation.listener

    def listen(*, src, cache_hit, **_):
        if getattr(src, "name", "") == "fused_moe_kernel":
            hits.append(cache_hit)

    knobs.compilation.listener = listen
    try:
        for batch in (1, 3, 64):  # num_valid = 4, 12, 256: below 16, odd, a multiple of 16
            # GROUP_SIZE_M is a runtime argument: the key's compile serves every value of it.
            for group_m in (1, 16, 64):
                c = MoEConfig(16, 64, 64, group_m, 4, 3)
                assert target.run(c, shape, batch) > 0
                assert target.check(c, shape, batch) is None
    finally:
        knobs.compilation.listener = previous
    assert hits == [True], hits  # one JIT lookup, served by the worker's compile


@pytest.mark.gpu
def test_decode_batches_are_timed_as_graph_replays_without_the_host_launch():
    """TP8 gemm2 at batch 1 touches 8 experts (25 MB, under the H200's L2): the graph rotates over
    weight copies that touch several times the L2 per pass, and leaves the host launch out."""
    import torch
    from triton.testing import do_bench

    from tilefit.tune.targets.tilefit_moe import GRAPH, L2_MULTIPLE, TilefitMoETarget

    target = TilefitMoETarget(gpu="h200", warmup_ms=2, rep_ms=10)
    shape = TuneShape("gemm2", 256, 6144, 256, 8, "bf16", 256)
    config = MoEConfig(16, 64, 128, 1, 4, 4)
    assert target.timing(shape, 1) == GRAPH and target.timing(shape, 4096) != GRAPH
    graph_us = target.run(config, shape, 1)
    copies = target.rotated_weights(shape)
    expert_bytes = copies[0][0][0].numel() * copies[0][0].element_size()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert len(copies) * 8 * expert_bytes >= 0.9 * L2_MULTIPLE * l2
    launch = target._launch(config, shape, 1)
    events_us = 1000.0 * do_bench(launch, warmup=2, rep=10, return_mode="median")
    assert 0 < graph_us < events_us


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 4096])
def test_a_search_probe_agrees_with_the_full_timing(batch):
    """`probe` (a search's short timing) times the same thing as `run` on a smaller budget: within
    10% of it at a graph-timed and an event-timed batch size."""
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    target = TilefitMoETarget(gpu="h200")
    shape = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
    config = MoEConfig(16, 64, 128, 1, 4, 4) if batch == 1 else MoEConfig(64, 128, 64, 1, 4, 3)
    full = target.run(config, shape, batch)
    probe = target.probe(config, shape, batch)
    assert 0.9 * full < probe < 1.1 * full


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 4096])
def test_configs_timed_in_turns_read_as_each_timed_alone(batch):
    """`run_many` (a re-timing round's finalists in turns) times what `run` times: within 10% of
    each config's own `run`, at a graph-timed and an event-timed batch size."""
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    target = TilefitMoETarget(gpu="h200", warmup_ms=2, rep_ms=10)
    shape = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
    configs = ([MoEConfig(16, 64, 128, 1, 4, 4), MoEConfig(16, 128, 128, 1, 4, 3)] if batch == 1
               else [MoEConfig(64, 128, 64, 1, 4, 3), MoEConfig(128, 256, 64, 16, 8, 3)])
    together = target.run_many(configs, shape, batch)
    alone = [target.run(c, shape, batch) for c in configs]
    for t, a in zip(together, alone):
        assert 0.9 * a < t < 1.1 * a, (together, alone)
