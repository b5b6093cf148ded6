"""Settings read from TILEFIT_* environment variables, once, at the edge; typed, with clear errors.

TILEFIT_CACHE_DIR        where oracle results are cached (default ~/.cache/tilefit)
TILEFIT_FLASHINFER_DATA  FlashInfer's data/ folder (its pinned CUTLASS and TensorRT-LLM headers)
TILEFIT_NVCC_JOBS        parallel nvcc compiles for the CUTLASS oracle (default and cap: CPU count)
CUDA_HOME                where the CUDA toolkit (nvcc) lives when it is not on PATH
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tilefit.numeric import bounded_int


@dataclass(frozen=True, slots=True)
class Settings:
    cache_dir: Path
    flashinfer_data: Path | None
    nvcc_jobs: int | None
    cuda_home: Path


def _path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name, "").strip()
    return Path(value).expanduser() if value else None


def _positive_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    return bounded_int(value, name, minimum=1)


def from_environ(env: Mapping[str, str]) -> Settings:
    return Settings(
        cache_dir=_path(env, "TILEFIT_CACHE_DIR") or Path.home() / ".cache" / "tilefit",
        flashinfer_data=_path(env, "TILEFIT_FLASHINFER_DATA"),
        nvcc_jobs=_positive_int(env, "TILEFIT_NVCC_JOBS"),
        cuda_home=_path(env, "CUDA_HOME") or Path("/usr/local/cuda"),
    )


@lru_cache(maxsize=1)
def settings() -> Settings:
    """This process's settings (read once)."""
    return from_environ(os.environ)
