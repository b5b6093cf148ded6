"""Token assignments per GPU and per expert under uniform random top-k routing.

Each of B tokens picks k distinct experts uniformly at random out of E. Means are exact. The busiest
expert and the busiest GPU come from an exact Monte-Carlo sampler with a fixed seed, one of two
that draw the same distribution, whichever costs less (work per trial, T trials):

- the expert sweep (E*k per trial, independent of B): the whole count vector expert by expert,
  tracking how many tokens still need r more experts (a token needing r of the R experts left takes
  the next one with probability r/R), so distinctness per token is kept exactly;
- the token draw (B*k per trial, independent of E): each token's k experts drawn directly, a token
  whose draw repeats an expert drawn again (rejection keeps every k-subset equally likely).

Every catalogued model (E*k <= SWEEP_ALWAYS) uses the sweep, so its figures do not depend on the
batch-size rule. Sizes past any real model (models.types.MAX_EXPERTS, MAX_TOP_K) are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tilefit.errors import UsageError
from tilefit.models.types import MAX_EXPERTS, MAX_TOP_K

TRIALS = 1000
SEED = 0
MAX_BATCH = 10_000_000
SWEEP_ALWAYS = 8192  # E*k up to this: the sweep costs ~0.3 s for 1,000 trials whatever the batch
_DRAWS_PER_CHUNK = 2_000_000  # token draws held at once (16 MB of int64)


@dataclass(frozen=True, slots=True)
class RoutingStats:
    batch: int  # tokens entering the MoE layer (all GPUs together)
    assignments_per_gpu_mean: float  # (token, expert) pairs one GPU computes: B*k/ep
    assignments_per_gpu_max_mean: float  # busiest GPU, mean over trials
    assignments_per_gpu_p99: int  # busiest GPU, 99th percentile over trials
    tokens_per_expert_mean: float  # B*k/E
    tokens_per_expert_max_mean: float  # busiest expert of the layer, mean over trials
    tokens_per_expert_p99: int  # busiest expert of the layer, 99th percentile over trials
    active_experts_per_gpu_mean: float  # local experts with >= 1 token: L * (1 - (1 - k/E)^B)
    method: str


def expected_active_experts(batch: float, local: int, num_experts: int, top_k: int) -> float:
    """Expected experts among `local` that receive at least one of `batch` tokens, each token picking
    `top_k` of `num_experts` uniformly: local * (1 - (1 - k/E)^B). Exact."""
    return local * (1.0 - (1.0 - top_k / num_experts) ** batch)


def _percentile(sorted_values: list[int], q: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    idx = max(0, min(len(sorted_values) - 1, -(-len(sorted_values) * q // 100) - 1))
    return int(sorted_values[int(idx)])


def _sweep(rng: Any, trials: int, b: int, e: int, k: int) -> Any:
    """[T, E] counts, expert by expert; need[t, r-1] = tokens of trial t still needing r experts."""
    import numpy as np

    need = np.zeros((trials, k), dtype=np.int64)
    need[:, k - 1] = b
    r = np.arange(1, k + 1)
    counts = np.empty((trials, e), dtype=np.int64)
    for j in range(e):
        take = rng.binomial(need, np.minimum(r / (e - j), 1.0))
        counts[:, j] = take.sum(axis=1)
        need -= take
        need[:, :-1] += take[:, 1:]
    return counts


def _token_draw(rng: Any, trials: int, b: int, e: int, k: int) -> Any:
    """[T, E] counts from each token's k distinct experts, a few trials at a time."""
    import numpy as np

    counts = np.empty((trials, e), dtype=np.int64)
    chunk = max(1, _DRAWS_PER_CHUNK // (b * k))
    for t0 in range(0, trials, chunk):
        n = min(chunk, trials - t0)
        picks = rng.integers(0, e, size=(n * b, k))  # [n*B, k]
        while k > 1:
            ordered = np.sort(picks, axis=1)
            repeated = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
            if not repeated.size:
                break
            picks[repeated] = rng.integers(0, e, size=(repeated.size, k))
        flat = (picks.reshape(n, b * k) + np.arange(n)[:, None] * e).ravel()
        counts[t0:t0 + n] = np.bincount(flat, minlength=n * e).reshape(n, e)
    return counts


def sampler_for(batch: int, num_experts: int, top_k: int) -> str:
    """'sweep' or 'tokens': the sweep for every real model, else the cheaper per trial. The token
    draw needs k*k <= E so that a token's draw rarely repeats (acceptance >= exp(-1/2))."""
    e, k = num_experts, top_k
    if e * k <= SWEEP_ALWAYS or k * k > e:
        return "sweep"
    return "tokens" if batch < e else "sweep"


def check_model_size(num_experts: int, top_k: int) -> None:
    """UsageError for sizes past any real model (the statistics would cost E*k per trial)."""
    if not 2 <= num_experts <= MAX_EXPERTS:
        raise UsageError(f"{num_experts:,} experts is past any real MoE (at most {MAX_EXPERTS:,}: "
                         f"Switch Transformer's 2,048; served decoder MoEs have up to 512)")
    if not 1 <= top_k <= min(MAX_TOP_K, num_experts):
        raise UsageError(f"top-k {top_k:,} is past any real MoE (1..{min(MAX_TOP_K, num_experts)}; "
                         f"served MoEs route a token to at most 10 experts)")


@lru_cache(maxsize=256)
def routing_stats(batch: int, num_experts: int, top_k: int, ep: int, *,
                  trials: int = TRIALS, seed: int = SEED) -> RoutingStats:
    if isinstance(batch, bool) or not isinstance(batch, int) or not 0 < batch <= MAX_BATCH:
        raise UsageError(f"batch sizes must be integers in 1..{MAX_BATCH:,}, got {batch!r}")
    check_model_size(num_experts, top_k)
    if num_experts % ep:
        raise UsageError(f"ep {ep} does not divide {num_experts} experts")
    import numpy as np

    e, k, b = num_experts, top_k, batch
    local = e // ep
    rng = np.random.default_rng(seed)
    method = sampler_for(b, e, k)
    counts = (_sweep if method == "sweep" else _token_draw)(rng, trials, b, e, k)  # [T, E]
    per_gpu = counts.reshape(trials, ep, local).sum(axis=2)
    busiest_gpu = sorted(per_gpu.max(axis=1).tolist())
    busiest_gpu_mean = sum(busiest_gpu) / trials
    busiest_expert = counts.max(axis=1)
    return RoutingStats(
        batch=b,
        assignments_per_gpu_mean=b * k / ep,
        assignments_per_gpu_max_mean=busiest_gpu_mean,
        assignments_per_gpu_p99=_percentile(busiest_gpu, 99),
        tokens_per_expert_mean=b * k / e,
        tokens_per_expert_max_mean=float(busiest_expert.mean()),
        tokens_per_expert_p99=_percentile(sorted(busiest_expert.tolist()), 99),
        active_experts_per_gpu_mean=expected_active_experts(b, local, e, k),
        method=f"means exact; busiest expert/GPU: Monte Carlo over {trials} trials (seed {seed}) of an "
               f"exact per-trial sampler, so tail percentiles carry sampling noise",
    )
