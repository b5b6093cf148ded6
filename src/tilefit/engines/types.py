"""Value types for what the serving engines (sglang, vllm, trtllm) do with MoE kernels.

Every fact carries a `Source` (repository, path, the version read); `versions` ranges say where a
rule was verified, so a caller can tell "verified for your version" from "assumed". The engines
themselves (one module each, behind engines/base.py's protocol) answer with these values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch, get_arch
from tilefit.versions import parse_version as _parse_version

WEIGHT_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp8-block", "nvfp4", "mxfp4")
OVERRIDES: tuple[str, ...] = ("auto", "triton", "flashinfer-cutlass")


@dataclass(frozen=True, slots=True)
class Source:
    """Where a fact was read: 'sgl-project/sglang', a path, and the version/commit/date read."""

    repo: str
    path: str
    version: str
    note: str = ""

    def __str__(self) -> str:
        tail = f" ({self.note})" if self.note else ""
        return f"{self.repo}:{self.path} @ {self.version}{tail}"


@dataclass(frozen=True, slots=True)
class VersionRange:
    """Engine versions [low, high) where a rule holds; '' means unbounded on that side."""

    low: str = ""
    high: str = ""

    def contains(self, version: str | None) -> bool:
        if version is None:
            return True
        v = parse_version(version)
        if self.low and v < parse_version(self.low):
            return False
        return not (self.high and v >= parse_version(self.high))

    def __str__(self) -> str:
        if not self.low and not self.high:
            return "all versions read"
        if not self.high:
            return f">= {self.low}"
        if not self.low:
            return f"< {self.high}"
        return f">= {self.low}, < {self.high}"


def parse_version(version: str) -> tuple[int, int, int]:
    """'0.5.15.post1' -> (0, 5, 15); a string with no leading number is a UsageError."""
    return _parse_version(version, "engine version", "0.5.23 or 0.33.0")


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """Which tilefit kernel family an engine runs for a (weight dtype, arch), and why.

    `family_dtype` is the family's dtype name ('bf16', 'fp8' per-tensor, 'fp8-block' 128x128
    block-scaled, 'nvfp4', 'mxfp8-mxfp4');
    `block_shape` is (bn, bk) for block-scaled fp8, else None. `engine_backend` is the engine's
    own name for the backend and `selector` the flag/env/config that picks it.
    """

    engine: str
    weight_dtype: str
    arch: str
    family: str
    family_dtype: str
    block_shape: tuple[int, int] | None
    engine_backend: str
    rule: str
    selector: str
    versions: VersionRange
    sources: tuple[Source, ...] = field(compare=False)
    caveats: tuple[str, ...] = field(default=(), compare=False)
    overridden: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine, "weight_dtype": self.weight_dtype, "arch": self.arch,
            "family": self.family, "family_dtype": self.family_dtype,
            "block_shape": list(self.block_shape) if self.block_shape else None,
            "engine_backend": self.engine_backend, "rule": self.rule, "selector": self.selector,
            "verified_versions": str(self.versions), "overridden": self.overridden,
            "sources": [str(s) for s in self.sources], "caveats": list(self.caveats),
        }


@dataclass(frozen=True, slots=True)
class Fatality:
    """Whether a config/tactic that cannot launch kills the engine at warmup, and why."""

    engine: str
    family: str
    fatal: bool
    why: str
    log_line: str
    sources: tuple[Source, ...] = field(compare=False)

    def as_dict(self) -> dict[str, object]:
        return {"engine": self.engine, "family": self.family, "fatal": self.fatal,
                "why": self.why, "log_line": self.log_line,
                "sources": [str(s) for s in self.sources]}


@dataclass(frozen=True, slots=True)
class Remedy:
    """A fix in the engine's own terms. `kind`: tuned-config | blocklist | finalize | backend |
    warning. `setting` is what the user types (an env assignment, a flag, a YAML key), or ''
    where the engine has no such switch (then `text` says so)."""

    engine: str
    kind: str
    setting: str
    text: str
    versions: VersionRange
    sources: tuple[Source, ...] = field(compare=False)

    def as_dict(self) -> dict[str, object]:
        return {"engine": self.engine, "kind": self.kind, "setting": self.setting,
                "text": self.text, "verified_versions": str(self.versions),
                "sources": [str(s) for s in self.sources]}


@dataclass(frozen=True, slots=True)
class ConfigLookup:
    """Result of looking for an engine's tuned fused-MoE config file: the path the engine would
    load (or None, then it uses its default config), and every path tried, in the engine's order."""

    engine: str
    file_name: str
    found: Path | None
    tried: tuple[Path, ...]
    note: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"engine": self.engine, "file_name": self.file_name,
                "found": str(self.found) if self.found else None,
                "tried": [str(p) for p in self.tried], "note": self.note}


def check_arch(arch: Arch | str) -> Arch:
    """An Arch, or the catalog's entry for a name (a UsageError listing the known ones)."""
    return arch if isinstance(arch, Arch) else get_arch(str(arch))


def check_weight_dtype(dtype: str) -> str:
    d = str(dtype).strip().lower()
    if d not in WEIGHT_DTYPES:
        raise UsageError(f"unknown weight dtype {dtype!r}; use one of {', '.join(WEIGHT_DTYPES)}")
    return d


@dataclass(frozen=True, slots=True)
class FinalizeState:
    """Whether the engine lets FlashInfer/TensorRT-LLM use the fused FINALIZE epilogue for gemm2
    (and so profiles the FINALIZE tactics at warmup), and why. `enabled` is None when it depends
    on an engine version the caller did not give (`why` then says which versions do what)."""

    engine: str
    enabled: bool | None
    why: str
    sources: tuple[Source, ...] = field(compare=False)

    def as_dict(self) -> dict[str, object]:
        return {"engine": self.engine, "enabled": self.enabled, "why": self.why,
                "sources": [str(s) for s in self.sources]}


@dataclass(frozen=True, slots=True)
class SharedFusion:
    """Shared experts an engine appends to its fused MoE on every rank (0: none), and why: the
    fused MoE then runs local experts + that many, every token routed to each."""

    experts: int
    why: str


NO_FUSION = SharedFusion(0, "")


@dataclass(frozen=True, slots=True)
class ZeroRows:
    """What an engine's fused MoE writes for the (token, k) pairs routed to other ranks' experts
    under expert parallelism with replicated tokens: zeros to those rows of the named GEMMs'
    outputs (its blocks of expert -1), or nothing (the pairs dropped before the alignment, or a
    kernel that only sees local pairs); `why` says which, with the version read."""

    gemms: tuple[str, ...]  # "gemm1", "gemm2"
    why: str


NO_ZERO_ROWS = ZeroRows((), "")


@dataclass(frozen=True, slots=True)
class EpComm:
    """How an engine moves tokens between expert-parallel ranks for one deployment: "allreduce"
    (every rank gets every token, replicated or gathered, runs its local experts on them and the
    partial outputs are summed: an all-reduce, or an all-gather plus a reduce-scatter, which moves
    the same bytes) or "alltoall" (each token's top-k copies are dispatched to the ranks that hold
    those experts and combined back); `why` names the flag or default and the versions read."""

    mode: str  # "allreduce" | "alltoall"
    why: str


TRUE_WORDS = ("1", "true", "yes", "on")


def flag_on(flags: Mapping[str, str], name: str) -> bool:
    """A launch switch (or environment variable) given with a true value."""
    return str(flags.get(name, "")).strip().lower() in TRUE_WORDS
