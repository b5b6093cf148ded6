"""The replay target: serves timings recorded in a journal file instead of running anything, so
strategies and the whole pipeline can be tested (and compared) without a GPU.

Any journal written by `tilefit tune` is a replay file. `record()` writes one from another target
(e.g. the fake target's synthetic landscape). An unrecorded config is a LaunchFailed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tilefit.tune.journal import read_entries
from tilefit.tune.results import DoesNotFit, Ok, Result
from tilefit.tune.targets.base import (MOE_SPACE, TuneShape, moe_config_from_dict,
                                       stand_in_default_config)


class ReplayFailure(RuntimeError):
    pass


class ReplayTarget:
    name = "replay"
    config_space = MOE_SPACE  # the recorded journals are the triton-moe family's

    def __init__(self, *, path: str, jobs: Any = ("gemm1", "gemm2"), recorded_target: str = ""):
        self.path = str(path)
        self.jobs = tuple(jobs)
        self._runs: dict[tuple[Any, ...], Result] = {}
        self._configs: dict[str, list[Any]] = {}  # shape key -> MoEConfigs in recorded order
        for e in read_entries(self.path, self.config_space.from_dict):
            if recorded_target and e.target != recorded_target:
                continue
            if e.batch is not None:
                k = (e.shape, e.batch, e.config)
                if k not in self._runs:
                    self._configs.setdefault(e.shape, []).append(e.config)
                self._runs[k] = e.result

    def recorded(self, shape: TuneShape, batch: int, config: Any) -> Result | None:
        return self._runs.get((shape.key(), batch, config))

    def space(self, shape: TuneShape) -> list[Any]:
        return sorted(set(self._configs.get(shape.key(), [])))

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        return moe_config_from_dict(data)

    def default_config(self, shape: TuneShape, batch: int) -> Any:
        return stand_in_default_config(shape, batch)

    def fit_reason(self, config: Any, shape: TuneShape) -> Any:
        return None

    def compile_key(self, config: Any) -> Any:
        return config

    def compile(self, config: Any, shape: TuneShape) -> None:
        return None

    def run(self, config: Any, shape: TuneShape, batch: int) -> float:
        r = self.recorded(shape, batch, config)
        if isinstance(r, Ok):
            return r.time_us
        if isinstance(r, DoesNotFit):
            raise ReplayFailure(f"out of resource: {r.resource}, Required: {r.required}, "
                                f"Hardware limit: {r.limit}")
        raise ReplayFailure(f"not recorded in {self.path}" if r is None else f"recorded: {r}")

    def routed(self, shape: TuneShape, batch: int) -> None:
        return None  # no routing drawn: the floor uses the expectation

    def timing(self, shape: TuneShape, batch: int) -> str:
        return "replayed"

    def check(self, config: Any, shape: TuneShape, batch: int) -> str | None:
        return None

    def is_fatal(self, error: BaseException) -> bool:
        return False

    def versions(self) -> dict[str, str]:
        return {"replay": Path(self.path).name}

    def write(self, out_dir: Path, shape: TuneShape, device_name: str,
              winners: dict[str, dict[int, Any]]) -> list[Path]:
        from tilefit.tune.store import write_tilefit_store

        return [write_tilefit_store(out_dir, "replay", shape, device_name, winners, self.versions())]


def record(target: Any, shapes: list[TuneShape], batches: list[int], path: str | Path,
           target_name: str = "") -> Path:
    """Write every config of `target`'s space (that fits) for each shape and batch to a journal
    file, timed in-process: a recorded landscape for the replay target."""
    from tilefit.tune.journal import Journal

    with Journal(path, resume=False, context={"gpu": "recorded"}, sync=False,
                 from_dict=target.config_space.from_dict) as j:
        for shape in shapes:
            for config in target.space(shape):
                if target.fit_reason(config, shape) is not None:
                    continue
                for b in batches:
                    j.record(target_name or target.name, shape.key(), b, config,
                             Ok(target.run(config, shape, b)))
    return Path(path)
