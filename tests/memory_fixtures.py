"""The real start-up logs of tests/fixtures/memory/ with their sidecars, and the plan each one
describes (shared by test_memory_logs.py and benchmarks/bench_memory.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tilefit.hw.catalog import get_gpu
from tilefit.memory import MemoryPlan, MemoryRequest, Parallel, Settings, plan_memory
from tilefit.memory.base import LaunchFlags
from tilefit.memory.printed import Printed, read_printed
from tilefit.models.architecture import load_architecture

LOGS = Path(__file__).resolve().parent / "fixtures" / "memory"
NAMES = sorted(p.stem for p in LOGS.glob("*.toml"))


def load(name: str) -> tuple[dict, Printed, MemoryPlan]:
    """(sidecar, what the engine printed, tilefit's plan for the same deployment)."""
    side = tomllib.loads((LOGS / f"{name}.toml").read_text(encoding="utf-8"))
    printed = read_printed((LOGS / f"{name}.log").read_text(encoding="utf-8"))
    launch = LaunchFlags(flags=tuple(sorted(side.get("launch_flags", {}).items())))  # by the engine's names
    req = MemoryRequest(load_architecture(side["model"]), get_gpu(side["gpu"]), side["engine"],
                        Parallel(**side.get("parallel", {})), Settings(**side.get("settings", {}), launch=launch),
                        version=side.get("engine_version", "").split(" ")[0] or None)
    return side, printed, plan_memory(req)
