"""Compilers as ground truth: each oracle compiles a kernel config for a target and reports the
shared memory the compiler allocates, so the fast models can be held equal to it."""
