"""Device-memory plan: weights per GPU by kind, the KV pool each engine's memory rule allocates,
what else start-up takes, and whether a deployment fits (see memory/plan.py)."""

from tilefit.memory.base import Figure, KVLayout, MemoryRequest, Parallel, Placement, Pool, Settings
from tilefit.memory.plan import MemoryPlan, Remedy, engines, plan_memory, request_for, rules_for

__all__ = ["Figure", "KVLayout", "MemoryPlan", "MemoryRequest", "Parallel", "Placement", "Pool", "Remedy",
           "Settings", "engines", "plan_memory", "request_for", "rules_for"]
