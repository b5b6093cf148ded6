"""Fast search: the performance model ranks the space, measurements correct the model, and the
search spends its few trials where the corrected model and the neighbourhood of the best agree.

1. Measure the winners of the nearest batch sizes (`seeds` of them), the target's default config
   and the model's top few.
2. Repeat until the trial cap: fit a separable correction to the model (a ridge regression of
   log(measured/predicted) on the axis values), re-rank every unmeasured
   config by corrected prediction, and measure one chunk: half the best-ranked one-step
   neighbours of the best configs so far (one axis moved to the next value of its grid), half the
   best-ranked configs anywhere. Configs not compiled yet rank behind compiled ones unless
   predicted `cold_margin` faster (on synthetic landscapes: 16% instead of 22% of the space
   compiled over 18 batch sizes, same picks).
The cap is 8% of the space for a job's first search (no neighbouring winner) and 4.5% once
neighbours' winners seed it: over a run of batch sizes, about a twentieth of an exhaustive sweep's
trials. On the H200 landscapes swept in full (benchmarks/results/tune_v3_journals), 4.5% at the
first batch size left three of the eight batch-1 searches 1.4-3.6% behind the sweep's best; 8% left
none beyond 1%. A later unseeded search (the large batch sizes' segment, tune/schedule.py, starts
at 1024 unseeded) keeps 4.5%: at batch 1024 it left none of the eight beyond 0.5% there. Far batch
sizes' winners are not seeds: a batch 4096 search gains nothing from measuring the batch-1 winner
(`seeds`, 3 by default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tilefit.tune.results import time_of
from tilefit.tune.strategies.base import Budget, Evaluate, SearchResult, SearchSpace, Tracker

@dataclass(frozen=True, slots=True)
class Options:
    top: int = 8  # model-ranked configs measured first
    beam: int = 3  # best configs whose neighbourhoods are explored
    chunk: int = 8  # configs measured at once (parallel compiles)
    max_fraction: float = 0.08  # trial cap as a fraction of the space (no seed measured)
    min_trials: int = 16  # ... but at least this many
    seeded_fraction: float = 0.045  # the cap when neighbouring batches' winners seed the search
    seeds: int = 3  # nearest batch sizes' winners measured first (0: every one given)
    # A seeded search may stop early once `patience` chunks in a row (after `min_trials`) improved
    # the best by less than `min_gain` and the best's one-step neighbours are all measured. Off
    # by default: on the H200 landscapes patience 2 cut seeded searches' trials by ~40% with no
    # pick beyond 1%, but on the synthetic landscapes (tests) 14 of 108 searches ended beyond 2%.
    patience: int = 0
    min_gain: float = 0.01
    ridge: float = 1.0  # regularisation of the model correction
    # A config not compiled yet (not in space.warm) must be predicted this much faster than a
    # compiled one to be tried first: compiles, not timings, dominate a GPU run's cost.
    cold_margin: float = 0.1
    baseline: bool = True  # measure the target's default config first (False: as before 2026-11-30)


def _neighbours(config: Any, axes: tuple[str, ...], values: dict[str, list[int]],
                index: dict[tuple[int, ...], Any]) -> list[Any]:
    out = []
    base = [getattr(config, a) for a in axes]
    for i, axis in enumerate(axes):
        vals = values[axis]
        j = vals.index(base[i])
        for step in (-1, 1):
            if 0 <= j + step < len(vals):
                cand = list(base)
                cand[i] = vals[j + step]
                hit = index.get(tuple(cand))
                if hit is not None:
                    out.append(hit)
    return out


def _terms(c: Any, axes: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """The correction terms of a config: one per axis value (separable: a pair term for the tile
    shape was tried and ranked worse on synthetic landscapes, the pair confounds its axes)."""
    return [(a, getattr(c, a)) for a in axes]


def _corrections(t: Tracker, predicted: dict[Any, float], ridge: float,
                 axes: tuple[str, ...]) -> dict[tuple[Any, ...], float]:
    """Per-axis-value corrections to log(predicted): a ridge regression of log(measured /
    predicted) on one-hot axis values. Joint fitting matters: measured configs cluster around
    the best, so per-value means would credit one axis with another's effect."""
    import numpy as np

    rows = [(c, math.log(time_of(r) / predicted[c])) for c, r in t.results.items()
            if time_of(r) < math.inf and predicted[c] > 0]
    if len(rows) < 2:
        return {}
    terms = sorted({k for c, _ in rows for k in _terms(c, axes)})
    col = {k: i for i, k in enumerate(terms)}
    x = np.zeros((len(rows), len(terms)))
    y = np.array([v for _, v in rows])
    for i, (c, _) in enumerate(rows):
        for k in _terms(c, axes):
            x[i, col[k]] = 1.0
    y = y - y.mean()
    w = np.linalg.solve(x.T @ x + ridge * np.eye(len(terms)), x.T @ y)
    return {k: float(w[i]) for k, i in col.items()}


def search(space: SearchSpace, evaluate: Evaluate, budget: Budget,
           options: Options | None = None) -> SearchResult:
    opts = options or Options()
    configs = list(space.configs)
    if not configs:
        return SearchResult(None, float("inf"), 0, ())
    if not space.axes:
        raise ValueError("the fast strategy needs the space's axes (the target's config_space.axes)")
    axes = space.axes
    known = set(configs)
    seeds = space.seeds[:opts.seeds] if opts.seeds > 0 else space.seeds
    # Seeded only by the seeds this search measures: a later seed that is cut off does not shrink it.
    seeded = any(c in known for c in seeds)
    fraction = opts.seeded_fraction if seeded or not space.first else opts.max_fraction
    cap = max(opts.min_trials, math.floor(fraction * len(configs)))
    limit = cap if budget.trials is None else min(cap, budget.trials)
    t = Tracker(evaluate, Budget(limit, budget.seconds, budget.started))

    predicted = {c: max(space.predict(c), 1e-9) for c in configs} if space.predict else \
        {c: 1.0 for c in configs}
    order = sorted(configs, key=lambda c: (predicted[c], c))
    values = {a: sorted({getattr(c, a) for c in configs}) for a in axes}
    index = {tuple(getattr(c, a) for a in axes): c for c in configs}

    warm = space.warm
    compile_cost = math.log1p(opts.cold_margin)
    first = [c for c in (*seeds, space.baseline if opts.baseline else None)
             if c is not None and c in known]
    t.measure(first + order[:opts.top])
    stale = 0  # chunks in a row without a gain of min_gain
    while not t.exhausted:
        if seeded and opts.patience and stale >= opts.patience and len(t.results) >= opts.min_trials:
            # Stop only at a local optimum: the best's one-step neighbours all measured (a
            # neighbour along one axis is where a stalled search most often left the best).
            best = t.best()[0]
            hood = [n for n in _neighbours(best, axes, values, index) if n not in t.results]
            if not hood or not t.measure(hood) or t.best()[0] == best:
                break
            stale = 0
            continue
        before = t.best()[1]
        corr = _corrections(t, predicted, opts.ridge, axes)

        def score(c: Any) -> tuple[float, Any]:
            cost = 0.0 if c in warm else compile_cost
            return (math.log(predicted[c]) + sum(corr.get(k, 0.0) for k in _terms(c, axes)) + cost, c)

        ranked = sorted((c for c in t.results if time_of(t.results[c]) < math.inf),
                        key=lambda c: (time_of(t.results[c]), c))
        near: list[Any] = []
        for c in ranked[:opts.beam]:
            near += [n for n in _neighbours(c, axes, values, index) if n not in t.results]
        near = sorted(dict.fromkeys(near), key=score)
        half = max(1, opts.chunk // 2)
        anywhere = sorted((c for c in configs if c not in t.results and c not in near[:half]),
                          key=score)
        pick = near[:half] + anywhere[:opts.chunk - len(near[:half])]
        if space.hint is not None:
            # The chunk after this one if this one changes nothing: compiled meanwhile, it is
            # warm when asked for (a hint: it changes no choice).
            near_next = [c for c in near if c not in pick][:half]
            rest = [c for c in anywhere if c not in pick and c not in near_next]
            space.hint(near_next + rest[:opts.chunk - len(near_next)])
        if not t.measure(pick):
            break
        stale = 0 if t.best()[1] < before / (1.0 + opts.min_gain) else stale + 1
    return t.result()
