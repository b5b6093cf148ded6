"""The memory plan as rows and lines (the CLI lays them out as a table) or as a dict (JSON)."""

from __future__ import annotations

from typing import Any

from tilefit.memory.base import GIB
from tilefit.memory.plan import MemoryPlan


def newest(engine: str) -> str:
    from tilefit.memory.plan import rules_for

    return rules_for(engine).versions.split(", ")[-1]


def gib(b: int) -> str:
    return f"{b / GIB:,.2f} GiB"


def rows(plan: MemoryPlan) -> list[tuple[str, str, str]]:
    """(what, GiB per GPU, basis) rows: weights by kind, KV pool, start-up, runtime, free."""
    out = [(f"weights: {f.kind}", gib(f.bytes), f.basis) for f in plan.weights if f.bytes]
    out.append(("weights total", gib(plan.weight_bytes), ""))
    out.append(("KV cache pool", gib(plan.kv_pool_bytes), f"{plan.kv_tokens:,} tokens x "
                f"{plan.kv.bytes_per_token:,} B ({plan.kv.basis})"))
    out += [(f"start-up: {f.kind}", gib(f.bytes), f.basis) for f in plan.pool.startup if f.bytes]
    out += [(f"runtime: {f.kind}", gib(f.bytes), f.basis) for f in plan.pool.runtime if f.bytes]
    out.append(("free", gib(plan.free_bytes), f"of {gib(plan.total)} ({plan.request.gpu.memory_mib or '?'} MiB "
                "reported by the driver)"))
    return out


def headline(plan: MemoryPlan) -> str:
    r, s = plan.request, plan.settings
    engine = f"{r.engine} {r.version}" if r.version else f"{r.engine} (rules of {r.engine} {newest(r.engine)})"
    line = (f"{plan.verdict}: {r.arch.moe.name} on {plan.placement.gpus} x {r.gpu.name}, {engine}, "
            f"memory fraction {s.mem_fraction:g}, KV {s.kv_dtype}: {plan.kv_tokens:,} KV tokens per GPU")
    if plan.concurrency is not None:
        line += f", {plan.concurrency:.2f} requests of {s.context_length:,} tokens at once"
    return line


def footer(plan: MemoryPlan) -> list[str]:
    lines = [f"max running requests: {plan.max_requests:,} ({plan.request.engine}'s limit for these settings)"]
    lines += [f"[NO-GO] {p}" for p in plan.problems]
    lines += [f"[WARNING] {w}" for w in plan.warnings]
    lines += [f"note: {n}" for n in plan.notes]
    lines += [f"    fix: {rem.setting}  ({rem.effect})" for rem in plan.remedies]
    return lines


def as_dict(plan: MemoryPlan) -> dict[str, Any]:
    s = plan.settings
    return {
        "verdict": plan.verdict,
        "engine": plan.request.engine,
        "gpus": plan.placement.gpus,
        "gpu_memory_bytes": plan.total,
        "settings": {"mem_fraction": s.mem_fraction, "context_length": s.context_length,
                     "max_running_requests": s.max_running_requests, "kv_dtype": s.kv_dtype,
                     "chunked_prefill": s.chunked_prefill, "cuda_graph_max_bs": s.cuda_graph_max_bs},
        "weights_bytes": {f.kind: f.bytes for f in plan.weights},
        "weights_total_bytes": plan.weight_bytes,
        "kv": {"tokens": plan.kv_tokens, "bytes_per_token": plan.kv.bytes_per_token, "dtype": plan.kv.dtype,
               "pool_bytes": plan.kv_pool_bytes, "basis": plan.kv.basis},
        "startup_bytes": {f.kind: f.bytes for f in plan.pool.startup},
        "runtime_bytes": {f.kind: f.bytes for f in plan.pool.runtime},
        "free_bytes": plan.free_bytes,
        "max_running_requests": plan.max_requests,
        "concurrency_at_context": plan.concurrency,
        "pool_rule": plan.pool.rule,
        "estimates": sorted({f.kind for f in (*plan.pool.startup, *plan.pool.runtime) if f.is_estimate}),
        "problems": list(plan.problems),
        "warnings": list(plan.warnings),
        "remedies": [{"setting": r.setting, "effect": r.effect} for r in plan.remedies],
        "notes": list(plan.notes),
    }


def compare_rows(plans: dict[str, MemoryPlan]) -> tuple[list[str], list[tuple[str, ...]]]:
    """Several plans side by side (one column each): weights by kind, KV pool, the rest, free,
    KV tokens and concurrency. Headers and rows for a table."""
    labels = list(plans)
    kinds = [f.kind for f in next(iter(plans.values())).weights]
    rows: list[tuple[str, ...]] = []
    for i, kind in enumerate(kinds):
        if any(p.weights[i].bytes for p in plans.values()):
            rows.append((f"weights: {kind}", *(gib(p.weights[i].bytes) for p in plans.values())))
    rows.append(("weights total", *(gib(p.weight_bytes) for p in plans.values())))
    rows.append(("KV cache pool", *(gib(p.kv_pool_bytes) for p in plans.values())))
    rows.append(("start-up (context, NCCL, reserve)", *(gib(p.startup_bytes) for p in plans.values())))
    rows.append(("runtime (graphs, activations)", *(gib(p.runtime_bytes) for p in plans.values())))
    rows.append(("free", *(gib(p.free_bytes) for p in plans.values())))
    rows.append(("KV tokens per GPU", *(f"{p.kv_tokens:,}" for p in plans.values())))
    rows.append(("requests at full context", *(f"{p.concurrency:.2f}" if p.concurrency is not None else "-"
                                               for p in plans.values())))
    rows.append(("verdict", *(p.verdict for p in plans.values())))
    return ["per GPU", *labels], rows
