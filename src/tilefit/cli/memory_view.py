"""Text layout of a memory plan for `plan --memory` and `check`: headline, table, verdict lines."""

from __future__ import annotations

from tilefit.cli.output import table
from tilefit.memory.plan import MemoryPlan
from tilefit.memory.render import compare_rows, footer, headline, rows


def render_memory(plan: MemoryPlan) -> str:
    lines = [headline(plan), f"pool rule: {plan.pool.rule}"]
    lines += [f"layout: {n}" for n in plan.placement.notes]
    lines += ["", table(["per GPU", "memory", "basis"], rows(plan), align="lrl"), ""]
    return "\n".join(lines + footer(plan))


def render_memory_table(plan: MemoryPlan) -> str:
    """The per-GPU table alone (check prints the verdict, pool rule and fixes as its finding)."""
    lines = [f"layout: {n}" for n in plan.placement.notes]
    return "\n".join([*lines, table(["per GPU", "memory", "basis"], rows(plan), align="lrl")])


def render_comparison(plans: dict[str, MemoryPlan]) -> str:
    headers, rows = compare_rows(plans)
    return table(headers, rows, align="l" + "r" * (len(headers) - 1))
