"""Re-timing rounds with their finalists timed in turns (TuneRequest.interleave, target.run_many,
tune/targets/gpu_timing.py): one request per round, each config journaled as a round line of
its own, and a failure of the group falls back to timing each config alone."""

from __future__ import annotations

from tilefit.tune.evaluator import Evaluator
from tilefit.tune.finalists import retime
from tilefit.tune.journal import Journal, read_entries
from tilefit.tune.pools import WorkerPool
from tilefit.tune.results import LaunchFailed, Ok
from tilefit.tune.run import JOURNAL, TuneRequest, tune
from tilefit.tune.targets.base import MOE_SPACE, ConfigGroup, TargetSpec, TuneShape
from tilefit.tune.targets.fake import FakeTarget

LAYER = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)  # GLM-5 under EP8
CONFIGS = FakeTarget(grid="distinct").space(LAYER)[:3]


class _GroupPool:
    """A benchmark pool recording each request; a group reply is `group` (None: a time each)."""

    size, restarts = 1, 0

    def __init__(self, group=None):
        self.calls, self.group = [], group

    def call(self, op, config, shape, batch):
        self.calls.append((op, config))
        if op in ("compile", "check"):
            return None
        if op == "run_many":
            return self.group if self.group is not None else [Ok(10.0 + i)
                                                              for i in range(len(config.configs))]
        return Ok(20.0)


def _evaluator(j, bench, target=None):
    return Evaluator("fake", target or FakeTarget(), j, _GroupPool(), bench, [],
                     lambda e, d: None, interleave=True)


def _journal(tmp_path):
    return Journal(tmp_path / "j.jsonl", resume=False, context={}, from_dict=MOE_SPACE.from_dict)


def test_a_round_is_one_request_and_each_config_a_journal_line(tmp_path):
    with _journal(tmp_path) as j:
        bench = _GroupPool()
        ev = _evaluator(j, bench)
        found = retime(ev, LAYER, 16, [(c, ("fast",), 10.0) for c in CONFIGS], rounds=2, drop=0.0)
        ev.close()
    assert [op for op, _ in bench.calls] == ["run_many", "run_many"]
    first, second = (cfg.configs for _, cfg in bench.calls)
    assert first == tuple(CONFIGS) and second == tuple(CONFIGS[1:] + CONFIGS[:1])  # rotated
    assert sorted(len(f.rounds_us) for f in found) == [2, 2, 2]
    lines = [e for e in read_entries(tmp_path / "j.jsonl", MOE_SPACE.from_dict) if e.batch == 16]
    assert {e.shape.split(":")[0] for e in lines} == {"retime0", "retime1"} and len(lines) == 6


def test_a_failed_group_times_each_config_alone(tmp_path):
    with _journal(tmp_path) as j:
        bench = _GroupPool(group=LaunchFailed("an illegal memory access (fake)"))
        ev = _evaluator(j, bench)
        results = ev.measure_together(LAYER, 16, CONFIGS, "retime0:" + LAYER.key())
        ev.close()
    assert [op for op, _ in bench.calls] == ["run_many", "run", "run", "run"]
    assert results == [Ok(20.0)] * 3


def test_journaled_configs_are_not_timed_again_and_one_left_is_timed_alone(tmp_path):
    key = "retime0:" + LAYER.key()
    with _journal(tmp_path) as j:
        j.record("fake", key, 16, CONFIGS[0], Ok(5.0))
        j.record("fake", key, 16, CONFIGS[1], Ok(6.0))
        bench = _GroupPool()
        ev = _evaluator(j, bench)
        assert ev.measure_together(LAYER, 16, CONFIGS, key) == [Ok(5.0), Ok(6.0), Ok(20.0)]
        ev.close()
    assert [op for op, _ in bench.calls] == ["run"]  # a group of one is a plain run


def test_a_target_without_run_many_keeps_one_request_per_config(tmp_path):
    class _Alone(FakeTarget):
        run_many = property(lambda self: (_ for _ in ()).throw(AttributeError("run_many")))

    with _journal(tmp_path) as j:
        bench = _GroupPool()
        ev = _evaluator(j, bench, target=_Alone())
        assert not ev.interleave
        retime(ev, LAYER, 16, [(c, ("fast",), 10.0) for c in CONFIGS], rounds=1, drop=0.0)
        ev.close()
    assert [op for op, _ in bench.calls] == ["run"] * 3


def test_a_worker_answers_run_many_with_a_time_per_config():
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=3, grid="distinct")
    with WorkerPool(spec, [None], timeout=30.0) as pool:
        together = pool.call("run_many", ConfigGroup(tuple(CONFIGS)), LAYER, 16)
        alone = [pool.call("run", c, LAYER, 16) for c in CONFIGS]
    assert together == alone and all(isinstance(r, Ok) for r in together)


def test_interleaved_rounds_pick_what_one_at_a_time_picks(tmp_path):
    """The fake's times do not depend on order: the same picks, the same journal lines."""
    def run(out, interleave):
        spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=5, grid="distinct",
                             compile_sleep_s=0.005)
        return tune(TuneRequest(spec, (LAYER,), (1, 64, 1024), out, "h200", "NVIDIA H200",
                                compile_workers=2, compile_timeout_s=20.0, run_timeout_s=20.0,
                                rounds=3, interleave=interleave))

    a, b = run(tmp_path / "a", True), run(tmp_path / "b", False)
    assert [r.config for r in a.rows] == [r.config for r in b.rows]

    def rounds(out):
        return {(e.shape, e.batch, e.config, e.result) for e in
                read_entries(out / JOURNAL, MOE_SPACE.from_dict) if e.shape.startswith("retime")}
    assert rounds(tmp_path / "a") == rounds(tmp_path / "b")
