"""The fake target's misbehaving configs, shared by the local and Ray fault-injection tests."""

from __future__ import annotations

from tilefit.kernels.triton_moe.config import MoEConfig
from tilefit.tune.targets.base import TargetSpec, TuneShape

SHAPE = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
GOOD = MoEConfig(64, 128, 64, 16, 4, 3)
CRASH, HANG, SEGV = MoEConfig(32, 64, 64, 1, 4, 3), MoEConfig(32, 64, 64, 1, 4, 4), \
    MoEConfig(32, 64, 64, 1, 8, 3)
FATAL, LIE = MoEConfig(16, 64, 64, 1, 4, 3), MoEConfig(16, 64, 64, 1, 8, 3)


def label(c: MoEConfig) -> str:
    return ",".join(map(str, c.values()))


def faulty_spec(**extra) -> TargetSpec:
    """A fake target whose compile crashes, hangs or segfaults, whose run poisons the process, and
    whose shared-memory model lies, each on its own config."""
    return TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=7, grid="distinct",
                         compile_crash=[label(CRASH)], compile_hang=[label(HANG)],
                         compile_segv=[label(SEGV)], run_fatal=[label(FATAL)],
                         smem_lie=[label(LIE)], **extra)
