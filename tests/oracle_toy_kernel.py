"""A kernel for tests/test_oracle_launch_key.py: one argument of each kind Triton's launcher
specialises differently (never launched; only its Triton source key is made)."""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["p_nospec", "n_nospec"], do_not_specialize_on_alignment=["p_noalign"])
def toy_kernel(p, p_unaligned, p_nospec, p_noalign, n16, n2, one, n_nospec, n64: tl.int64,
               one64: tl.int64, x, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(p + pid, tl.load(p_unaligned + pid) * x + n16 + n2 + one + n_nospec + n64 + one64)
