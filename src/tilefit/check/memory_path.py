"""check's memory section: the device-memory plan of the deployment, as findings.

NO-GO when the engine's memory rule leaves no KV pool or one shorter than a request of the context
length; a warning when the estimated CUDA-graph and activation memory does not fit outside the pool;
the remedies are the settings the plan checked (memory fraction, KV dtype, context length, layout).
"""

from __future__ import annotations

from typing import Any

from tilefit.check.types import FATAL, INFO, WARNING, Finding, fix
from tilefit.memory import MemoryPlan, MemoryRequest, Parallel, Settings, engines, plan_memory
from tilefit.memory.render import gib, headline


def memory_plan(model: str, gpu: Any, engine: str, layout: Any, settings: Settings,
                version: str | None = None, a2a_backend: str = "none",
                preset: str | None = None) -> tuple[MemoryPlan | None, str]:
    """The plan for an engine tilefit has memory rules for (sglang, vLLM) and a model whose
    attention/vocabulary fields it can read and whose memory it models; else None and why (check
    then judges the expert weights alone)."""
    if engine not in engines():
        return None, f"tilefit has no memory rules for {engine}"
    from tilefit.errors import NotModelled, UsageError
    from tilefit.models.architecture import load_architecture

    arch = None
    for name in dict.fromkeys((model, preset) if preset else (model,)):
        try:
            arch = load_architecture(name)
            break
        except UsageError:  # a config without the fields the memory plan needs, or a hub id not cached
            continue
    if arch is None:
        return None, "the model's attention and vocabulary fields could not be read"
    parallel = Parallel.for_engine(engine, layout.gpus, layout.ep, layout.dp, a2a_backend)
    try:
        return plan_memory(MemoryRequest(arch, gpu, engine, parallel, settings, version)), ""
    except NotModelled as e:
        return None, str(e)


def memory_findings(plan: MemoryPlan) -> list[Finding]:
    kinds = ", ".join(f"{f.kind} {gib(f.bytes)}" for f in plan.weights if f.bytes)
    details = (f"weights per GPU: {kinds}", f"pool rule: {plan.pool.rule}",
               f"KV: {plan.kv.bytes_per_token:,} B per token ({plan.kv.basis})", *plan.notes)
    fixes = tuple(fix("memory", r.setting, r.effect) for r in plan.remedies)
    if plan.problems:
        return [Finding(FATAL, "memory-does-not-fit", f"the deployment does not fit in GPU memory: {plan.problems[0]}",
                        (headline(plan), *plan.problems[1:], *plan.warnings, *details), fixes)]
    if plan.warnings:
        return [Finding(WARNING, "memory-tight", f"GPU memory is tight: {plan.warnings[0]}",
                        (headline(plan), *details), fixes)]
    return [Finding(INFO, "memory", headline(plan), details)]
