"""A fake target for CPU tests: the triton-moe config space, deterministic synthetic times, and
configs that misbehave on purpose (compile crash / hang / segfault, run crash / hang / segfault /
poisoned context / a shared-memory failure the model did not predict), and compiles that sleep,
in the worker or in a child process (as Triton's compile runs ptxas).

Times are a seeded, structured distortion of the performance model (per-axis-value factors, a
BLOCK_M x BLOCK_N interaction, a little per-config noise), so the model ranks imperfectly as on
real hardware, yet every call with the same seed gives the same number. `search_noise` inflates the
FIRST timing of some configs in a worker process (as compile bursts inflate a search's host-timed
launches), so tests can show what quiet re-timing repairs.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tilefit.tune.targets.base import (MOE_SPACE, TuneShape, moe_config_from_dict,
                                       stand_in_default_config)

LIMIT_SM90 = 232448  # the fake device's shared-memory limit (sm90 opt-in: CUTLASS arch.h sm90_smem_capacity_bytes)


class FakeFailure(RuntimeError):
    pass


class PoisonedContext(RuntimeError):
    """Stands in for CUDA's 'an illegal memory access was encountered'."""


def _unit(*parts: Any) -> float:
    """A deterministic number in [0, 1) from `parts`."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def _labels(values: Any) -> frozenset[str]:
    return frozenset(str(v).replace(" ", "") for v in (values or ()))


class FakeTarget:
    """Keyword arguments name misbehaving configs as 'BM,BN,BK,GM,warps,stages' strings."""

    name = "fake"
    jobs = ("gemm1", "gemm2")
    config_space = MOE_SPACE

    def __init__(self, *, seed: int = 0, gpu: str = "h200", smem_limit: int = LIMIT_SM90,
                 compile_crash: Any = (), compile_hang: Any = (), compile_segv: Any = (),
                 run_crash: Any = (), run_hang: Any = (), run_segv: Any = (), run_fatal: Any = (),
                 smem_lie: Any = (), compile_sleep_s: float = 0.0, compile_child_s: float = 0.0,
                 run_sleep_s: float = 0.0,
                 grid: str = "full", jobs: Any = ("gemm1", "gemm2"), down_same_block_m: bool = False,
                 search_noise: float = 0.0, shared_group_m: bool = False, warm_dir: str = ""):
        self.seed = seed
        self.gpu = gpu
        self.smem_limit = smem_limit
        self.bad = {name: _labels(v) for name, v in dict(
            compile_crash=compile_crash, compile_hang=compile_hang, compile_segv=compile_segv,
            run_crash=run_crash, run_hang=run_hang, run_segv=run_segv, run_fatal=run_fatal,
            smem_lie=smem_lie).items()}
        self.compile_sleep_s = compile_sleep_s
        self.compile_child_s = compile_child_s
        self.run_sleep_s = run_sleep_s
        self.grid = grid
        self.jobs = tuple(jobs)
        self.down_same_block_m = down_same_block_m  # SGLang's _down rule, for tests of `restrict`
        self.ties_jobs = bool(down_same_block_m)  # whether `restrict` reads gemm1's winners
        self.search_noise = search_noise
        self.shared_group_m = shared_group_m  # GROUP_SIZE_M a runtime argument, as in tilefit's kernel
        self._timed: set[Any] = set()  # (shape, batch, config) timed before in this process
        self.warm_dir = warm_dir  # `warm` leaves a file "<pid>-<gpu|cpu>-<gemm>" here (tests)

    def warm(self, shape: TuneShape, gpu: bool) -> None:
        if self.warm_dir:
            name = f"{os.getpid()}-{'gpu' if gpu else 'cpu'}-{shape.gemm}"
            (Path(self.warm_dir) / name).write_text("")

    def restrict(self, job: str, batch: int, configs: list[Any],
                 winners: dict[str, dict[int, Any]]) -> list[Any]:
        if not (self.down_same_block_m and job == "gemm2"):
            return configs
        bm = winners["gemm1"][batch].block_m
        return [c for c in configs if c.block_m == bm]

    # -- the config space ---------------------------------------------------------------------
    def space(self, shape: TuneShape) -> list[Any]:
        from tilefit.kernels.triton_moe.config import grid_configs

        return grid_configs(shape.dtype, self.grid)

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        return moe_config_from_dict(data)

    def default_config(self, shape: TuneShape, batch: int) -> Any:
        return stand_in_default_config(shape, batch)

    def smem_bytes(self, config: Any, shape: TuneShape) -> int:
        """The fake's shared-memory model: (stages - 1) x (BM + BN) x BK x bytes (a plain tiled matmul's form)."""
        elem = 1 if shape.dtype == "fp8-block" else 2
        return (config.num_stages - 1) * (config.block_m + config.block_n) * config.block_k * elem

    def fit_reason(self, config: Any, shape: TuneShape) -> Any:
        from tilefit.tune.results import DoesNotFit

        need = self.smem_bytes(config, shape)
        return None if need <= self.smem_limit else DoesNotFit("shared memory", need, self.smem_limit)

    # -- misbehaviour -----------------------------------------------------------------------------
    def _misbehave(self, phase: str, config: Any) -> None:
        label = ",".join(map(str, config.values()))
        if label in self.bad[f"{phase}_segv"]:
            os.kill(os.getpid(), signal.SIGSEGV)
        if label in self.bad[f"{phase}_hang"]:
            time.sleep(3600)
        if label in self.bad[f"{phase}_crash"]:
            raise FakeFailure(f"PassManager::run failed (fake {phase} crash for {label})")
        if phase == "run" and label in self.bad["run_fatal"]:
            raise PoisonedContext("CUDA error: an illegal memory access was encountered (fake)")

    def compile_key(self, config: Any) -> Any:
        return replace(config, group_m=1) if self.shared_group_m else config

    def compile(self, config: Any, shape: TuneShape) -> None:
        if self.compile_sleep_s:
            time.sleep(self.compile_sleep_s)
        if self.compile_child_s:
            subprocess.run(["sleep", str(self.compile_child_s)], check=True)
        self._misbehave("compile", config)

    def run_many(self, configs: list[Any], shape: TuneShape, batch: int) -> list[float]:
        return [self.run(c, shape, batch) for c in configs]

    def run(self, config: Any, shape: TuneShape, batch: int) -> float:
        if self.run_sleep_s:
            time.sleep(self.run_sleep_s)
        self._misbehave("run", config)
        label = ",".join(map(str, config.values()))
        if label in self.bad["smem_lie"]:
            need = self.smem_bytes(config, shape) + self.smem_limit
            raise FakeFailure(f"out of resource: shared memory, Required: {need}, "
                              f"Hardware limit: {self.smem_limit}. Reducing block sizes or "
                              f"num_stages may help.")
        t = self.time_us(config, shape, batch)
        key = (shape.key(), batch, config)
        if self.search_noise and key not in self._timed and _unit(self.seed, "noisy", key) < 0.5:
            t *= 1.0 + self.search_noise * _unit(self.seed, "noise", key)
        self._timed.add(key)
        return t

    def stats(self) -> dict[str, int]:
        """This process's counters (WorkerPool.stats): `timed`, the (shape, batch, config)
        timings it made."""
        return {"timed": len(self._timed)}

    def routed(self, shape: TuneShape, batch: int) -> None:
        return None  # no routing drawn: the floor uses the expectation

    def timing(self, shape: TuneShape, batch: int) -> str:
        return "synthetic"

    def check(self, config: Any, shape: TuneShape, batch: int) -> str | None:
        return None

    def is_fatal(self, error: BaseException) -> bool:
        return isinstance(error, PoisonedContext)

    # -- the synthetic landscape ----------------------------------------------------------------
    def time_us(self, config: Any, shape: TuneShape, batch: int) -> float:
        from tilefit.hw.catalog import get_gpu
        from tilefit.tune.perfmodel import Device, predict_us

        dev = Device.from_gpu(get_gpu(self.gpu), shape.dtype)
        base = predict_us(MOE_SPACE.tile(config), shape, batch, dev, self.smem_bytes(config, shape))
        bucket = batch.bit_length() // 3  # neighbouring batch sizes share their quirks
        factor = 1.0
        for axis, value in zip(("bm", "bn", "bk", "gm", "w", "s"), config.values()):
            factor *= 1.0 + 0.25 * _unit(self.seed, shape.gemm, bucket, axis, value)
        factor *= 1.0 + 0.1 * _unit(self.seed, shape.gemm, bucket, "bm*bn", config.block_m,
                                    config.block_n)
        factor *= 1.0 + 0.005 * _unit(self.seed, shape.key(), batch, config.values())
        return round(base * factor, 4)

    def versions(self) -> dict[str, str]:
        return {"fake": str(self.seed)}

    def write(self, out_dir: Path, shape: TuneShape, device_name: str,
              winners: dict[str, dict[int, Any]]) -> list[Path]:
        from tilefit.tune.store import write_tilefit_store

        return [write_tilefit_store(out_dir, "fake", shape, device_name, winners, self.versions())]
