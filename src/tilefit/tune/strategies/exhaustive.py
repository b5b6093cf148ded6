"""Exhaustive search: measure every config of the space (in chunks, so compiles run in
parallel), within the budget. The reference the fast strategy is judged against."""

from __future__ import annotations

from dataclasses import dataclass

from tilefit.tune.strategies.base import Budget, Evaluate, SearchResult, SearchSpace, Tracker


@dataclass(frozen=True, slots=True)
class Options:
    chunk: int = 64  # configs handed to the workers at once


def search(space: SearchSpace, evaluate: Evaluate, budget: Budget,
           options: Options | None = None) -> SearchResult:
    opts = options or Options()
    t = Tracker(evaluate, budget)
    configs = list(space.configs)
    for i in range(0, len(configs), max(1, opts.chunk)):
        if t.exhausted:
            break
        t.measure(configs[i:i + opts.chunk])
    return t.result()
