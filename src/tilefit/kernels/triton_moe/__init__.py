"""tilefit's Triton fused-MoE kernel family: the kernel (kernel.py, align.py, ops.py), its config
grid (config.py), the oracle's view of it (spec.py) and the byte-exact shared-memory model (smem.py).
"""
