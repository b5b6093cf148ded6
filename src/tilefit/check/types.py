"""The check's value types: the request, the findings with their fixes and the configs concerned,
what was checked, and the report. They stay typed up to the CLI, which calls `as_dict` for JSON or
reads the fields for text (check_cmd.blocks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilefit.engines import BackendChoice, Remedy, VersionRange
from tilefit.hw.catalog import GPU
from tilefit.kernels.base import FitVerdict
from tilefit.layout.plan import GemmShape, Layout
from tilefit.memory import MemoryPlan, Settings
from tilefit.memory.render import as_dict as memory_dict
from tilefit.models.types import MoEModel

DEFAULT_BATCHES = (1, 16, 64, 256, 1024, 4096)  # tokens per step, decode to prefill chunk

FATAL, WARNING, INFO = "fatal", "warning", "info"
SEVERITY_ORDER = {FATAL: 0, WARNING: 1, INFO: 2}
GO, GO_WITH_WARNINGS, NO_GO = "GO", "GO-WITH-WARNINGS", "NO-GO"


def fix(kind: str, setting: str, text: str, engine: str = "") -> Remedy:
    """A fix tilefit itself suggests (a command to run, a layout to try), as a Remedy."""
    return Remedy(engine=engine, kind=kind, setting=setting, text=text, versions=VersionRange(), sources=())


@dataclass(frozen=True, slots=True)
class Judged:
    """One config the engine will try, with its verdict; `batch` when it serves one batch size."""

    verdict: FitVerdict
    group: str = ""  # the autotuned operation (e.g. 'gemm2'), '' for one list
    batch: int | None = None

    def as_dict(self) -> dict[str, Any]:
        v, fp = self.verdict, self.verdict.footprint
        out: dict[str, Any] = {}
        if self.batch is not None:
            out["batch"] = self.batch
        if self.group:
            out |= {"gemm": self.group, "tactic": v.config.label()}
        return out | {"config": v.config.as_dict(), "status": v.status,
                      "smem_bytes": fp.total if fp else None, "limit_bytes": v.limit,
                      "stages": fp.stages if fp else None, "reason": v.reason}


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str  # FATAL | WARNING | INFO
    kind: str  # e.g. "tactics-cannot-launch", "default-config-exceeds-smem", "no-tuned-config"
    title: str
    details: tuple[str, ...] = ()
    remedies: tuple[Remedy, ...] = ()
    items: tuple[Judged, ...] = ()  # the configs/tactics concerned

    def as_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "kind": self.kind, "title": self.title,
                "details": list(self.details),
                "remedies": [r.as_dict() if r.sources else {"kind": r.kind, "setting": r.setting, "text": r.text}
                             for r in self.remedies],
                "items": [i.as_dict() for i in self.items]}


@dataclass(frozen=True, slots=True)
class Checked:
    """What was judged: how many configs, from where, and how many cannot launch. `what` reads
    in a sentence ('48 tactics of FlashInfer 0.7.4'); `fields` are the JSON keys of that path."""

    family: str
    dtype: str
    what: str
    total: int
    failing: int
    fields: tuple[tuple[str, Any], ...] = ()

    def line(self) -> str:
        return f"checked: {self.what}: {self.total - self.failing} fit, {self.failing} cannot launch"

    def as_dict(self) -> dict[str, Any]:
        return {"family": self.family, "dtype": self.dtype, **dict(self.fields),
                "fit": self.total - self.failing, "fail": self.failing}


@dataclass(frozen=True, slots=True)
class CheckRequest:
    model: str
    gpu: str
    engine: str
    tp: int = 1
    ep: int = 1
    dp: int = 1
    backend: str = "auto"
    engine_version: str | None = None
    # The kernel family's own options by name (fit's flags), e.g. (("flashinfer", "0.7.0"),).
    family_options: tuple[tuple[str, str], ...] = ()
    batches: tuple[int, ...] = DEFAULT_BATCHES
    config_dir: str | None = None
    # The environment the engine will start with (tuned-config folders, fused-finalize switch).
    environ: tuple[tuple[str, str], ...] = ()
    # From a launch command: the layout the engine builds (else engine.layout(tp, ep, dp)) and its
    # flags by the engine's own name, which some backend rules read (None: no command given).
    layout: Layout | None = None
    flags: tuple[tuple[str, str], ...] | None = None
    memory: Settings = field(default_factory=Settings)  # the deployment's memory settings (memory/)
    a2a_backend: str = "none"  # sglang --moe-a2a-backend (deepep keeps shared experts whole)

    @property
    def env(self) -> dict[str, str]:
        return dict(self.environ)


@dataclass(frozen=True, slots=True)
class CheckReport:
    verdict: str
    model: MoEModel
    gpu: GPU
    layout: Layout
    local_experts: int
    engine: str
    engine_version: str | None
    backend: BackendChoice
    gemms: tuple[GemmShape, ...]
    findings: tuple[Finding, ...]
    checked: Checked | None = field(default=None)
    memory: MemoryPlan | None = field(default=None)  # the device-memory plan (sglang, vLLM)

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == NO_GO else 0

    def ordered(self) -> list[Finding]:
        """Findings worst first (stable within a severity)."""
        return sorted(self.findings, key=lambda f: SEVERITY_ORDER[f.severity])

    def as_dict(self) -> dict[str, Any]:
        lay = self.layout
        version = self.engine_version or "not given (version-dependent behaviour assumed worst case)"
        return {"verdict": self.verdict, "model": self.model.as_dict(), "gpu": self.gpu.as_dict(),
                "layout": {"tp": lay.tp, "ep": lay.ep, "dp": lay.dp, "label": lay.label(), "gpus": lay.gpus,
                           "local_experts": self.local_experts},
                "engine": {"name": self.engine, "version": version},
                "backend": self.backend.as_dict(),
                "gemms": [{"name": g.name, "n": g.n, "k": g.k, "groups": g.groups} for g in self.gemms],
                "checked": self.checked.as_dict() if self.checked else {},
                "findings": [f.as_dict() for f in self.findings],
                "memory": memory_dict(self.memory) if self.memory else None}


def verdict_of(findings: list[Finding]) -> str:
    if any(f.severity == FATAL for f in findings):
        return NO_GO
    if any(f.severity == WARNING for f in findings):
        return GO_WITH_WARNINGS
    return GO
