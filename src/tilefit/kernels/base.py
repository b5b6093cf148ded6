"""The protocol every kernel family answers, and the value types it answers with.

A family (our Triton fused-MoE kernel, FlashInfer's CUTLASS MoE tactics, ...) knows its config
space for an arch and dtype, the shared memory a config needs as a breakdown of named terms, and
whether that fits the arch's opt-in limit. `fit()` turns a footprint into a verdict with a reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tilefit.errors import UsageError
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


@dataclass(frozen=True, slots=True)
class Blocklist:
    """A file the engine reads to skip configs: its content, the variable that names it, and a
    caveat for people (e.g. ids that hold for one library version only)."""

    env: str
    content: str
    note: str = ""


# How an engine chooses the configs of a family at warmup (KernelFamily.picked_by).
AUTOTUNER = "autotuner"  # it profiles every config the family lists and skips those that fail
ENGINE = "engine"  # it launches the config it picked (a tuned file, else its default)


@dataclass(frozen=True, slots=True)
class Judgement:
    """A family's verdicts on a set of configs, with what people read about them: the family's
    summary lines, the source of the configs (e.g. which library version's list), a caveat, and
    the blocklist that makes the engine skip the failing ones where the family has one
    (None, with `no_blocklist` saying why when the family has one but this version reads none)."""

    family: str
    arch: Arch
    dtype: str
    verdicts: tuple[FitVerdict, ...]
    summary: tuple[str, ...]
    source: str
    note: str | None = None
    blocklist: Blocklist | None = None
    no_blocklist: str = ""

    @property
    def failing(self) -> tuple[FitVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.fits)

    def count(self, status: str) -> int:
        return sum(1 for v in self.verdicts if v.status == status)

    def lines(self) -> list[str]:
        return list(self.summary) + ([self.note] if self.note else [])


@runtime_checkable
class KernelFamily(Protocol):
    """What every kernel family answers; fit, check, tune and diagnose talk only to this.

    `options` names the family-specific keyword options (CLI flags) its methods accept; methods
    take them as **options and ignore the ones that do not concern them.
    """

    name: str
    options: tuple[str, ...]
    picked_by: str  # AUTOTUNER or ENGINE: how an engine chooses this family's configs at warmup

    def dtypes(self, arch: Arch) -> Sequence[str]:
        """Data types this family supports on `arch`."""
        ...

    def configs(self, arch: Arch, dtype: str, **options: Any) -> Sequence[Any]:
        """The config space an engine would try on `arch` for `dtype` (`fused_finalize=False`
        leaves out configs with a fused finalize epilogue, where the family has them)."""
        ...

    def parse_config(self, text: str, dtype: str, **options: Any) -> Any:
        """A config from its CLI spelling; raises UsageError on bad input."""
        ...

    def expand(self, text: str, config: Any, arch: Arch, dtype: str, **options: Any) -> list[Any]:
        """The catalogued configs one CLI spelling stands for ([config] when it is exact)."""
        ...

    def footprint(self, config: Any, arch: Arch, dtype: str, **options: Any) -> SmemFootprint:
        """Shared memory `config` needs on `arch`, from the model (fast, no compiler)."""
        ...

    def verdict(self, config: Any, arch: Arch, dtype: str, **options: Any) -> FitVerdict:
        """Fits / exceeds / no dispatch, with the reason."""
        ...

    def judge(self, configs: Sequence[Any], arch: Arch, dtype: str, **options: Any) -> Judgement:
        """Verdicts on `configs` with the summary, source, caveat and blocklist (see `judgement`)."""
        ...

    def group(self, config: Any) -> str:
        """The autotuned operation a config belongs to (e.g. 'gemm2'), '' when there is one list."""
        ...

    def extrapolated(self, config: Any, dtype: str) -> bool:
        """Whether the footprint model was fitted without this config (its bytes are a formula)."""
        ...

    def tile(self, config: Any) -> tuple[str, int] | None:
        """(tile, pipeline depth) when shared memory grows with these two only, so that `fit` can
        show one row per tile at its deepest fitting depth; None otherwise."""
        ...

    def default_config(self, arch: Arch, dtype: str, **shape: Any) -> Any:
        """The config an engine uses when it has no tuned one."""
        ...

    def verify(self, configs: Sequence[Any], arch: Arch, dtype: str, **options: Any) -> list[OracleCheck]:
        """Compile `configs` with the family's oracle and compare with the model."""
        ...

    def summary(self, verdicts: Sequence[FitVerdict]) -> list[str]:
        """Lines for people about a set of verdicts."""
        ...

    def blocklist(self, verdicts: Sequence[FitVerdict], **options: Any) -> Blocklist | None:
        """What the engine reads to skip the failing configs among `verdicts`, None when the family
        has no such list; a UsageError when this version of the library cannot read one."""
        ...

    def source(self, **options: Any) -> str:
        """Where the configs come from, for people (e.g. 'FlashInfer 0.7.4'); '' when obvious."""
        ...

    def note(self, **options: Any) -> str | None:
        """A caveat about the options given (e.g. a version not catalogued), or None."""
        ...


def judgement(family: KernelFamily, configs: Sequence[Any], arch: Arch, dtype: str,
              **options: Any) -> Judgement:
    """The protocol's `judge`, written once: every family's `judge` returns this."""
    verdicts = tuple(family.verdict(c, arch, dtype, **options) for c in configs)
    failing = [v for v in verdicts if not v.fits]
    try:
        blocklist, why = family.blocklist(failing, **options), ""
    except UsageError as e:  # the family has a blocklist, this library version reads none
        blocklist, why = None, str(e)
    return Judgement(family.name, arch, dtype, verdicts, tuple(family.summary(verdicts)),
                     family.source(**options), family.note(**options), blocklist, why)


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
