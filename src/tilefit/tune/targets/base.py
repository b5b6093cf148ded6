"""What the tuner needs from "a kernel we can tune": the shape type and the Target protocol.

A target is built in every worker process from a `TargetSpec` (an importable class and JSON-able
keyword arguments), so worker processes never unpickle live objects. Its configs are frozen,
hashable values with `as_dict()` and `label()`; its `config_space` (a `ConfigSpace`) tells the
tuner's core (journal, store, strategies, performance model) how to read them back and which
attributes are the searched axes, so that core never names one kernel family's config type.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any, Protocol

GEMMS = ("gemm1", "gemm2", "both")
# The dtypes the tuner's kernels take. fp8 is 128x128 block-scaled only ("fp8-block", as everywhere in
# tilefit): tilefit's kernel has no per-tensor-scaled fp8 path, and the engine targets run bf16/fp16.
TUNE_DTYPES = ("bf16", "fp16", "fp8-block")


def tune_dtype(typed: str | None, weights: str, model: str) -> str:
    """The dtype to tune: `typed` (--dtype) if given, else the model's weight dtype. Per-tensor fp8
    ("fp8") is refused either way rather than tuned as block-scaled: the engines read those
    configs from other files (dtype=fp8_w8a8 with no block_shape)."""
    from tilefit.errors import UsageError

    if typed is not None:
        d = str(typed).strip().lower()
        if d == "fp8":
            raise UsageError("--dtype fp8 is per-tensor fp8, which tilefit tune has no kernel for; "
                             "pass --dtype fp8-block for 128x128 block-scaled fp8, or --dtype bf16")
        if d not in TUNE_DTYPES:
            raise UsageError(f"unknown --dtype {typed!r}; use bf16, fp16 or fp8-block (128x128 "
                             f"block scales)")
        return d
    if weights == "fp8":
        raise UsageError(f"{model} stores per-tensor fp8 weights, which tilefit tune has no kernel "
                         f"for (the engines read dtype=fp8_w8a8 files without block_shape); tune "
                         f"them with the engine's own tuner, or pass --dtype bf16 or fp8-block")
    if weights not in TUNE_DTYPES:
        raise UsageError(f"the Triton fused-MoE kernels tune bf16, fp16 and fp8-block (128x128 "
                         f"blocks); {model} stores {weights} weights: pass --dtype bf16 to tune "
                         f"the bf16 kernel")
    return weights


@dataclass(frozen=True, slots=True)
class TuneShape:
    """One MoE layer on one GPU, and which of its GEMMs a tuning job times.

    gemm1: [T_e, hidden] x [hidden, 2*width]; gemm2: [T_e, width] x [width, hidden];
    "both": gemm1 + gemm2 timed together with one config (how vLLM stores its configs).
    Tokens pick `topk` of `total_experts`; only the `experts` held here (ids 0..experts-1, rank 0)
    are computed, so under EP a GPU sees about batch*topk*experts/total_experts assignments.
    """

    gemm: str
    experts: int  # local experts E (the E of the engines' file names)
    hidden: int  # H
    width: int  # per-rank expert width I/tp (the N of the engines' file names)
    topk: int
    dtype: str  # "bf16" | "fp16" | "fp8-block" (e4m3 with 128x128 block scales)
    total_experts: int = 0  # the model's routed experts; 0: experts - shared (no EP)
    # Shared experts the engine runs inside the fused MoE (sglang's shared-expert fusion): the last
    # `shared` of `experts`, every token routed to each, counted in `topk` too; the routed picks
    # are then topk - shared of total_experts (the routed experts of the whole model).
    shared: int = 0

    def __post_init__(self) -> None:
        if self.gemm not in GEMMS:
            raise ValueError(f"gemm must be one of {', '.join(GEMMS)}, got {self.gemm!r}")
        if self.dtype not in TUNE_DTYPES:  # never tune per-tensor fp8 on the block-scaled kernel
            raise ValueError(f"dtype must be one of {', '.join(TUNE_DTYPES)}, got {self.dtype!r}")
        if self.total_experts == 0:
            object.__setattr__(self, "total_experts", self.experts - self.shared)
        if not 0 <= self.shared < min(self.experts, self.topk):
            raise ValueError(f"shared experts {self.shared} must be fewer than experts and top-k")

    @property
    def nk(self) -> tuple[int, int]:
        """(N, K) of this job's GEMM (gemm1's for "both")."""
        return (2 * self.width, self.hidden) if self.gemm in ("gemm1", "both") else (self.hidden, self.width)

    @classmethod
    def of_layer(cls, model: Any, plan: Any, dtype: str) -> TuneShape:
        """gemm1's shape of `model`'s MoE layer on one GPU of `plan` (layout.plan_layer), tuned
        as `dtype`: the local experts and the per-rank width expert_width / tp."""
        return cls("gemm1", plan.local_experts, model.hidden_size,
                   model.expert_width // plan.layout.tp, model.top_k + plan.fused_shared, dtype,
                   model.num_experts, plan.fused_shared)

    def with_gemm(self, gemm: str) -> TuneShape:
        return TuneShape(gemm, self.experts, self.hidden, self.width, self.topk, self.dtype,
                         self.total_experts, self.shared)

    def key(self) -> str:
        """Stable text key for journals and replay files."""
        return (f"{self.gemm}:E={self.experts}/{self.total_experts},H={self.hidden},"
                f"I={self.width},k={self.topk},{self.dtype}" + (f",shared={self.shared}" if self.shared else ""))

    def as_dict(self) -> dict[str, Any]:
        out = {"gemm": self.gemm, "experts": self.experts, "hidden": self.hidden,
               "width": self.width, "topk": self.topk, "dtype": self.dtype,
               "total_experts": self.total_experts}
        return out | ({"shared": self.shared} if self.shared else {})

    @property
    def routed(self) -> tuple[int, int]:
        """(local routed experts, routed picks per token): the shape without its fused shared experts."""
        return self.experts - self.shared, self.topk - self.shared

    def assignments(self, batch: int) -> float:
        """Expected (token, expert) pairs computed on this GPU for `batch` tokens."""
        local, picks = self.routed
        return batch * (picks * local / self.total_experts + self.shared)


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """How a worker process builds the target: 'package.module:Class' and its keyword arguments."""

    factory: str
    kwargs: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, factory: str, **kwargs: Any) -> TargetSpec:
        return cls(factory, tuple(sorted(kwargs.items())))

    def build(self) -> Target:
        module, _, name = self.factory.partition(":")
        return getattr(importlib.import_module(module), name)(**dict(self.kwargs))


@dataclass(frozen=True, slots=True)
class ConfigGroup:
    """Several configs in one request to a worker ("run_many": timed in turns)."""

    configs: tuple[Any, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"group": [c.as_dict() for c in self.configs]}


@dataclass(frozen=True, slots=True)
class Routed:
    """What one timed routing draw gives this GPU: (token, expert) rows and distinct local experts
    hit. The floor uses it instead of the expectation: a seeded draw can hit fewer experts than
    the mean, and a floor from the mean then reads above 100%."""

    rows: int
    experts: int


@dataclass(frozen=True, slots=True)
class Tile:
    """What the performance model reads of a config: the tile, warps and pipeline depth."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True, slots=True)
class ConfigSpace:
    """A target's config type as the tuner's core sees it.

    from_dict: a config from its JSON keys (journal lines, stores, engine files);
    axes: the config's attributes the strategies move along (each an ordered grid axis);
    tile: the performance model's view of a config.
    """

    name: str
    from_dict: Callable[[dict[str, Any]], Any]
    axes: tuple[str, ...]
    tile: Callable[[Any], Tile]


class Target(Protocol):
    """A tunable kernel. Methods named compile/run/check run inside worker processes and may
    raise; the worker turns any exception into a result value (results.py)."""

    name: str
    jobs: tuple[str, ...]  # which GEMM jobs it tunes: ("gemm1", "gemm2") or ("both",)
    config_space: ConfigSpace  # how the tuner's core reads and searches its configs

    def space(self, shape: TuneShape) -> list[Any]:
        """Every config the target can run for `shape` (before any fit filter)."""

    def config_from_dict(self, data: dict[str, Any]) -> Any: ...

    def default_config(self, shape: TuneShape, batch: int) -> Any:
        """The config the engine uses when it has no tuned file."""

    def fit_reason(self, config: Any, shape: TuneShape) -> Any:
        """None when the config fits the device, else a DoesNotFit from the SMEM model."""

    def compile(self, config: Any, shape: TuneShape) -> None:
        """Compile (or warm the compiler cache for) one config; may run without a GPU."""

    def compile_key(self, config: Any) -> Any:
        """The config whose compile serves `config` too (itself, unless some configs differ only
        in runtime arguments of one compiled kernel): the tuner compiles each key once."""

    def run(self, config: Any, shape: TuneShape, batch: int) -> float:
        """Median kernel time in microseconds."""

    # Optional: `journal_name`, the name its journal lines carry when variants of one target
    # must not answer for each other (TilefitMoETarget's scale and swap forms); else `name`.
    # Optional: `probe(config, shape, batch) -> float`, a shorter timing of the same kind that
    # searches use to rank configs (their best few are re-timed with `run`); without it, `run`.
    # Optional: `run_many(configs, shape, batch) -> list[float]`, `run` of each config with the
    # configs timed in turns (a re-timing round, when the run asks for it: TuneRequest.interleave).

    def timing(self, shape: TuneShape, batch: int) -> str:
        """How `run` times this batch size, for the summary (e.g. "cuda-graph", "events")."""

    def routed(self, shape: TuneShape, batch: int) -> Routed | None:
        """The routing `run` times (None: the performance model's expectation stands in)."""

    def check(self, config: Any, shape: TuneShape, batch: int) -> str | None:
        """None when the output matches the reference, else what differs."""

    # Optional: `warm(shape, gpu)`, run by a worker started ahead of its first request (gpu: a
    # timing worker, else a compile worker) to ready what `shape`'s requests will need.

    def is_fatal(self, error: BaseException) -> bool:
        """True when `error` leaves the process unusable (e.g. a poisoned CUDA context)."""

    def versions(self) -> dict[str, str]: ...

    def write(self, out_dir: Path, shape: TuneShape, device_name: str,
              winners: dict[str, dict[int, Any]]) -> list[Path]:
        """Store the chosen configs ({job: {batch: config}}) in the target's format."""


def moe_config_from_dict(data: dict[str, Any]) -> Any:
    """The triton-moe config from the engines' JSON keys (journal lines, config files)."""
    from tilefit.kernels.triton_moe.config import MoEConfig

    return MoEConfig.from_dict(data)


def _moe_tile(config: Any) -> Tile:
    return Tile(config.block_m, config.block_n, config.block_k, config.num_warps,
                config.num_stages)


# The triton-moe family's configs (the six keys vLLM and SGLang store), for every target that
# tunes that kernel or a stand-in for it.
MOE_SPACE = ConfigSpace("triton-moe", moe_config_from_dict,
                        ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages"),
                        _moe_tile)


def stand_in_default_config(shape: TuneShape, batch: int) -> Any:
    """The 'default config' of the CPU stand-in targets (fake, replay): a fixed pick from the grid
    (fp8-block: N and K of the 128-wide scale block, as the engines' block-fp8 defaults), like the
    engines' small-batch / large-batch defaults; only the speedup column depends on it."""
    from tilefit.kernels.triton_moe.config import MoEConfig

    nk = 128 if shape.dtype == "fp8-block" else 64
    small = batch * shape.topk <= shape.total_experts
    return MoEConfig(16, nk, nk, 1, 4, 3) if small else MoEConfig(64, nk, nk, 16, 4, 3)
