"""The protocol every kernel family answers, and the value types it answers with.

A family (our Triton fused-MoE kernel, FlashInfer's CUTLASS MoE tactics, ...) knows its config
space for an arch and dtype, the shared memory a config needs as a breakdown of named terms, and
whether that fits the arch's opt-in limit. `fit()` turns a footprint into a verdict with a reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tilefit.hw.catalog import Arch


@runtime_checkable
class Config(Protocol):
    """A family's config: a frozen, hashable dataclass that can show itself."""

    def as_dict(self) -> dict[str, Any]: ...

    def label(self) -> str: ...


@dataclass(frozen=True, slots=True)
class SmemTerm:
    """One named part of a kernel's shared memory, e.g. ('A stages', 3 x 32768)."""

    name: str
    bytes: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class SmemFootprint:
    """Shared memory one config needs on one arch, as the sum of named terms plus padding.

    `total` is what the launch requests (after any whole-struct alignment); it is >= sum(terms).
    `stages` is the pipeline depth the config ends up with (given, or chosen by a builder).
    """

    total: int
    terms: tuple[SmemTerm, ...]
    stages: int | None = None
    source: str = "model"  # "model" | "oracle" | "table"
    notes: tuple[str, ...] = ()

    @property
    def padding(self) -> int:
        return self.total - sum(t.bytes for t in self.terms)

    def dominant(self) -> SmemTerm:
        return max(self.terms, key=lambda t: t.bytes)


# Why a config is not usable. Fit-related failures are data, shared by fit, check, diagnose, tune.
FITS = "fits"
EXCEEDS_SMEM = "exceeds-smem"
NO_DISPATCH = "no-dispatch"
UNSUPPORTED = "unsupported"


@dataclass(frozen=True, slots=True)
class FitVerdict:
    config: Any  # the family's Config
    arch: Arch
    footprint: SmemFootprint | None
    status: str  # FITS | EXCEEDS_SMEM | NO_DISPATCH | UNSUPPORTED
    reason: str

    @property
    def fits(self) -> bool:
        return self.status == FITS

    @property
    def limit(self) -> int:
        return self.arch.smem_per_block_optin

    @property
    def margin(self) -> int | None:
        """Bytes left under the limit (negative: over it)."""
        return None if self.footprint is None else self.limit - self.footprint.total


def judge(config: Any, arch: Arch, footprint: SmemFootprint) -> FitVerdict:
    """Compare a footprint with the arch's opt-in limit; the reason names the dominant term."""
    limit = arch.smem_per_block_optin
    top = footprint.dominant()
    if footprint.total <= limit:
        slack = limit - footprint.total
        why = "exactly at the limit" if slack == 0 else f"{slack:,} B under the limit"
        return FitVerdict(config, arch, footprint, FITS, f"{footprint.total:,} B <= {limit:,} B ({why})")
    over = footprint.total - limit
    return FitVerdict(
        config, arch, footprint, EXCEEDS_SMEM,
        f"needs {footprint.total:,} B > {limit:,} B on {arch.name} (over by {over:,} B); "
        f"largest term: {top.name} {top.bytes:,} B",
    )


class KernelFamily(Protocol):
    """What every kernel family module provides (as module-level functions or an object).

    Optional extras the CLI uses when present: `verify(configs, arch, dtype)` (the live oracle),
    `summary(verdicts)` (extra human lines), `blocklist(verdicts)` (an engine's skip list) and
    `expand(text, config, arch, dtype)` (the catalogued configs one CLI spelling stands for) and
    `note(**options)` (a caveat about the options given, or None) and `tile(config)` ((tile label,
    pipeline depth), so that `fit` can show one row per tile at its deepest fitting depth).
    """

    name: str

    def dtypes(self, arch: Arch) -> Sequence[str]:
        """Data types this family supports on `arch`."""

    def configs(self, arch: Arch, dtype: str, **options: Any) -> Sequence[Any]:
        """The config space an engine would try on `arch` for `dtype`."""

    def parse_config(self, text: str, dtype: str) -> Any:
        """A config from its CLI spelling; raises UsageError on bad input."""

    def footprint(self, config: Any, arch: Arch, dtype: str) -> SmemFootprint:
        """Shared memory `config` needs on `arch`, from the model (fast, no compiler)."""

    def verdict(self, config: Any, arch: Arch, dtype: str) -> FitVerdict:
        """Fits / exceeds / no dispatch, with the reason."""

    def default_config(self, arch: Arch, dtype: str, **shape: Any) -> Any:
        """The config an engine uses when it has no tuned one."""


@dataclass(frozen=True, slots=True)
class OracleCheck:
    """One model-vs-oracle comparison."""

    config: Any
    arch: Arch
    model_bytes: int
    oracle_bytes: int
    oracle: str  # e.g. "triton 3.6.0" or "nvcc 13.0 + cutlass 4.2.1"
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def agrees(self) -> bool:
        return self.model_bytes == self.oracle_bytes
