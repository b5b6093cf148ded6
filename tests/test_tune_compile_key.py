"""One compile per compile key: tilefit's kernel takes GROUP_SIZE_M as a runtime argument, so a
tile's GROUP_SIZE_M values share a compiled kernel, and the tuner compiles each tile once."""

from __future__ import annotations

import os

import pytest

from tilefit.kernels.triton_moe.config import MoEConfig
from tilefit.tune.journal import read_entries
from tilefit.tune.run import JOURNAL, TuneRequest, tune
from tilefit.tune.targets.base import MOE_SPACE, TargetSpec, TuneShape
from tilefit.tune.targets.engines import VllmTarget
from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

LAYER = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)  # GLM-5 under EP8


def test_group_size_m_values_are_one_specialisation_of_the_kernel():
    """What makes the sharing true: the oracle's (and so the launch's) signature, constexprs and
    attributes are the same for every GROUP_SIZE_M, so Triton's cache key is too."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("interpreter mode replaces @triton.jit functions")
    from tilefit.kernels.triton_moe.kernel import fused_moe_kernel
    from tilefit.kernels.triton_moe.spec import oracle_args
    from tilefit.oracles.triton_compile import _specialise

    for dtype in ("bf16", "fp8-block"):
        seen = set()
        for group_m in (1, 16, 32, 64):
            args, constexprs = oracle_args(MoEConfig(64, 128, 64, group_m, 4, 3), dtype)
            assert "GROUP_SIZE_M" not in constexprs and args["GROUP_SIZE_M"] == group_m
            sig, consts, attrs = _specialise(fused_moe_kernel, args, constexprs)
            seen.add(repr((sorted(sig.items()), sorted(consts.items()), sorted(attrs.items()))))
        assert len(seen) == 1, dtype


def test_the_targets_compile_keys():
    c = MoEConfig(64, 128, 64, 32, 4, 3)
    assert TilefitMoETarget(gpu="h200").compile_key(c) == MoEConfig(64, 128, 64, 1, 4, 3)
    # The engines' own kernels take GROUP_SIZE_M as a constexpr: every config compiles alone.
    assert VllmTarget.compile_key(object.__new__(VllmTarget), c) == c


def _compiles(out) -> list:
    """(GEMM shape, config) of every compile line."""
    return [(e.shape, e.config) for e in read_entries(out / JOURNAL, MOE_SPACE.from_dict)
            if e.batch is None]


def _measured(out) -> set:
    """(GEMM shape, config) of every timing (search and re-timing rounds: 'retimeN:<shape>')."""
    return {(e.shape.split(":", 1)[1] if e.shape.startswith("retime") else e.shape, e.config)
            for e in read_entries(out / JOURNAL, MOE_SPACE.from_dict)
            if e.batch is not None and not e.shape.startswith("check:")}


def _tile(c: MoEConfig) -> tuple[int, ...]:
    return c.values()[:3] + c.values()[4:]


@pytest.mark.parametrize("shared", [True, False])
def test_a_run_compiles_each_compile_key_once(tmp_path, shared):
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=3, shared_group_m=shared,
                         compile_sleep_s=0.005)
    report = tune(TuneRequest(spec, (LAYER,), (1, 64, 1024), tmp_path, "h200", "NVIDIA H200",
                              compile_workers=2, compile_timeout_s=20.0, run_timeout_s=20.0,
                              rounds=2, trials=24))
    assert all(row.config is not None for row in report.rows)
    compiles, measured = _compiles(tmp_path), _measured(tmp_path)
    assert len(compiles) == len(set(compiles))  # never twice
    if shared:
        assert all(c.group_m == 1 for _, c in compiles)
        # Prefetches may add tiles never measured; every measured tile was compiled once.
        assert {(s, _tile(c)) for s, c in compiles} >= {(s, _tile(c)) for s, c in measured}
        assert any(c.group_m != 1 for _, c in measured)  # other values timed, not compiled
    else:
        assert set(compiles) >= measured
