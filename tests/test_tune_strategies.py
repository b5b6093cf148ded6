"""Strategies on a recorded landscape (the replay target): the fast strategy must find a config
within 2% of the exhaustive best with at most 8% of its trials at the first batch size and 4.5%
once seeded; options are checked."""

from __future__ import annotations

import math

import pytest

from tilefit.errors import UsageError
from tilefit.hw.catalog import get_gpu
from tilefit.tune.perfmodel import Device, floor_us, predict_us
from tilefit.tune.results import LaunchFailed, Ok
from tilefit.tune.strategies import get_strategy, make_options, parse_option_text
from tilefit.tune.strategies.base import Budget, SearchSpace
from tilefit.tune.strategies.fast import _neighbours
from tilefit.tune.targets.base import MOE_SPACE, TuneShape
from tilefit.tune.targets.fake import FakeTarget
from tilefit.tune.targets.replay import ReplayTarget, record

# GLM-5 per-GPU shapes (zai-org/GLM-5 config.json): EP8 gemm1 and TP8 gemm2.
EP8 = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
TP8 = TuneShape("gemm2", 256, 6144, 256, 8, "bf16", 256)
BATCHES = [1, 16, 256, 4096]
AXES = MOE_SPACE.axes


@pytest.fixture(scope="module")
def landscapes(tmp_path_factory):
    """Two synthetic landscapes (different seeds), recorded to journal files and replayed."""
    out = []
    for seed in (3, 4):
        fake = FakeTarget(seed=seed)
        path = tmp_path_factory.mktemp("rec") / f"seed{seed}.jsonl"
        record(fake, [EP8, TP8], BATCHES, path)
        out.append((fake, ReplayTarget(path=str(path))))
    return out


def _evaluate(replay, shape, batch):
    def run(configs):
        out = []
        for c in configs:
            r = replay.recorded(shape, batch, c)
            out.append(r if r is not None else LaunchFailed("not recorded"))
        return out
    return run


def test_fast_is_within_2pct_of_exhaustive_with_a_twentieth_of_its_trials(landscapes):
    dev = Device.from_gpu(get_gpu("h200"), "bf16")
    fast, exhaustive = get_strategy("fast"), get_strategy("exhaustive")
    checked = 0
    for fake, replay in landscapes:
        for shape in (EP8, TP8):
            space = replay.space(shape)
            assert len(space) == sum(fake.fit_reason(c, shape) is None for c in fake.space(shape))
            previous = None
            for b in BATCHES:
                def predict(c, _s=shape, _b=b):
                    return predict_us(c, _s, _b, dev, fake.smem_bytes(c, _s))
                ev = _evaluate(replay, shape, b)
                ex = exhaustive.search(SearchSpace(tuple(space), predict), ev, Budget())
                fa = fast.search(SearchSpace(tuple(space), predict, (previous,) if previous else (), axes=AXES),
                                 ev, Budget())
                assert ex.trials == len(space)
                # 8% of the space for the first batch size, 4.5% once seeded: over the 18
                # standard batch sizes, (8 + 17 x 4.5) / 18 = 4.7% of an exhaustive sweep's trials.
                cap = 0.045 if previous else 0.08
                assert fa.trials <= cap * ex.trials, (shape.key(), b, fa.trials)
                previous = fa.best
                assert fa.best_time_us <= 1.02 * ex.best_time_us, (shape.key(), b, fa.best, ex.best)
                # The landscape distorts the model upward: nothing beats the roofline floor.
                assert ex.best_time_us >= floor_us(shape, b, dev)
                checked += 1
    assert checked == 16


def test_exhaustive_respects_trial_budget_and_reports_failures():
    shape = EP8
    fake = FakeTarget(seed=0, grid="distinct")
    space = tuple(c for c in fake.space(shape) if fake.fit_reason(c, shape) is None)
    bad = space[1]

    def ev(configs):
        return [LaunchFailed("boom") if c == bad else Ok(fake.time_us(c, shape, 64)) for c in configs]

    res = get_strategy("exhaustive").search(SearchSpace(space), ev, Budget(trials=10),
                                            make_options(get_strategy("exhaustive"), {"chunk": 4}))
    assert res.trials == 10
    assert dict(res.measured)[bad] == LaunchFailed("boom")
    assert res.best != bad and res.best_time_us == min(fake.time_us(c, shape, 64) for c in space[:10] if c != bad)


def test_fast_uses_seeds_and_handles_empty_space():
    fast = get_strategy("fast")
    fake = FakeTarget(seed=0, grid="distinct")
    space = tuple(c for c in fake.space(EP8) if fake.fit_reason(c, EP8) is None)
    seen = []

    def ev(configs):
        seen.extend(configs)
        return [Ok(fake.time_us(c, EP8, 16)) for c in configs]

    fast.search(SearchSpace(space, None, (space[-1],), axes=AXES), ev, Budget(trials=5))
    assert seen[0] == space[-1] and len(seen) == 5
    empty = fast.search(SearchSpace((), axes=AXES), ev, Budget())
    assert empty.best is None and empty.trials == 0


def test_options_are_checked():
    fast = get_strategy("fast")
    assert make_options(fast, parse_option_text(["top=12", "chunk=4"])).top == 12
    with pytest.raises(UsageError, match="known: top, beam"):
        make_options(fast, {"topp": 3})
    with pytest.raises(UsageError, match="expected a int"):
        make_options(fast, {"top": "many"})
    for bad in ({"seeds": "-1"}, {"patience": "-2"}, {"min_gain": "-0.5"}, {"max_fraction": "nan"}):
        with pytest.raises(UsageError, match=">= 0"):
            make_options(fast, bad)
    assert make_options(fast, {"seeds": "0", "cold_margin": "0"}).seeds == 0
    with pytest.raises(UsageError, match="did you mean"):
        get_strategy("exhaustiv")
    with pytest.raises(UsageError, match="NAME=VALUE"):
        parse_option_text(["top"])


def test_compiled_configs_are_preferred_across_batches():
    """Over a run of batch sizes, preferring configs already compiled (`warm`) compiles fewer
    distinct configs than ignoring it, and every pick stays within 2% of the best."""
    dev = Device.from_gpu(get_gpu("h200"), "bf16")
    fast = get_strategy("fast")
    fake = FakeTarget(seed=1)
    shape = EP8
    space = tuple(c for c in fake.space(shape) if fake.fit_reason(c, shape) is None)
    compiled = {}
    for margin in (0.0, 0.1):
        opts = make_options(fast, {"cold_margin": margin})
        warm: set = set()
        previous = None
        for b in (1, 2, 4, 8, 16, 32, 64, 128):
            def predict(c, _b=b):
                return predict_us(c, shape, _b, dev, fake.smem_bytes(c, shape))

            def ev(configs, _b=b):
                return [Ok(fake.time_us(c, shape, _b)) for c in configs]

            res = fast.search(SearchSpace(space, predict, (previous,) if previous else (),
                                          frozenset(warm), axes=AXES), ev, Budget(), opts)
            best = min(fake.time_us(c, shape, b) for c in space)
            assert res.best_time_us <= 1.02 * best, (margin, b)
            previous = res.best
            warm |= {c for c, _ in res.measured}
        compiled[margin] = len(warm)
    assert compiled[0.1] < compiled[0.0]


def test_boolean_options_parse_words_and_refuse_others():
    fast = get_strategy("fast")
    assert make_options(fast, {"baseline": "0"}).baseline is False
    assert make_options(fast, {"baseline": "yes"}).baseline is True
    with pytest.raises(UsageError, match="baseline"):
        make_options(fast, {"baseline": "maybe"})


def test_the_default_config_is_measured_first_so_no_pick_is_slower():
    """The model ranks the target's default config last, yet it is the fastest: the search
    measures it first and keeps it (and without `baseline`, it is missed)."""
    fast = get_strategy("fast")
    configs = tuple(FakeTarget(seed=2).space(EP8))[:200]
    default = configs[-1]

    def ev(cs):
        return [Ok(1.0 if c == default else 2.0 + i / 1000) for i, c in enumerate(cs)]

    def predict(c):
        return 9.0 if c == default else 1.0

    for on in (True, False):
        res = fast.search(SearchSpace(configs, predict, baseline=default, axes=AXES), ev, Budget(trials=16),
                          make_options(fast, {"baseline": on}))
        assert (res.best == default) is on


def test_only_the_nearest_winners_seed_a_search():
    fast = get_strategy("fast")
    fake = FakeTarget(seed=0, grid="distinct")
    space = tuple(c for c in fake.space(EP8) if fake.fit_reason(c, EP8) is None)
    seeds = space[-5:][::-1]  # nearest batch size's winner first
    seen = []

    def ev(configs):
        seen.append(list(configs))
        return [Ok(fake.time_us(c, EP8, 16)) for c in configs]

    fast.search(SearchSpace(space, None, seeds, axes=AXES), ev, Budget())
    first = seen[0]
    assert first[:3] == list(seeds[:3]) and not set(seeds[3:]) & set(first)
    every = make_options(fast, {"seeds": 0})
    seen.clear()
    fast.search(SearchSpace(space, None, seeds, axes=AXES), ev, Budget(), every)
    assert seen[0][:5] == list(seeds)


def test_a_search_counts_as_seeded_only_by_the_seeds_it_measures():
    """Seeds beyond the `seeds` option are cut off; if none of the measured ones is in the space,
    the search gets the unseeded share of trials, not the seeded one."""
    fast = get_strategy("fast")
    fake = FakeTarget(seed=0, grid="distinct")
    space = tuple(c for c in fake.space(EP8) if fake.fit_reason(c, EP8) is None)
    outside = tuple(c for c in fake.space(EP8) if fake.fit_reason(c, EP8) is not None)[:3]
    opts = make_options(fast, {"seeds": 3})

    def ev(configs):
        return [Ok(fake.time_us(c, EP8, 16)) for c in configs]

    cut = fast.search(SearchSpace(space, None, (*outside, space[0]), axes=AXES), ev, Budget(), opts)
    unseeded = fast.search(SearchSpace(space, None, (), axes=AXES), ev, Budget(), opts)
    seeded = fast.search(SearchSpace(space, None, (space[0],), axes=AXES), ev, Budget(), opts)
    assert cut.trials == unseeded.trials > seeded.trials


def test_patience_stops_a_seeded_search_at_a_local_optimum():
    """With `patience`, a seeded search stops before its cap once chunks stop gaining, and only
    when every one-step neighbour of its best has been measured."""
    dev = Device.from_gpu(get_gpu("h200"), "bf16")
    fast = get_strategy("fast")
    fake = FakeTarget(seed=5)
    space = tuple(c for c in fake.space(EP8) if fake.fit_reason(c, EP8) is None)
    values = {a: sorted({getattr(c, a) for c in space}) for a in AXES}
    index = {tuple(getattr(c, a) for a in AXES): c for c in space}

    def predict(c):
        return predict_us(c, EP8, 64, dev, fake.smem_bytes(c, EP8))

    def ev(configs):
        return [Ok(fake.time_us(c, EP8, 64)) for c in configs]

    seed = min(space, key=lambda c: fake.time_us(c, EP8, 32))  # the batch-32 winner
    sp = SearchSpace(space, predict, (seed,), axes=AXES)
    capped = fast.search(sp, ev, Budget())
    patient = fast.search(sp, ev, Budget(), make_options(fast, {"patience": 2}))
    assert patient.trials < capped.trials
    measured = {c for c, _ in patient.measured}
    assert set(_neighbours(patient.best, AXES, values, index)) <= measured
    unseeded = fast.search(SearchSpace(space, predict, axes=AXES), ev, Budget(),
                           make_options(fast, {"patience": 2}))
    assert unseeded.trials == math.floor(0.08 * len(space))  # no seed: the cap stands


def test_hints_name_the_next_chunk_and_change_no_choice():
    """The fast strategy hints, with each chunk, the chunk after it if this one changes nothing:
    configs not measured yet, some of which the next chunk does ask for (on the H200 replays of
    benchmarks/tune_replay.py, 41% of them); the search measures the same configs either way."""
    fast = get_strategy("fast")
    fake = FakeTarget(seed=6, grid="distinct")
    space = tuple(c for c in fake.space(EP8) if fake.fit_reason(c, EP8) is None)
    dev = Device.from_gpu(get_gpu("h200"), "bf16")

    def predict(c):
        return predict_us(c, EP8, 64, dev, fake.smem_bytes(c, EP8))

    def run(hint, batch=64):
        calls = []

        def ev(configs):
            calls.append(list(configs))
            return [Ok(fake.time_us(c, EP8, batch)) for c in configs]
        found = fast.search(SearchSpace(space, predict, axes=AXES, hint=hint), ev, Budget())
        return [c for c, _ in found.measured], calls

    hints: list[list] = []
    measured, calls = run(hints.append)
    for batch in (1, 4096):  # distinct configs, none of the chunk being measured
        seen: list[list] = []
        _, chunks = run(seen.append, batch)
        assert all(len(set(h)) == len(h) and not set(h) & set(chunks[i + 1])
                   for i, h in enumerate(seen))
    assert measured == run(None)[0]
    assert len(hints) == len(calls) - 1  # every chunk after the first call (top and seeds)
    used = 0
    for i, hint in enumerate(hints):  # given with calls[i + 1], before calls[i + 2]
        assert 0 < len(hint) <= 8 and not set(hint) & {c for call in calls[:i + 2] for c in call}
        used += len(set(hint) & set(calls[i + 2])) if i + 2 < len(calls) else 0
    assert used > 0
