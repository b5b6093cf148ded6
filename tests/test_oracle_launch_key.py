"""The Triton compiler oracle specialises a kernel's arguments as Triton's own launcher does, so a
compile it makes (the tuner's compile pool) has the launch's Triton source key: checked against
Triton's binder and _pack_args on real arguments (CPU tensors), for every kind of argument the
launcher treats differently (session 8 found one kind it got wrong: an int not divisible by 16)."""

from __future__ import annotations

import os

import pytest

from tilefit.oracles.triton_compile import Pointer, _specialise


def _launch_key(fn, *args, **kwargs) -> str:
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", 90, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, options = binder(*args, **kwargs)
    _, sig, consts, attrs = fn._pack_args(backend, options, bound, spec, options)
    return ASTSource(fn, sig, consts, attrs).hash()


@pytest.mark.parametrize("n16,n2,one,n64,one64", [(32, 2, 1, 64, 1), (48, 18, 1, 7, 16)])
def test_every_kind_of_argument_gets_the_launchs_key(n16, n2, one, n64, one64):
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("interpreter mode replaces @triton.jit functions")
    from triton.compiler.compiler import ASTSource

    from oracle_toy_kernel import toy_kernel

    t = torch.zeros(64)
    assert t.data_ptr() % 16 == 0 and t[1:].data_ptr() % 16 != 0
    launch = _launch_key(toy_kernel, t, t[1:], t, t[1:], n16, n2, one, 5, n64, one64, 0.5,
                         BLOCK=128)
    args = dict(p=Pointer("fp32"), p_unaligned=Pointer("fp32", aligned=False),
                p_nospec=Pointer("fp32"), p_noalign=Pointer("fp32", aligned=False), n16=n16, n2=n2,
                one=one, n_nospec=5, n64=n64, one64=one64, x=0.5)
    sig, consts, attrs = _specialise(toy_kernel, args, {"BLOCK": 128})
    assert ASTSource(toy_kernel, sig, consts, attrs).hash() == launch, (sig, consts, attrs)


def test_tuple_arguments_are_refused():
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("interpreter mode replaces @triton.jit functions")
    from tilefit.errors import UsageError

    from oracle_toy_kernel import toy_kernel

    args = dict(p=Pointer("fp32"), p_unaligned=Pointer("fp32"), p_nospec=Pointer("fp32"),
                p_noalign=Pointer("fp32"), n16=(16, 32), n2=2, one=1, n_nospec=5, n64=64,
                one64=1, x=0.5)
    with pytest.raises(UsageError, match="tuple"):
        _specialise(toy_kernel, args, {"BLOCK": 128})


SCALARS = [0, 1, 2, 16, 32, -16, -1, 2**31 - 1, 2**31, 2**31 + 16, 2**32, 2**63 - 1, 2**63,
           2**63 + 16, 2**64 - 1, -2**31, -2**31 - 1, -2**31 - 16, True, False, 0.5, 1.0, None]


def test_scalars_specialise_as_tritons_native_function():
    """The oracle's own scalar rule (no torch import) against Triton's native one, every flag."""
    pytest.importorskip("triton")
    pytest.importorskip("torch")  # the native function imports it
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    from tilefit.oracles.triton_compile import _scalar

    for value in SCALARS:
        for is_const in (False, True):
            for specialise in (True, False):
                for align in (True, False):
                    assert _scalar(value, specialise, align) == native_specialize_impl(
                        BaseBackend, value, is_const, specialise, align), (value, specialise, align)
    assert _scalar("text", True, True) is None  # left to Triton's function


def test_a_compile_worker_never_imports_torch(tmp_path):
    """What a compile worker runs (the target's warm-up without a GPU, then a compile) works with
    torch made unimportable: 16 compile workers importing it at once took 5.6-6.9 s each at a
    run's start on the H200."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("interpreter mode replaces @triton.jit functions")
    import subprocess
    import sys
    from pathlib import Path

    code = """
import sys
sys.modules["torch"] = None  # an import of torch raises ImportError
from tilefit.tune.targets.base import TuneShape
from tilefit.tune.targets.tilefit_moe import TilefitMoETarget
target = TilefitMoETarget(gpu="h200")
shape = TuneShape("gemm2", 8, 6144, 256, 8, "fp8-block")
target.warm(shape, False)
target.compile(target.config_from_dict({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 2}), shape)
print("compiled")
"""
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-2000:]
