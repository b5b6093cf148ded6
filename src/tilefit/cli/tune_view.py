"""`tilefit tune`'s text summary: the picks per GEMM and batch, how each was timed, the floors,
and where the run's limits came from."""

from __future__ import annotations

from typing import Any


def render(report: Any, graph: Any = None, scales: str | None = None, searched: str | None = None,
           swap_ab: bool = False, fused: str | None = None) -> str:
    """The summary; `graph` (a tune.graph_limit.GraphLimit) says up to which batch rows were
    graph-timed, `scales` how fp8-block weight scales were applied (None: not fp8-block),
    `searched` which part of the grid was searched (None: all of it), `swap_ab` whether the
    narrow-row fp8 tiles were computed swapped, `fused` why the shared expert was tuned inside
    the fused MoE (None: it was not)."""
    from tilefit.cli.output import table
    from tilefit.tune.results import describe

    measured = report.ceilings is not None
    rows = []
    for r in report.rows:
        row = [r.job, r.batch, r.config.label() if r.config else "-", r.timing, r.time_us,
               r.pct_of_floor]
        if measured:
            row.append(r.pct_of_catalog_floor)
        rows.append(row + [r.default_us, r.speedup, r.trials, r.exhaustive_us])
    floor_heads = ["% of floor", "% of catalog floor"] if measured else ["% of catalog floor"]
    lines = [table(["gemm", "batch", "config", "timing", "time us", *floor_heads, "default us",
                    "speedup", "trials", "exhaustive us"], rows)]
    lines.append("")
    lines.append("time us: the pick's median over the finalists' quiet re-timing rounds "
                 "(timing: cuda-graph = per launch in graph replays over weights larger than L2; "
                 "events = do_bench, host launch inside)")
    if graph is not None:
        lines.append(graph.line())
    if scales is not None:
        lines.append(f"fp8 block weight scales applied per {scales}: as the engines whose files "
                     f"are written apply them (per column without --emit)")
    if searched:
        lines.append(searched)
    if swap_ab:
        lines.append("fp8 tiles with BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64 computed as B^T A^T, "
                     "as the engines written for run them on this GPU (swap-AB)")
    if fused:
        lines.append(f"shared expert tuned inside the fused MoE: {fused}")
    if report.ceilings is not None:
        lines.append(report.ceilings.line())
        over = sum(1 for r in report.rows if (r.pct_of_floor or 0.0) > 100.0)
        if over:  # H200, session 9: GLM-5 weights streamed at 4.55 TB/s against a 4.22 TB/s copy
            lines.append(f"{over} row{'s' if over > 1 else ''} above 100% of the measured floor: "
                         f"the kernel read memory faster than the measured copy (which reads and "
                         f"writes); the catalog floor is the hard bound")
    lines.append(f"{report.wall_s:,.1f} s; worker restarts {report.worker_restarts}; "
                 f"{report.resumed_entries} journal entries resumed")
    if report.stale_entries:
        lines.append(f"{report.stale_entries} journal entries from {'; '.join(report.stale_contexts)} "
                     f"were measured again (another GPU or other Triton/torch versions)")
    for f in report.files:
        lines.append(f"wrote {f}")
    if report.figures is not None:
        lines += report.figures.lines()
    for bug in report.model_bugs:
        lines.append(f"SMEM MODEL BUG: {bug.config.label()} ({bug.shape}) passed the prefilter "
                     f"but failed at launch: {describe(bug.result)}")
    return "\n".join(lines)
