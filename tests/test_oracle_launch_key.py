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
