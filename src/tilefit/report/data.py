"""The numbers each figure of the report draws, as frozen values built from tilefit's models or from
recorded results; no plotting library here, so tests can check the data and the drawing apart.

fit maps   <- the triton-moe family's shared-memory model, per arch (cells: BLOCK_M x BLOCK_N,
              panels: BLOCK_K x num_stages)
tactics    <- the flashinfer-cutlass family's footprints, grouped by GEMM and fusion
tuning     <- a `tilefit tune` summary (tune_summary.json, or a benchmarks/results/tune_*.json) or
              its journal (tuned times only)
layouts    <- a `tilefit compare` JSON (predicted, and measured where --measure ran) or the model
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# Cell verdicts of a fit map: every config of the tile and depth fits, only some do (num_warps
# changes the footprint on some archs), or none does.
FITS, SOME, EXCEEDS = "fits", "some", "exceeds"


@dataclass(frozen=True, slots=True)
class FitCell:
    block_m: int
    block_n: int
    block_k: int
    stages: int
    bytes: int      # the largest footprint among the cell's configs
    limit: int
    verdict: str    # FITS | SOME | EXCEEDS

    @property
    def margin(self) -> int:
        """Bytes left under the limit by the largest config of the cell (negative: over)."""
        return self.limit - self.bytes


@dataclass(frozen=True, slots=True)
class FitMap:
    arch: str
    dtype: str
    limit: int
    cells: tuple[FitCell, ...]

    def axis(self, name: str) -> tuple[int, ...]:
        return tuple(sorted({getattr(c, name) for c in self.cells}))

    def cell(self, block_m: int, block_n: int, block_k: int, stages: int) -> FitCell | None:
        for c in self.cells:
            if (c.block_m, c.block_n, c.block_k, c.stages) == (block_m, block_n, block_k, stages):
                return c
        return None


def fit_map(arch_name: str, dtype: str) -> FitMap:
    """Every (tile, depth) of the triton-moe grid on `arch_name`, judged by the family's model."""
    from tilefit.hw.catalog import get_arch
    from tilefit.kernels.registry import get_family

    family, arch = get_family("triton-moe"), get_arch(arch_name)
    groups: dict[tuple[int, int, int, int], list[Any]] = {}
    for config in family.configs(arch, dtype):
        v = family.verdict(config, arch, dtype)
        key = (config.block_m, config.block_n, config.block_k, config.num_stages)
        groups.setdefault(key, []).append(v)
    cells = []
    for (bm, bn, bk, stages), verdicts in sorted(groups.items()):
        fitting = sum(v.fits for v in verdicts)
        verdict = FITS if fitting == len(verdicts) else SOME if fitting else EXCEEDS
        cells.append(FitCell(bm, bn, bk, stages, max(v.footprint.total for v in verdicts),
                             arch.smem_per_block_optin, verdict))
    return FitMap(arch.name, dtype, arch.smem_per_block_optin, tuple(cells))


@dataclass(frozen=True, slots=True)
class TacticBar:
    label: str
    bytes: int
    fits: bool
    reason: str


@dataclass(frozen=True, slots=True)
class TacticGroup:
    gemm: str
    fusion: str
    bars: tuple[TacticBar, ...]


@dataclass(frozen=True, slots=True)
class TacticBars:
    arch: str
    dtype: str
    flashinfer: str
    limit: int
    groups: tuple[TacticGroup, ...]


def tactic_bars(arch_name: str, dtype: str, flashinfer: str | None = None) -> TacticBars:
    """FlashInfer's CUTLASS MoE tactics on `arch_name`: bytes against the limit, by GEMM and fusion."""
    from tilefit.hw.catalog import get_arch
    from tilefit.kernels.registry import get_family

    family, arch = get_family("flashinfer-cutlass"), get_arch(arch_name)
    options = {"flashinfer": flashinfer} if flashinfer else {}
    groups: dict[tuple[str, str], list[TacticBar]] = {}
    for config in family.configs(arch, dtype, **options):
        v = family.verdict(config, arch, dtype, **options)
        d = config.as_dict()
        key = (str(d.get("gemm", "")), str(d.get("fusion") or "none"))
        groups.setdefault(key, []).append(
            TacticBar(config.label(), v.footprint.total if v.footprint else 0, v.fits, v.reason))
    return TacticBars(arch.name, dtype, flashinfer or "latest catalogued", arch.smem_per_block_optin,
                      tuple(TacticGroup(g, f, tuple(bars)) for (g, f), bars in sorted(groups.items())))


@dataclass(frozen=True, slots=True)
class TunePoint:
    batch: int
    tuned_us: float | None
    default_us: float | None
    floor_us: float | None
    config: str | None

    @property
    def tuned_pct_of_floor(self) -> float | None:
        return None if not (self.tuned_us and self.floor_us) else 100.0 * self.floor_us / self.tuned_us

    @property
    def default_pct_of_floor(self) -> float | None:
        return None if not (self.default_us and self.floor_us) else 100.0 * self.floor_us / self.default_us

    @property
    def speedup(self) -> float | None:
        return None if not (self.tuned_us and self.default_us) else self.default_us / self.tuned_us


@dataclass(frozen=True, slots=True)
class TuneCurve:
    """One GEMM's tuning results across batch sizes."""

    title: str   # e.g. "ep8 gemm1" or the summary's shape
    job: str
    points: tuple[TunePoint, ...]


def tune_curves(data: Any, name: str) -> tuple[TuneCurve, ...]:
    """Curves from a tune summary or recorded results (a dict with "rows"), or from journal lines
    (a list of entries: tuned times only, the best Ok per shape and batch)."""
    if isinstance(data, dict):
        rows = data.get("rows")
        if not isinstance(rows, list):
            raise ValueError("no \"rows\" list: not a tilefit tune summary")
        label = str(data.get("layout") or name)
        by_job: dict[str, list[TunePoint]] = {}
        for r in rows:
            by_job.setdefault(str(r["job"]), []).append(TunePoint(
                int(r["batch"]), r.get("time_us"), r.get("default_us"), r.get("floor_us"), r.get("config")))
        return tuple(TuneCurve(f"{label} {job}", job, tuple(sorted(pts, key=lambda p: p.batch)))
                     for job, pts in by_job.items())
    best: dict[tuple[str, int], tuple[float, str]] = {}
    for e in data:
        if e.batch is None or getattr(e.result, "kind", "") != "ok":
            continue
        key = (e.shape, e.batch)
        if key not in best or e.result.time_us < best[key][0]:
            best[key] = (e.result.time_us, e.config.label())
    shapes = dict.fromkeys(s for s, _ in sorted(best))
    return tuple(TuneCurve(f"{name} {shape.split(':')[0]}", shape.split(":")[0], tuple(
        TunePoint(b, t, None, None, c) for (s, b), (t, c) in sorted(best.items()) if s == shape))
        for shape in shapes)


@dataclass(frozen=True, slots=True)
class LayoutPoint:
    batch: int
    gemm_us: float
    comm_us: float
    total_us: float
    measured_gemm_us: float | None = None
    measured_comm_us: float | None = None
    measured_total_us: float | None = None


@dataclass(frozen=True, slots=True)
class LayoutCurves:
    """TP vs EP for one deployment: per layout, one MoE layer's time on the busiest GPU."""

    title: str
    layouts: tuple[tuple[str, tuple[LayoutPoint, ...]], ...]
    crossovers: tuple[tuple[str, float, str, str], ...]  # (predicted|measured, batch, from, to)


def layout_curves(data: dict[str, Any]) -> LayoutCurves:
    """From a `tilefit compare --json` document (recorded or computed)."""
    by_layout: dict[str, list[LayoutPoint]] = {}
    for r in data["rows"]:
        m = r.get("measured") or {}
        by_layout.setdefault(str(r["layout"]), []).append(LayoutPoint(
            int(r["batch"]), float(r["gemm_us"]), float(r["comm_us"]), float(r["total_us"]),
            m.get("gemm_us"), m.get("comm_us"), m.get("total_us")))
    layouts = tuple((k, tuple(sorted(v, key=lambda p: p.batch))) for k, v in by_layout.items())
    crossovers = _crossovers(layouts, "predicted", lambda p: p.total_us) + \
        _crossovers(layouts, "measured", lambda p: p.measured_total_us)
    title = f"{data.get('model', '?')} on {data.get('gpus', '?')} x {data.get('gpu_name') or data.get('gpu', '?')}"
    return LayoutCurves(title, layouts, crossovers)


def _crossovers(layouts: Sequence[tuple[str, Sequence[LayoutPoint]]], kind: str,
                value: Any) -> tuple[tuple[str, float, str, str], ...]:
    """Where the fastest layout changes between two neighbouring batch sizes; the batch is where the
    two layouts' times, interpolated on log2(batch), are equal."""
    import math

    batches = sorted({p.batch for _, pts in layouts for p in pts})
    table = {(name, p.batch): value(p) for name, pts in layouts for p in pts}

    def winner(b: int) -> str | None:
        times = [(table.get((name, b)), name) for name, _ in layouts]
        times = [(t, n) for t, n in times if t is not None]
        return min(times)[1] if len(times) == len(layouts) and times else None

    out = []
    for lo, hi in zip(batches, batches[1:]):
        a, b = winner(lo), winner(hi)
        if a is None or b is None or a == b:
            continue
        # d(x) = time(a) - time(b) changes sign between lo and hi: interpolate on log2(batch).
        d_lo = table[(a, lo)] - table[(b, lo)]
        d_hi = table[(a, hi)] - table[(b, hi)]
        x0, x1 = math.log2(lo), math.log2(hi)
        x = x0 + (x1 - x0) * d_lo / (d_lo - d_hi) if d_lo != d_hi else x0
        out.append((kind, round(2 ** x, 1), a, b))
    return tuple(out)


def merge_names(names: Iterable[str]) -> str:
    return ", ".join(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class MemoryBar:
    layout: str
    parts: tuple[tuple[str, int], ...]  # (what, bytes per GPU): weights by kind, KV pool, start-up, runtime, free
    verdict: str
    kv_tokens: int


@dataclass(frozen=True, slots=True)
class MemoryStack:
    """Per-GPU device memory by kind for each layout, from the memory plan (tilefit.memory)."""

    title: str
    engine: str
    total: int
    bars: tuple[MemoryBar, ...]


def memory_stack(model: str, gpu: str, engine: str, layouts: Sequence[tuple[int, int]]) -> MemoryStack:
    """The engine's memory plan (its defaults for every setting) for each (tp, ep) layout."""
    from tilefit.memory import plan_memory, request_for

    bars, total, title = [], 0, ""
    for tp, ep in layouts:
        plan = plan_memory(request_for(model, gpu, engine, tp * ep, ep))
        parts = [(f"weights: {f.kind}", f.bytes) for f in plan.weights if f.bytes]
        parts.append(("KV cache pool", plan.kv_pool_bytes))
        parts += [(f"start-up: {f.kind}", f.bytes) for f in plan.pool.startup if f.bytes]
        parts += [(f"runtime: {f.kind}", f.bytes) for f in plan.pool.runtime if f.bytes]
        parts.append(("free", max(0, plan.free_bytes)))
        label = "x".join(f"{k}{v}" for k, v in (("TP", tp), ("EP", ep)) if v > 1) or "TP1"
        bars.append(MemoryBar(label, tuple(parts), plan.verdict, plan.kv_tokens))
        total = plan.total
        title = f"{plan.request.arch.moe.name} on {plan.placement.gpus} x {plan.request.gpu.name}"
    return MemoryStack(title, engine, total, tuple(bars))
