"""Types every strategy shares: the space it searches, its budget, and what it returns.

`evaluate(configs) -> results` (same order) measures configs, possibly in parallel, and answers
already-measured ones from the journal; a strategy counts each distinct config it asks for once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilefit.tune.results import Result, time_of

Evaluate = Callable[[Sequence[Any]], list[Result]]


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """What a strategy searches. `axes` are the config attributes a strategy may move along
    (the target's `config_space.axes`); strategies never name a kernel's parameters."""

    configs: tuple[Any, ...]  # configs that fit the device (after the SMEM prefilter)
    predict: Callable[[Any], float] | None = None  # performance-model time, for ranking
    seeds: tuple[Any, ...] = ()  # winners at neighbouring batch sizes, best first
    warm: frozenset[Any] = frozenset()  # configs already compiled (cheap to time)
    baseline: Any = None  # the target's default config: measured first, so no pick is slower
    axes: tuple[str, ...] = ()  # config attributes, each an ordered grid axis
    # Configs the strategy may ask for next: compiled ahead where workers are free (a scheduling
    # hint; what it is told changes no result).
    hint: Callable[[Sequence[Any]], None] | None = None
    first: bool = True  # its job's first search (the smallest batch size; fast.py: a larger cap)


@dataclass(slots=True)
class Budget:
    trials: int | None = None
    seconds: float | None = None
    started: float = field(default_factory=time.monotonic)

    def left(self, trials_done: int) -> int | None:
        """Trials still allowed (None: unlimited); 0 once the time is up."""
        if self.seconds is not None and time.monotonic() - self.started >= self.seconds:
            return 0
        return None if self.trials is None else max(0, self.trials - trials_done)


@dataclass(frozen=True, slots=True)
class SearchResult:
    best: Any | None
    best_time_us: float
    trials: int
    measured: tuple[tuple[Any, Result], ...]

    def ranked(self) -> list[tuple[Any, Result]]:
        return sorted(self.measured, key=lambda cr: (time_of(cr[1]), cr[0]))


class Tracker:
    """Bookkeeping shared by strategies: what was measured, the best so far, the budget."""

    def __init__(self, evaluate: Evaluate, budget: Budget):
        self._evaluate = evaluate
        self.budget = budget
        self.results: dict[Any, Result] = {}

    def measure(self, configs: Sequence[Any]) -> list[Any]:
        """Measure those of `configs` not yet measured, within budget; returns the ones measured."""
        todo = [c for c in dict.fromkeys(configs) if c not in self.results]
        left = self.budget.left(len(self.results))
        if left is not None:
            # Out of budget before the first trial: still measure one config (the strategy's
            # first choice), so that every batch size gets a measured config.
            todo = todo[:max(left, 0 if self.results else 1)]
        if todo:
            for c, r in zip(todo, self._evaluate(todo)):
                self.results[c] = r
        return todo

    @property
    def exhausted(self) -> bool:
        return self.budget.left(len(self.results)) == 0

    def best(self) -> tuple[Any | None, float]:
        if not self.results:
            return None, float("inf")
        c = min(self.results, key=lambda c: (time_of(self.results[c]), c))
        return c, time_of(self.results[c])

    def result(self) -> SearchResult:
        best, t = self.best()
        return SearchResult(best if t < float("inf") else None, t, len(self.results),
                            tuple(self.results.items()))
