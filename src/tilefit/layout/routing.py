"""Token assignments per GPU and per expert under uniform random top-k routing.

Each of B tokens picks k distinct experts uniformly at random out of E. Means are exact. The busiest
expert and the busiest GPU come from an exact Monte-Carlo sampler with a fixed seed: it draws the
whole count vector expert by expert, tracking how many tokens still need r more experts (a token
needing r of the R experts left takes the next one with probability r/R), so distinctness per token
is kept exactly and one trial costs E vectorised binomial draws instead of B*k choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from tilefit.errors import UsageError

TRIALS = 1000
SEED = 0
MAX_BATCH = 10_000_000


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


@lru_cache(maxsize=256)
def routing_stats(batch: int, num_experts: int, top_k: int, ep: int, *,
                  trials: int = TRIALS, seed: int = SEED) -> RoutingStats:
    if isinstance(batch, bool) or not isinstance(batch, int) or not 0 < batch <= MAX_BATCH:
        raise UsageError(f"batch sizes must be integers in 1..{MAX_BATCH:,}, got {batch!r}")
    if num_experts % ep:
        raise UsageError(f"ep {ep} does not divide {num_experts} experts")
    import numpy as np

    e, k, b = num_experts, top_k, batch
    local = e // ep
    rng = np.random.default_rng(seed)
    # need[t, r-1] = tokens in trial t that still need r experts (r = 1..k)
    need = np.zeros((trials, k), dtype=np.int64)
    need[:, k - 1] = b
    r = np.arange(1, k + 1)
    counts = np.empty((trials, e), dtype=np.int64)
    for j in range(e):
        remaining = e - j
        take = rng.binomial(need, np.minimum(r / remaining, 1.0))
        counts[:, j] = take.sum(axis=1)
        need -= take
        need[:, :-1] += take[:, 1:]
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
