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


# GLM-5's per-GPU GEMM widths: EP8 (2048) and TP8 (256), bf16 and fp8-block. TP8's gemm2 has
# K = 256, so its fp8 scale strides (K/128 = 2) are ints Triton specialises on without finding a
# divisor of 16. Eight experts (all local) stand for 32 or 256: the specialisation sees N, K and
# strides (multiples of N*K), divisibility and size class only, and the CPU weights stay small.
LAUNCHES = [(TuneShape(gemm, 8, 6144, w, 8, dtype), batch, MoEConfig(bm, 128, 128, 1, 4, 3))
            for gemm in ("gemm1", "gemm2") for w in (2048, 256)
            for dtype in ("bf16", "fp8-block") for batch, bm in ((1, 16), (1024, 64))]


@pytest.mark.parametrize("shape,batch,config", LAUNCHES, ids=lambda v: getattr(v, "key", str)()
                         if isinstance(v, TuneShape) else str(v))
def test_the_compile_pools_source_key_is_the_launchs(monkeypatch, shape, batch, config):
    """The compile pool's compile (the oracle's signature, constants and attrs) must make the
    Triton source key the GPU worker's launch makes, or the GPU worker compiles the kernel again
    at its first probe (session 8, H200: ~73 such compiles, ~45 s of a TP8 fp8-block run). The
    launch's side is Triton's own binder and _pack_args on the target's real arguments (CPU
    tensors of the same shapes and strides)."""
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("interpreter mode replaces @triton.jit functions")
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    import tilefit.kernels.triton_moe.kernel as kernel_module
    from tilefit.kernels.triton_moe.spec import oracle_args
    from tilefit.oracles.triton_compile import _specialise

    fn = kernel_module.fused_moe_kernel
    launched: dict = {}

    class Capture:  # stands in for the kernel: keeps the launch's arguments
        def __getitem__(self, grid):
            return lambda *a, **kw: launched.update(args=a, kwargs=kw)

    monkeypatch.setattr(kernel_module, "fused_moe_kernel", Capture())
    TilefitMoETarget(gpu="h200", device="cpu")._launch(config, shape, batch)()
    backend = make_backend(GPUTarget("cuda", 90, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, options = binder(*launched["args"], **launched["kwargs"])
    _, sig, consts, attrs = fn._pack_args(backend, options, bound, spec, options)
    launch_key = ASTSource(fn, sig, consts, attrs).hash()

    n, k = shape.nk
    args, constexprs = oracle_args(config, shape.dtype, gemm=shape.gemm,
                                   shape={"N": n, "K": k, "E": shape.experts, "topk": shape.topk})
    o_sig, o_consts, o_attrs = _specialise(fn, args, constexprs)
    assert ASTSource(fn, o_sig, o_consts, o_attrs).hash() == launch_key, (attrs, o_attrs)
