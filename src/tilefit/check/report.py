"""The check's value types and its one entry point.

Flow: model + layout -> per-GPU GEMMs (layout.plan_layer); engine + weight dtype + arch -> kernel
family (the engine's backend()); the family's path (cutlass_path / triton_path) judges what the
engine will try and returns findings; the worst finding decides GO / GO-WITH-WARNINGS / NO-GO.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_BATCHES = (1, 16, 64, 256, 1024, 4096)  # tokens per step, decode to prefill chunk

FATAL, WARNING, INFO = "fatal", "warning", "info"
GO, GO_WITH_WARNINGS, NO_GO = "GO", "GO-WITH-WARNINGS", "NO-GO"


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str  # FATAL | WARNING | INFO
    kind: str  # e.g. "tactics-exceed-smem", "default-config-exceeds-smem", "no-tuned-config"
    title: str
    details: tuple[str, ...] = ()
    remedies: tuple[dict[str, Any], ...] = ()  # engines.Remedy.as_dict() or {"setting", "text"}
    items: tuple[dict[str, Any], ...] = ()  # the configs/tactics concerned, as data

    def as_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "kind": self.kind, "title": self.title,
                "details": list(self.details), "remedies": list(self.remedies), "items": list(self.items)}


@dataclass(frozen=True, slots=True)
class CheckReport:
    verdict: str
    model: dict[str, Any]
    gpu: dict[str, Any]
    layout: dict[str, Any]
    engine: dict[str, Any]
    backend: dict[str, Any]
    gemms: tuple[dict[str, Any], ...]
    findings: tuple[Finding, ...]
    checked: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == NO_GO else 0

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "model": self.model, "gpu": self.gpu, "layout": self.layout,
                "engine": self.engine, "backend": self.backend, "gemms": list(self.gemms),
                "checked": self.checked, "findings": [f.as_dict() for f in self.findings]}


def verdict_of(findings: list[Finding]) -> str:
    if any(f.severity == FATAL for f in findings):
        return NO_GO
    if any(f.severity == WARNING for f in findings):
        return GO_WITH_WARNINGS
    return GO


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
    flashinfer: str | None = None
    batches: tuple[int, ...] = DEFAULT_BATCHES
    config_dir: str | None = None
    # The environment the engine will start with (tuned-config folders, fused-finalize switch).
    environ: tuple[tuple[str, str], ...] = ()
    # From a launch command: the layout the engine builds (else engine.layout(tp, ep, dp)) and its
    # flags by the engine's own name, which some backend rules read (None: no command given).
    layout: Any = None
    flags: tuple[tuple[str, str], ...] | None = None

    @property
    def env(self) -> dict[str, str]:
        return dict(self.environ)


# Expert weights above this share of GPU memory leave too little for the KV cache and activations.
MEMORY_WARN_SHARE = 0.9


def _memory_findings(plan: Any, gpu: Any) -> list[Finding]:
    """The MoE expert weights alone against GPU memory (a lower bound: attention, embeddings,
    KV cache and activations come on top)."""
    need = plan.weight_bytes_all_layers
    share = plan.memory_share(gpu.memory_bytes)
    text = (f"expert weights need {need / 2**30:,.1f} GiB per GPU ({plan.model.moe_layers} MoE layers, "
            f"{plan.model.weight_dtype}) of the {gpu.memory_gb:g} GiB on {gpu.name} ({share:.0%})")
    fixes = ({"kind": "layout", "setting": "", "text": "spread the experts over more GPUs (--ep/--tp) or use a "
              "quantized checkpoint; `tilefit plan` shows the weight bytes per GPU of each layout"},)
    if share > 1:
        return [Finding(FATAL, "weights-exceed-memory", "the expert weights alone do not fit in GPU memory",
                        (text,), fixes)]
    if share > MEMORY_WARN_SHARE:
        return [Finding(WARNING, "weights-near-memory", "the expert weights leave little GPU memory for the KV "
                        "cache and activations", (text,), fixes)]
    return [Finding(INFO, "memory", text)]


def run_check(req: CheckRequest) -> CheckReport:
    from tilefit.engines import get_engine
    from tilefit.hw.catalog import get_gpu
    from tilefit.layout import plan_layer
    from tilefit.models import load_model

    model = load_model(req.model)
    gpu = get_gpu(req.gpu)
    engine = get_engine(req.engine)
    layout = req.layout or engine.layout(tp=req.tp, ep=req.ep, dp=req.dp)
    plan = plan_layer(model, layout)
    choice = engine.backend(model.weight_dtype, gpu.arch, layout=layout, version=req.engine_version,
                            override=req.backend, environ=req.env,
                            flags=dict(req.flags) if req.flags is not None else None)
    findings = _memory_findings(plan, gpu)
    if choice.family == "flashinfer-cutlass":
        from tilefit.check.cutlass_path import check_cutlass

        family_findings, checked = check_cutlass(req, choice, gpu, plan)
    else:
        from tilefit.check.triton_path import check_triton

        family_findings, checked = check_triton(req, choice, gpu, plan)
    findings += family_findings
    return CheckReport(
        verdict=verdict_of(findings),
        model={"name": model.name, "weight_dtype": model.weight_dtype, "hidden_size": model.hidden_size,
               "expert_width": model.expert_width, "num_experts": model.num_experts, "top_k": model.top_k},
        gpu={"key": gpu.key, "name": gpu.name, "arch": gpu.arch.name,
             "smem_limit_bytes": gpu.arch.smem_per_block_optin},
        layout={"tp": layout.tp, "ep": layout.ep, "dp": layout.dp, "label": layout.label(),
                "gpus": layout.gpus, "local_experts": plan.local_experts},
        engine={"name": choice.engine,
                "version": req.engine_version or "not given (version-dependent behaviour assumed worst case)"},
        backend=choice.as_dict(),
        gemms=tuple({"name": g.name, "n": g.n, "k": g.k, "groups": g.groups} for g in plan.gemms),
        findings=tuple(findings),
        checked=checked,
    )
