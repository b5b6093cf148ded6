"""Our kernel as a tuning target, on the CPU: its space and SMEM prefilter (the family's model),
its default config, and its correctness check run through Triton's interpreter in a worker."""

from __future__ import annotations

import pytest

from tilefit.kernels.triton_moe.config import MoEConfig
from tilefit.tune.results import DoesNotFit
from tilefit.tune.targets.base import TargetSpec, TuneShape
from tilefit.tune.targets.tilefit_moe import TilefitMoETarget
from tilefit.tune.workers import Worker

EP8 = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)


def test_space_prefilter_and_default():
    t = TilefitMoETarget(gpu="h200")
    space = t.space(EP8)
    assert len(space) == 1920
    misfits = [t.fit_reason(c, EP8) for c in space]
    # 616 of the 1920 configs fail at launch on an H200 (sm90), measured (benchmarks/RESULTS.md).
    assert sum(m is not None for m in misfits) == 616
    assert all(isinstance(m, DoesNotFit) and m.required > m.limit == 232448 for m in misfits if m)
    d = t.default_config(EP8, 64)
    assert t.fit_reason(d, EP8) is None
    assert t.smem_bytes(d, EP8) <= 232448
    assert len(t.space(TuneShape("gemm2", 32, 6144, 2048, 8, "fp8-block", 256))) == 1920


@pytest.mark.slow
def test_check_runs_kernel_against_reference_in_worker(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    # The interpreter reaches only the spawned worker (it inherits the environment).
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    w = Worker(TargetSpec.of("tilefit.tune.targets.tilefit_moe:TilefitMoETarget", gpu="h200",
                             device="cpu"))
    try:
        for gemm in ("gemm1", "gemm2"):
            # 8 experts in all, 4 held here: the other half of the assignments are dropped.
            shape = TuneShape(gemm, 4, 64, 32, 2, "fp16", 8)
            assert w.call("check", MoEConfig(16, 32, 32, 1, 4, 2), shape, 7, 300) is None
    finally:
        w.stop()


def test_floor_counts_the_timed_routing_draw():
    """The floor uses the rows and experts the seeded draw actually gives this GPU, so a draw that
    hits fewer experts than the mean does not read above 100%."""
    pytest.importorskip("torch")
    from tilefit.hw.catalog import get_gpu
    from tilefit.tune.perfmodel import Device, floor_us
    from tilefit.tune.targets.base import Routed, TuneShape
    from tilefit.tune.targets.draws import routing
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    target = TilefitMoETarget(gpu="h200")
    shape = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)  # GLM-5 EP8
    dev = Device.from_gpu(get_gpu("h200"), "bf16")
    for batch in (1, 2, 64):
        ids = routing(shape, batch, target.seed)[0]
        local = ids[ids >= 0]
        routed = target.routed(shape, batch)
        assert routed == Routed(int(local.numel()), len(set(local.tolist())))
        one_expert = floor_us(shape, batch, dev, Routed(routed.rows, 1))
        assert floor_us(shape, batch, dev, routed) == pytest.approx(routed.experts * one_expert, rel=0.05)
    assert target.timing(shape, 256) == "cuda-graph" and target.timing(shape, 257) == "events"
    assert TilefitMoETarget(gpu="h200", graph_max_batch=0).timing(shape, 1) == "events"


def test_perf_model_ranks_a_64_byte_fp8_k_step_behind_128():
    """fp8 BLOCK_SIZE_K 64 (64 bytes per row) ran ~1.4x slower than 128 on an H200 (RESULTS.md,
    issue 17 session 5); bf16 BLOCK_SIZE_K 64 is 128 bytes and is not charged."""
    from tilefit.hw.catalog import get_gpu
    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.tune.perfmodel import Device, predict_us
    from tilefit.tune.targets.base import TuneShape

    def ratio(dtype: str, batch: int) -> float:
        shape = TuneShape("gemm1", 32, 6144, 2048, 8, dtype, 256)
        dev = Device.from_gpu(get_gpu("h200"), dtype)
        k64, k128 = MoEConfig(16, 64, 64, 1, 4, 4), MoEConfig(16, 64, 128, 1, 4, 4)
        return predict_us(k64, shape, batch, dev, 0) / predict_us(k128, shape, batch, dev, 0)

    for batch in (1, 16, 256):
        assert ratio("fp8-block", batch) >= 1.3
        assert ratio("bf16", batch) < 1.3


def test_searches_side_by_side_do_not_remake_each_other_s_inputs(monkeypatch):
    """One GPU worker serves the four searches of a layer at once (tune/schedule.py), so its
    timings alternate between batch sizes and GEMMs: each batch size's routing and activations
    (made on the CPU: 0.2-0.5 s at batch 4096) are kept for the last few, not remade at every
    switch; the weights stay the current GEMM's, and what is kept is bounded."""
    pytest.importorskip("torch")
    from tilefit.tune.targets import tilefit_moe

    made = []
    routing = tilefit_moe.routing
    monkeypatch.setattr(tilefit_moe, "routing",
                        lambda shape, batch, seed, **kw: made.append((shape.gemm, batch))
                        or routing(shape, batch, seed, **kw))
    t = TilefitMoETarget(gpu="h200", device="cpu")
    g1 = TuneShape("gemm1", 4, 64, 32, 2, "bf16", 8)
    g2 = g1.with_gemm("gemm2")
    for _ in range(3):
        for shape, batch in ((g1, 16), (g1, 2048), (g2, 16), (g2, 2048)):
            p = t._problem(shape, batch)
            assert p["b"] is t._weights(shape)["b"] and p["a"].shape[0] == batch * (
                1 if shape.gemm == "gemm1" else shape.topk)
            t._launch(MoEConfig(16, 32, 32, 1, 4, 2), shape, batch)  # aligns the routing
    assert made == [("gemm1", 16), ("gemm1", 2048), ("gemm2", 16), ("gemm2", 2048)]
    for batch in range(1, 10):  # the other searches move on; gemm2's batch-2048 one stays
        t._problem(g1, batch)
        t._problem(g2, 2048)
    assert made.count(("gemm2", 2048)) == 1
    assert len(t._activations) == tilefit_moe.ACTIVATIONS_KEPT
    assert {k[:2] for k in t._aligns} <= set(t._activations)


def test_warm_on_a_compile_worker_touches_no_gpu(monkeypatch):
    """A compile worker's warm imports the compiler and the kernel, and never makes a CUDA
    context (compile workers run where no GPU may be)."""
    import torch

    def no_cuda(*args, **kwargs):
        raise AssertionError("a compile worker's warm touched CUDA")

    monkeypatch.setattr(torch.cuda, "init", no_cuda)
    shape = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
    from triton.runtime import cache

    cache.triton_key.cache_clear()  # as in a fresh worker
    TilefitMoETarget(gpu="h200").warm(shape, False)
    import sys

    assert "triton" in sys.modules and "tilefit.kernels.triton_moe.ops" in sys.modules
    # The first compile's hash of Triton's sources is made (and kept) ahead of it.
    assert cache.triton_key.cache_info().currsize == 1


def test_a_probe_replays_for_the_probe_graph_budget_and_run_for_the_full_one(monkeypatch):
    """probe: PROBE_GRAPH_MS (2 ms) over PROBE_GRAPH_LAUNCHES launches; run: GRAPH_MS over
    GRAPH_LAUNCHES (tilefit_moe.py says why they differ)."""
    pytest.importorskip("torch")
    from tilefit.tune.targets import tilefit_moe

    seen = []
    monkeypatch.setattr(tilefit_moe, "replay_us",
                        lambda launches, ms, replays, count: seen.append((ms, replays, count)) or 1.0)
    t = tilefit_moe.TilefitMoETarget(gpu="h200", device="cpu")
    monkeypatch.setattr(t, "rotated_weights", lambda shape: [None, None])
    monkeypatch.setattr(t, "_launch", lambda config, shape, batch, w=None: (lambda: None))
    shape = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
    config = MoEConfig(16, 64, 128, 1, 4, 3)
    assert t.timing(shape, 1) == tilefit_moe.GRAPH
    t.probe(config, shape, 1)
    t.run(config, shape, 1)
    assert seen == [(tilefit_moe.PROBE_GRAPH_MS, tilefit_moe.PROBE_MIN_REPLAYS,
                     tilefit_moe.PROBE_GRAPH_LAUNCHES),
                    (tilefit_moe.GRAPH_MS, tilefit_moe.MIN_REPLAYS, tilefit_moe.GRAPH_LAUNCHES)]
    assert tilefit_moe.PROBE_GRAPH_MS == 2 < tilefit_moe.PROBE_WARMUP_MS + tilefit_moe.PROBE_REP_MS


def test_a_rank_left_without_rows_is_routed_again_and_others_keep_their_draw():
    """Qwen3-235B-A22B EP8 at batch 1 (16 of 128 experts local, top-8): the seeded first draw
    routes the token to other ranks only, so the H200 timed an empty kernel (0.21 us, session 10).
    The draw is repeated from the same generator until a row is local; a first draw with local
    rows (GLM-5 EP8, every TP shape) stays the same."""
    torch = pytest.importorskip("torch")
    from tilefit.tune.targets.draws import routing
    from tilefit.tune.targets.tilefit_moe import SEED

    qwen = TuneShape("gemm1", 16, 4096, 1536, 8, "fp8-block", 128)
    g = torch.Generator(device="cpu").manual_seed(SEED)
    first = torch.rand(1, 128, generator=g).topk(8, dim=1).indices
    assert bool((first >= 16).all())  # the case itself: no local expert in the first draw
    ids, weights = routing(qwen, 1, SEED)
    assert int((ids >= 0).sum()) >= 1 and weights.shape == (1, 8)
    assert torch.equal(ids, routing(qwen, 1, SEED)[0])  # still fixed by the seed
    glm = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
    for batch in (1, 2, 64):
        g = torch.Generator(device="cpu").manual_seed(SEED)
        want = torch.rand(batch, 256, generator=g).topk(8, dim=1).indices
        want = torch.where(want < 32, want, torch.full_like(want, -1)).to(torch.int32)
        assert int((want >= 0).sum()) >= 1 and torch.equal(routing(glm, batch, SEED)[0], want)
