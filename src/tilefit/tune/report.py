"""What a tuning run reports: one `Row` per (layer shape, GEMM job, batch size), the run's
`TuneReport`, and the `ModelBug`s (configs the SMEM model let through that failed for shared memory
at launch). Typed values up to `as_dict`, the one place they become JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilefit.tune.results import Result, to_json


@dataclass(frozen=True, slots=True)
class ModelBug:
    """A config the SMEM model let through that failed for shared memory at launch."""

    shape: str
    config: Any
    result: Result

    def as_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "config": self.config.as_dict(), "result": to_json(self.result)}


@dataclass(frozen=True, slots=True)
class Retimed:
    """One finalist re-timed in quiet: its time in each round, and where it came from."""

    config: Any
    rounds_us: tuple[float, ...]  # inf for a round that failed
    search_us: float | None  # its best time during the searches (None: not measured there)
    sources: tuple[str, ...]  # why it is a finalist: "fast", "exhaustive", "default", "given"

    @property
    def median_us(self) -> float:
        xs = sorted(self.rounds_us)
        if not xs:
            return float("inf")
        mid = len(xs) // 2
        return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2

    @property
    def rank_key(self) -> tuple[Any, ...]:
        """Finalists that ran the most rounds (those still in at the end: the same rounds, so a
        GPU warming up between rounds favours none of them) first, fastest median first among
        them; then those that left earlier; configs that failed every round last."""
        median = self.median_us
        return (median == float("inf"), -len(self.rounds_us), median, self.config)

    def as_dict(self) -> dict[str, Any]:
        median = self.median_us
        return {"config": self.config.label(), "config_dict": self.config.as_dict(),
                "sources": list(self.sources), "median_us": median if median < float("inf") else None,
                "rounds_us": [t if t < float("inf") else None for t in self.rounds_us],
                "search_us": self.search_us}


@dataclass
class Row:
    shape: str
    job: str
    batch: int
    config: Any | None  # the pick; None when nothing ran
    time_us: float | None  # the pick's median over the quiet re-timing rounds
    floor_us: float  # from the measured ceilings when the run measured them, else the catalog's
    default_us: float | None  # the engine default's median, re-timed with the pick
    trials: int
    space: int
    prefiltered: int
    failures: dict[str, int]
    search_s: float
    timing: str = ""  # how the target timed this batch ("cuda-graph", "events", ...)
    floor_us_catalog: float | None = None  # the floor from the catalog's figures, beside it
    search_us: float | None = None  # the pick's time during the search
    pick_from: str = ""  # which finalist group the pick came from
    retime_s: float = 0.0
    finalists: list[Retimed] = field(default_factory=list)
    exhaustive_us: float | None = None  # the exhaustive sweep's best, re-timed with the pick
    exhaustive_config: Any | None = None
    exhaustive_trials: int | None = None
    exhaustive_s: float | None = None

    @property
    def pct_of_floor(self) -> float | None:
        return None if not self.time_us else 100.0 * self.floor_us / self.time_us

    @property
    def pct_of_catalog_floor(self) -> float | None:
        if not self.time_us or self.floor_us_catalog is None:
            return None
        return 100.0 * self.floor_us_catalog / self.time_us

    @property
    def speedup(self) -> float | None:
        return None if not (self.time_us and self.default_us) else self.default_us / self.time_us

    def best_of(self, source: str) -> Retimed | None:
        """The fastest re-timed finalist from `source` ("fast", "exhaustive", ...)."""
        group = [f for f in self.finalists if source in f.sources]
        return min(group, key=lambda f: f.rank_key) if group else None

    def as_dict(self) -> dict[str, Any]:
        """JSON: the config as its label ("config") and as its keys ("config_dict")."""
        d = {name: getattr(self, name) for name in self.__dataclass_fields__}
        d["config"] = self.config.label() if self.config else None
        d["config_dict"] = self.config.as_dict() if self.config else None
        d["exhaustive_config"] = self.exhaustive_config.label() if self.exhaustive_config else None
        d["finalists"] = [f.as_dict() for f in self.finalists]
        d["pct_of_floor"] = self.pct_of_floor
        d["pct_of_catalog_floor"] = self.pct_of_catalog_floor
        d["speedup_over_default"] = self.speedup
        return d


@dataclass
class TuneReport:
    rows: list[Row]
    files: list[str]
    model_bugs: list[ModelBug]
    wall_s: float
    resumed_entries: int
    worker_restarts: int
    figures: Any = None  # tune.device.DeviceFigures, or None
    ceilings: Any = None  # tune.ceilings.Ceilings measured at the start, or None
    stale_entries: int = 0  # journal lines from another GPU or other versions, measured again
    stale_contexts: tuple[str, ...] = ()
    # Kernels the GPU workers compiled at their first launch (targets/own_compiles.py); None:
    # not counted (a target without counters, a Ray cluster, a Triton without a compile listener).
    gpu_own_compiles: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.figures.as_dict() if self.figures else None,
                "ceilings": self.ceilings.as_dict() if self.ceilings else None,
                "rows": [r.as_dict() for r in self.rows], "files": self.files,
                "model_bugs": [b.as_dict() for b in self.model_bugs], "wall_s": self.wall_s,
                "resumed_entries": self.resumed_entries, "stale_entries": self.stale_entries,
                "stale_contexts": list(self.stale_contexts),
                "worker_restarts": self.worker_restarts, "gpu_own_compiles": self.gpu_own_compiles}
