"""Finalists re-timed in quiet: a search's timings are taken while compile workers fill the CPU,
and a kernel of 15 us timed from the host can read 35 us then (vLLM-style event timing puts the
host launch inside the figure). So after each search the run re-times its best few configs, the
engine's default, the exhaustive sweep's best few (where one ran) and any configs given from
another run, with no compile running on the host, interleaved over several rounds (each round
in a rotated order; within a round the finalists take turns replay by replay or launch by launch,
TuneRequest.interleave, so a change of the GPU's clock meets them all alike), and picks by the
median of the rounds. Every round is a journal line of its
own (shape key "retime<r>:..."), beside the search's lines, so a resumed run re-times nothing twice.

The pick is the fastest median of configs the run measured side by side, so it is never slower
than the best config the search measured once both are re-timed together.

Rounds stop early for configs that are clearly out: after the first round, a finalist whose
fastest round is over `drop` (3%) slower than the leading median leaves the rounds, and the rounds
end when one finalist is left. The pick is made among the finalists still in at the end: they ran
the same rounds. (A GPU that warms up over the rounds runs a 500 us kernel 4-8% slower in the last
rounds than in the first: the median of a finalist that left after two rounds was then lower than
the leaders' five-round medians, and the H200 TP8 run of session 4 picked such a config, 5% slower
than the leader in the rounds both ran.)

Three rounds, not five: on the 288 rows of the eight H200 runs of session 4
(benchmarks/results/tune_v4), the first three of the recorded rounds with the drop after round one
pick the same configs, or configs within 0.66% of them in the rounds both ran (two rows at batch
4096, where one config's rounds spread 0.7-0.9% around their median), for 58% of the timings.
Two rounds left four rows beyond 0.5% (worst 1.9%), one round seven.

Three rounds at batch sizes timed with CUDA events too. Session 5's H200 runs, on 3 rounds, saw
the same tile with another GROUP_SIZE_M read 4-8% apart from one round to the next at batch 4096
(a fast and a slow mode of the GPU), and sessions 5-8 re-timed those batch sizes on 5 rounds.
Since session 6 a round's finalists are timed in turns (TuneRequest.interleave), so a mode meets
them all alike: on the 88 event-timed rows of sessions 7 and 8 that a check re-timed
(benchmarks/results/tune_v7, tune_v8; `benchmarks/tune_pick_rules.py --rounds 3`), the first 3 of
the 5 recorded rounds pick configs as good as all 5 (worst pick / best 1.0094 either way, over all
176 checked rows). Five rounds there cost the H200's TP8 bf16 run 9.1 s of its 41 s of GPU work
(session 9).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tilefit.tune.report import Retimed
from tilefit.tune.results import Ok, Result, time_of
from tilefit.tune.targets.base import TuneShape

FINALISTS = 4  # best configs of each search re-timed
ROUNDS = 3  # interleaved rounds; the median is kept
DROP = 0.03  # after each round, finalists whose fastest round is this far behind the lead stop


def gather(groups: Iterable[tuple[str, Sequence[tuple[Any, Result | None]]]], top: int
           ) -> list[tuple[Any, tuple[str, ...], float | None]]:
    """(config, sources, best search time) for the `top` fastest measured configs of the
    "fast" and "exhaustive" groups and every config of the others ("default", "given"; a result
    of None: not measured in this run); a config in several groups is one finalist."""
    found: dict[Any, tuple[list[str], float | None]] = {}
    for source, measured in groups:
        ok = [(c, r) for c, r in measured if r is None or isinstance(r, Ok)]
        ok.sort(key=lambda cr: (time_of(cr[1]) if cr[1] is not None else float("inf"), cr[0]))
        for c, r in ok[:top] if source in ("fast", "exhaustive") else ok:
            sources, best = found.setdefault(c, ([], None))
            if source not in sources:
                sources.append(source)
            if r is not None:
                t = time_of(r)
                found[c] = (sources, t if best is None else min(best, t))
    return [(c, tuple(s), t) for c, (s, t) in found.items()]


def retime(evaluator: Any, shape: TuneShape, batch: int,
           finalists: Sequence[tuple[Any, tuple[str, ...], float | None]],
           rounds: int = ROUNDS, drop: float = DROP) -> list[Retimed]:
    """Each finalist timed once per round, in quiet, until it is out (see the module docstring;
    `drop` 0: every finalist runs every round)."""
    configs = [c for c, _, _ in finalists]
    for c in configs:  # a config given from another run may not be compiled yet: not in quiet
        evaluator.compiled(shape, c)
    times: dict[Any, list[float]] = {c: [] for c in configs}
    live = list(configs)
    with evaluator.quiet():
        for r in range(rounds):
            shift = r % max(1, len(live))
            order, key = live[shift:] + live[:shift], f"retime{r}:{shape.key()}"
            if getattr(evaluator, "interleave", False):  # the round's configs timed in turns
                results = evaluator.measure_together(shape, batch, order, key)
            else:
                results = [evaluator.measure(shape, batch, c, key=key) for c in order]
            for c, result in zip(order, results):
                times[c].append(time_of(result))
            if drop > 0 and live:
                lead = min(Retimed(c, tuple(times[c]), None, ()).median_us for c in live)
                live = [c for c in live if min(times[c]) <= (1.0 + drop) * lead]
                if len(live) <= 1:
                    break
    return [Retimed(c, tuple(times[c]), t, sources) for c, sources, t in finalists]


def ranked(retimed: Sequence[Retimed]) -> list[Retimed]:
    """Best first (Retimed.rank_key: the finalists still in at the last round, by median)."""
    return sorted(retimed, key=lambda f: f.rank_key)
