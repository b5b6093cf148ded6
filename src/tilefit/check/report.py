"""The check's one entry point.

Flow: model + the engine's layout -> per-GPU GEMMs (layout.plan_layer); engine + weight dtype + arch
-> kernel family (the engine's backend()); the family's `picked_by` says how the engine chooses its
configs at warmup, which selects the path that judges them: `autotuned` (the engine profiles every
config the family lists) or `engine_configs` (the engine launches its tuned file's or its default's
config). The worst finding decides GO / GO-WITH-WARNINGS / NO-GO.
"""

from __future__ import annotations

from tilefit.check.autotuned import check_autotuned
from tilefit.check.engine_configs import check_engine_configs
from tilefit.check.memory_path import memory_findings, memory_plan
from tilefit.check.types import (
    FATAL, INFO, WARNING, CheckReport, CheckRequest, Finding, fix, verdict_of)
from tilefit.hw.catalog import GPU
from tilefit.kernels.base import AUTOTUNER, ENGINE
from tilefit.layout.plan import LayerPlan

PATHS = {AUTOTUNER: check_autotuned, ENGINE: check_engine_configs}

# Expert weights above this share of GPU memory leave too little for the KV cache and activations.
MEMORY_WARN_SHARE = 0.9


def _memory_findings(plan: LayerPlan, gpu: GPU, why: str) -> list[Finding]:
    """The MoE expert weights alone against GPU memory (a lower bound: attention, embeddings,
    KV cache and activations come on top); `why`: why there is no whole memory plan."""
    need = plan.weight_bytes_all_layers
    share = plan.memory_share(gpu.memory_bytes)
    text = (f"expert weights need {need / 2**30:,.1f} GiB per GPU ({plan.model.moe_layers} MoE layers, "
            f"{plan.model.weight_dtype}) of the {gpu.memory_bytes / 2**30:,.1f} GiB on {gpu.name} ({share:.0%}); "
            f"the rest of the memory is not planned: {why}")
    fixes = (fix("layout", "", "spread the experts over more GPUs (--ep/--tp) or use a quantized checkpoint; "
                 "`tilefit plan` shows the weight bytes per GPU of each layout"),)
    if share > 1:
        return [Finding(FATAL, "weights-exceed-memory", "the expert weights alone do not fit in GPU memory",
                        (text,), fixes)]
    if share > MEMORY_WARN_SHARE:
        return [Finding(WARNING, "weights-near-memory", "the expert weights leave little GPU memory for the KV "
                        "cache and activations", (text,), fixes)]
    return [Finding(INFO, "memory", text)]


def run_check(req: CheckRequest) -> CheckReport:
    from tilefit.engines import get_engine
    from tilefit.engines.registry import shared_fusion_of, with_a2a
    from tilefit.hw.catalog import get_gpu
    from tilefit.kernels.registry import get_family
    from tilefit.layout import plan_layer
    from tilefit.models import load_model

    model = load_model(req.model)
    gpu = get_gpu(req.gpu)
    engine = get_engine(req.engine)
    layout = req.layout or engine.layout(tp=req.tp, ep=req.ep, dp=req.dp)
    plan_layer(model, layout)  # the layout's divisibility errors first
    choice = engine.backend(model.weight_dtype, gpu.arch, layout=layout, version=req.engine_version,
                            override=req.backend, environ=req.env,
                            flags=with_a2a(req.flags, req.a2a_backend if engine.name == "sglang" else None),
                            architecture=model.hf_architecture)
    fusion = shared_fusion_of(engine, model, layout, gpu.arch, version=req.engine_version,
                              flags=dict(req.flags or ()), a2a=req.a2a_backend,
                              runner=choice.engine_backend)
    plan = plan_layer(model, layout, fusion.experts)
    family = get_family(choice.family)
    family_findings, checked = PATHS[family.picked_by](req, engine, family, choice, gpu, plan)
    if fusion.experts:
        family_findings.insert(1, Finding(INFO, "shared-experts-fused",
                                          f"{engine.name} runs the shared expert inside the fused MoE: "
                                          f"{plan.local_experts} experts per GPU", (fusion.why,)))
    mplan, why = memory_plan(req.model, gpu, engine.name, layout, req.memory, req.engine_version,
                             req.a2a_backend, preset=model.name)
    memory = memory_findings(mplan) if mplan is not None else _memory_findings(plan, gpu, why)
    findings = family_findings + memory
    return CheckReport(
        verdict=verdict_of(findings), model=model, gpu=gpu, layout=layout, local_experts=plan.local_experts,
        engine=engine.name, engine_version=req.engine_version, backend=choice, gemms=plan.gemms,
        findings=tuple(findings), checked=checked, memory=mplan)
