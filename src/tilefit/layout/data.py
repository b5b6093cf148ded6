"""`plan`'s data: the per-GPU grouped GEMMs a model gets under a TP/EP layout, their weight bytes and
the tokens they see per batch size, as one JSON-ready dict (the CLI prints it)."""

from __future__ import annotations

from typing import Any


def plan_data(model_spec: str, gpu_name: str | None, tp: int, ep: int, dp: int,
              batches: tuple[int, ...], fused_shared: int = 0, fused_why: str = "") -> dict[str, Any]:
    """One MoE layer of `model_spec` under a tp x ep layout (attention dp): the per-GPU grouped GEMMs and
    their weight bytes, the share of the GPU's memory when one is named or present, and the token
    assignments each batch size gives under uniform top-k routing. `fused_shared`: shared experts
    the engine runs inside the fused MoE (Engine.shared_fusion), `fused_why` its reason."""
    from tilefit.hw.catalog import resolve_target
    from tilefit.layout.plan import Layout, plan_layer
    from tilefit.layout.routing import routing_stats
    from tilefit.models import load_model

    model = load_model(model_spec)
    layout = Layout(tp=tp, ep=ep, dp=dp)
    gpu, _ = resolve_target(gpu_name, None, required=False)
    plan = plan_layer(model, layout, fused_shared)
    stats = [routing_stats(b, model.num_experts, model.top_k, layout.ep) for b in batches]
    data: dict[str, Any] = {
        "model": {
            "name": model.name, "hidden_size": model.hidden_size, "expert_width": model.expert_width,
            "num_experts": model.num_experts, "top_k": model.top_k, "moe_layers": model.moe_layers,
            "num_layers": model.num_layers, "shared_experts": model.shared_experts,
            "shared_expert_width": model.shared_expert_width, "weight_dtype": model.weight_dtype,
            "source": model.source,
        },
        "layout": {"tp": layout.tp, "ep": layout.ep, "dp": layout.dp, "gpus": layout.gpus,
                   "label": layout.label()},
        "gpu": None if gpu is None else {"key": gpu.key, "name": gpu.name, "arch": gpu.arch.name,
                                         "memory_gb": gpu.memory_gb, "memory_bytes": gpu.memory_bytes,
                                         "memory_share": plan.memory_share(gpu.memory_bytes)},
        "local_experts": plan.local_experts,
        "padded_from": plan.padded_from,
        "gemms": [{"name": g.name, "n": g.n, "k": g.k, "local_experts": g.groups,
                   "weight_bytes": g.weight_bytes} for g in plan.gemms],
        "weight_bytes_per_layer": plan.weight_bytes_per_layer,
        "weight_bytes_all_moe_layers": plan.weight_bytes_all_layers,
        "batches": [{
            "batch": s.batch,
            "assignments_per_gpu_mean": s.assignments_per_gpu_mean,
            "assignments_per_gpu_p99": s.assignments_per_gpu_p99,
            "tokens_per_expert_mean": s.tokens_per_expert_mean,
            "tokens_per_expert_max_mean": s.tokens_per_expert_max_mean,
            "tokens_per_expert_p99": s.tokens_per_expert_p99,
            "active_experts_per_gpu_mean": s.active_experts_per_gpu_mean,
        } for s in stats],
        "routing": "uniform random top-k; " + (stats[0].method if stats else ""),
    }
    if fused_shared:
        data["shared_experts_fused"] = fused_why
    return data
