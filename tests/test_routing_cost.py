"""Routing statistics cost what the work costs, not trials x experts: both exact samplers draw the
same distribution, real models keep the sweep (and their figures), and sizes past any real model
are refused in a moment with the reason."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from tilefit.errors import UsageError
from tilefit.layout.routing import _sweep, _token_draw, routing_stats, sampler_for
from tilefit.models import load_model

MIXTRAL = {"num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": 4096, "intermediate_size": 14336,
           "num_hidden_layers": 32}


def test_a_million_experts_is_refused_at_once(cli, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**MIXTRAL, "num_local_experts": 1_000_000}))
    start = time.monotonic()
    r = cli("plan", "--model", str(tmp_path), "--gpu", "h100")
    assert time.monotonic() - start < 1.0
    assert r.code == 2 and r.err.count("\n") == 1
    assert "num_local_experts = 1,000,000 is out of range (expected 1..2,048; the most of any public MoE" in r.err


def test_top_k_past_any_real_model_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**MIXTRAL, "num_local_experts": 256,
                                                      "num_experts_per_tok": 200}))
    with pytest.raises(UsageError, match="num_experts_per_tok = 200 is out of range .expected 1..16; served"):
        load_model(str(tmp_path))
    with pytest.raises(UsageError, match="past any real MoE"):
        routing_stats(16, 1_000_000, 8, 1)
    with pytest.raises(UsageError, match="top-k 17"):
        routing_stats(16, 256, 17, 1)


def test_every_catalogued_model_keeps_the_sweep():
    from tilefit.models.catalog import _index, preset

    for name in set(_index().values()):
        m = preset(name)
        for batch in (1, 16, 4096):
            assert sampler_for(batch, m.num_experts, m.top_k) == "sweep", name


def test_largest_allowed_model_small_batch_is_quick():
    """2,048 experts, top-16 at batch 16: the token draw costs B*k per trial, not E*k."""
    assert sampler_for(16, 2048, 16) == "tokens"
    start = time.monotonic()
    s = routing_stats(16, 2048, 16, 8)
    assert time.monotonic() - start < 1.0
    assert s.tokens_per_expert_mean == 16 * 16 / 2048 and 1 <= s.tokens_per_expert_max_mean <= 16
    assert routing_stats.__wrapped__(16, 2048, 16, 8) == s  # same seed, same figures


@pytest.mark.parametrize("b, e, k", [(24, 64, 4), (200, 96, 6), (3, 40, 5)])
def test_both_samplers_draw_the_same_distribution(b, e, k):
    """Marginals are Binomial(B, k/E); the busiest expert's distribution agrees between samplers
    (two-sample comparison of 4,000 trials each: means within 4 standard errors, histograms
    within a total-variation distance that 4,000 samples reach by chance with tiny probability)."""
    trials = 4000
    a = _sweep(np.random.default_rng(1), trials, b, e, k)
    t = _token_draw(np.random.default_rng(2), trials, b, e, k)
    for counts in (a, t):
        assert (counts.sum(axis=1) == b * k).all()  # every token routed to exactly k experts
        assert counts.max() <= b  # ... distinct ones: no expert gets a token twice
        assert abs(counts.mean() - b * k / e) < 4 * np.sqrt(b * k / e * (1 - k / e) / counts.size)
    ma, mt = a.max(axis=1), t.max(axis=1)
    se = np.sqrt(ma.var() / trials + mt.var() / trials)
    assert abs(ma.mean() - mt.mean()) < 4 * se + 1e-9
    top = max(ma.max(), mt.max()) + 1
    tv = 0.5 * np.abs(np.bincount(ma, minlength=top) / trials - np.bincount(mt, minlength=top) / trials).sum()
    assert tv < 0.06


def test_token_draw_keeps_each_tokens_experts_distinct():
    # One token, k of E: every trial has exactly k experts with one token, none with two.
    counts = _token_draw(np.random.default_rng(0), 500, 1, 64, 8)
    assert (counts.max(axis=1) == 1).all() and (counts.sum(axis=1) == 8).all()
