"""Go/no-go for a planned deployment: which MoE kernel the engine will run, which of its configs
or tactics cannot launch on the GPU, whether that kills the engine, and what to set instead."""

from tilefit.check.report import run_check
from tilefit.check.types import CheckReport, CheckRequest, Finding

__all__ = ["CheckReport", "CheckRequest", "Finding", "run_check"]
