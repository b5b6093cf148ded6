"""Tuning target name -> the class that implements it, imported only when asked for.

`tilefit` tunes tilefit's own Triton fused-MoE kernel; `vllm` and `sglang` the engine's own kernel
(the engine must be installed); `fake` and `replay` run the whole pipeline on a CPU (tests, and
re-running a recorded journal). Adding a target: one module under tune/targets/, one line here.
"""

from __future__ import annotations

from tilefit.errors import UsageError

# name -> "module:class" (a TargetSpec builds it inside each worker process)
TARGETS: dict[str, str] = {
    "tilefit": "tilefit.tune.targets.tilefit_moe:TilefitMoETarget",
    "vllm": "tilefit.tune.targets.engines:VllmTarget",
    "sglang": "tilefit.tune.targets.engines:SglangTarget",
    "fake": "tilefit.tune.targets.fake:FakeTarget",
    "replay": "tilefit.tune.targets.replay:ReplayTarget",
}
PUBLIC_TARGETS = ("tilefit", "vllm", "sglang")  # what --help lists
CPU_TARGETS = ("fake", "replay")  # need no GPU
ENGINE_TARGETS = ("vllm", "sglang")  # the engine's own kernel: the engine must be installed
# The batch sizes vLLM's benchmark_moe.py --tune and SGLang's tuning_fused_moe_triton.py sweep.
STANDARD_BATCHES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)


def target_factory(name: str) -> str:
    """The "module:class" of target `name`; a UsageError listing the public ones if unknown."""
    if name not in TARGETS:
        raise UsageError(f"unknown --target {name!r}; use one of {', '.join(PUBLIC_TARGETS)}")
    return TARGETS[name]
