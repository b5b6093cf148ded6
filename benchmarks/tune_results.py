"""bench_tune.py's result files, read and rewritten with no GPU: the layer a result's model and
layout name (GLM-5's when the file names no model, as before session 10), `--refloor` (floors recomputed from the timed routing draw), `--summarize` (the markdown
tables of benchmarks/RESULTS.md) and `--rebuild` (a result file from a run's work folder). Kept apart from the runs, which need the GPU.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


MODEL = "glm-5"  # the model every result before session 10 tuned (its files carry no "model")


def layer_shape(layout: str, dtype: str, model: str = MODEL) -> Any:
    """One GPU's expert GEMMs of `model` under `layout` ("ep8", "tp8", ...), from the planner
    (which refuses a layout the model's weights cannot take, e.g. a slice of an fp8 scale block)."""
    from tilefit.compare.layouts import parse_layout
    from tilefit.layout import Layout, plan_layer
    from tilefit.models import load_model
    from tilefit.tune.targets.base import TuneShape

    m = load_model(model)
    tp, ep = parse_layout(layout)
    return TuneShape.of_layer(m, plan_layer(m, Layout(tp=tp, ep=ep)), dtype)


def result_stem(model: str, layout: str, dtype: str, tag: str) -> str:
    """A result file's name without .json: GLM-5's keep session 3's `tune_glm5_...`."""
    name = "glm5" if model == MODEL else model
    return f"tune_{name}_{layout}_{dtype}_{tag}"


def sweep_journal(against: str, model: str, layout: str, dtype: str) -> Path:
    """A recorded exhaustive sweep's journal in `against`: LAYOUT_DTYPE_exhaustive.jsonl.gz for
    GLM-5 (session 3's names; fp8-block as "fp8"), MODEL_LAYOUT_... for another model."""
    name = f"{layout}_{dtype.replace('-block', '')}_exhaustive.jsonl.gz"
    return Path(against) / (name if model == MODEL else f"{model}_{name}")


def refloor(path: str) -> None:
    """Recompute a result file's floors from the timed routing draw (rows and experts actually
    hit, as `tune` now does) with its measured ceilings; no GPU needed. For results measured
    before the floor used the draw instead of its expectation."""
    from tilefit.hw.catalog import get_gpu
    from tilefit.tune.ceilings import Ceilings
    from tilefit.tune.perfmodel import Device, floor_us
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    d = json.loads(Path(path).read_text())
    if d["dtype"] == "fp8":  # results written before the rename: "fp8" was the block-scaled kernel
        d["dtype"] = "fp8-block"
    layer = layer_shape(d["layout"], d["dtype"], d.get("model", MODEL))
    catalog = Device.from_gpu(get_gpu("h200"), d["dtype"])
    measured = Ceilings(**d["ceilings"]).device(catalog)
    target = TilefitMoETarget(gpu="h200")
    for r in d["rows"]:
        shape, t = layer.with_gemm(r["job"]), r["time_us"]
        routed = target.routed(shape, r["batch"])
        r["routed"] = {"rows": routed.rows, "experts": routed.experts}
        r["floor_us"] = floor_us(shape, r["batch"], measured, routed)
        r["floor_us_catalog"] = floor_us(shape, r["batch"], catalog, routed)
        r["pct_of_floor"] = 100.0 * r["floor_us"] / t if t else None
        r["pct_of_catalog_floor"] = 100.0 * r["floor_us_catalog"] / t if t else None
    d["floor"] = "from the timed routing draw's rows and experts (recomputed with --refloor)"
    Path(path).write_text(json.dumps(d, indent=1) + "\n")


def summarize(paths: list[str]) -> str:
    out = []
    for p in paths:
        d = json.loads(Path(p).read_text())
        model = "GLM-5" if d.get("model", MODEL) == MODEL else d["model"]
        out += [f"## {model} {d['layout'].upper()} {d['dtype']} on {d['device_name']}", ""]
        c = d.get("ceilings")
        if c:
            out.append(f"Measured at the start ({c['seconds']:.1f} s): copy {c['copy_gbps']:,.0f} GB/s "
                       f"(catalog {c['catalog_gbps']:,.0f}), {c['dtype']} MMA {c['mma_tflops']:,.0f} "
                       f"TFLOP/s (catalog {c['catalog_tflops']:,.0f}; {c['mma_how']}). {d['timing']}.")
        line = f"Fast tuning, {len(d['rows'])} rows: {d['fast_s']:,.1f} s ({d['fast_compiles']} compiles)."
        if "exhaustive_s" in d:
            line += (f" Exhaustive sweep at {d['checked']}: {d['exhaustive_s']:,.1f} s "
                     f"({d['exhaustive_compiles']} compiles), extrapolated to every batch size "
                     f"{d['exhaustive_extrapolated_s']:,.1f} s: fast/exhaustive "
                     f"{100 * d['fast_over_exhaustive_time']:.1f}%.")
        out += [line, ""]
        out.append("| gemm | batch | timing | config | us | % floor | % catalog floor | default us | "
                   "speedup | trials | exhaustive best us | pick/exh | grouped_mm us | x grouped_mm |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

        def f(v: Any, fmt: str = "{:.2f}") -> str:
            return "-" if v is None or isinstance(v, str) else fmt.format(v)
        for r in d["rows"]:
            out.append(f"| {r['job']} | {r['batch']} | {r['timing']} | {r['config']} | {f(r['time_us'])} | "
                       f"{f(r['pct_of_floor'], '{:.1f}')} | {f(r['pct_of_catalog_floor'], '{:.1f}')} | "
                       f"{f(r['default_us'])} | {f(r['speedup_over_default'])} | {r['trials']} | "
                       f"{f(r.get('exhaustive_best_us'))} | {f(r.get('pick_over_exhaustive'), '{:.4f}')} | "
                       f"{f(r.get('grouped_mm_us'))} | {f(r.get('speedup_over_grouped_mm'))} |")
        out.append("")
    return "\n".join(out)


def paired_over(mine: list[float | None], others: list[list[float | None]]) -> float | None:
    """The pick against each of `others` in the rounds both ran (the median of the per-round
    ratios: a GPU that runs slower in later rounds slows both alike), the worst of them. Round i
    of one is paired with round i of the other; a round either failed is left out."""
    import statistics

    def timed(a: float | None, b: float | None) -> bool:  # a failed round is None or inf
        return bool(a and b and math.isfinite(a) and math.isfinite(b))

    ratios = [statistics.median(a / b for a, b in zip(mine, o) if timed(a, b)) for o in others
              if any(timed(a, b) for a, b in zip(mine, o))]
    return max(ratios) if ratios else None


def _check_from_journal(folder: Path) -> dict[str, Any]:
    """The check's rows from its journal's re-timing lines, for a check cut short before it wrote
    its summary: per (job, batch), every config's rounds (shape key "retime<r>:...")."""
    import statistics

    from tilefit.tune.journal import read_entries
    from tilefit.tune.targets.base import MOE_SPACE

    rounds: dict[tuple[str, int], dict[Any, dict[int, float]]] = {}
    for e in read_entries(folder / "journal.jsonl", MOE_SPACE.from_dict):
        head, _, rest = e.shape.partition(":")
        if e.batch is not None and head.startswith("retime") and hasattr(e.result, "time_us"):
            seen = rounds.setdefault((rest.split(":")[0], e.batch), {}).setdefault(e.config, {})
            seen[int(head[len("retime"):])] = e.result.time_us
    rows = [{"job": job, "batch": batch, "finalists": [
        {"config": c.label(), "rounds_us": [r.get(i) for i in range(max(r) + 1)],  # None: failed
         "median_us": statistics.median(r.values())} for c, r in configs.items()]}
        for (job, batch), configs in sorted(rounds.items())]
    return {"rows": rows, "model_bugs": [], "worker_restarts": 0}


def recorded_best(path: Path, batches: tuple[int, ...], top: int = 4) -> dict[tuple[str, int], list[Any]]:
    """{(job, batch): the `top` configs a recorded exhaustive sweep's journal timed fastest}: the
    sweep's own finalists, so a new pick can be re-timed against them without sweeping again."""
    import gzip
    import os
    import tempfile

    from tilefit.tune.journal import read_entries
    from tilefit.tune.results import Ok
    from tilefit.tune.targets.base import MOE_SPACE

    unpacked = None
    if path.suffix == ".gz":
        with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as tmp:
            tmp.write(gzip.decompress(path.read_bytes()))
        path = unpacked = Path(tmp.name)
    timed: dict[tuple[str, int], dict[Any, float]] = {}
    try:
        for e in read_entries(path, MOE_SPACE.from_dict):
            job = e.shape.split(":")[0]
            if e.batch in batches and job in ("gemm1", "gemm2") and isinstance(e.result, Ok):
                seen = timed.setdefault((job, e.batch), {})
                seen[e.config] = min(seen.get(e.config, float("inf")), e.result.time_us)
    finally:
        if unpacked is not None:
            os.unlink(unpacked)
    return {k: sorted(v, key=lambda c: (v[c], c))[:top] for k, v in timed.items()}


def rebuild(work: str, layout: str, dtype: str, against: str, tag: str,
            model: str = MODEL) -> dict[str, Any]:
    """A bench_tune result file from a run's work folder (`--work`: LAYOUT/fast and LAYOUT/check,
    each with its journal and tune_summary.json), for a run whose result file did not come back
    from the GPU host. The check's picks are judged as bench_tune's --against does."""
    from tilefit.tune.journal import active_seconds, read_entries
    from tilefit.tune.targets.base import MOE_SPACE

    root = Path(work) / layout
    fast = json.loads((root / "fast" / "tune_summary.json").read_text())
    summary = root / "check" / "tune_summary.json"
    check = json.loads(summary.read_text()) if summary.exists() else _check_from_journal(root / "check")
    checked = sorted({r["batch"] for r in check["rows"]})
    sweep = sweep_journal(against, model, layout, dtype)
    best = {k: {c.label() for c in cs} for k, cs in recorded_best(sweep, tuple(checked)).items()}
    by_check = {(r["job"], r["batch"]): r for r in check["rows"]}
    rows = []
    for r in fast["rows"]:
        row = dict(r)
        c = by_check.get((r["job"], r["batch"]))
        if c is not None and r["config"] is not None:
            mine = next((f for f in c["finalists"] if f["config"] == r["config"]), None)
            swept = [f for f in c["finalists"] if f["config"] in best.get((r["job"], r["batch"]), ())]
            top = min(swept, key=lambda f: f["median_us"], default=None)
            row["exhaustive_best_config"] = top["config"] if top else None
            row["exhaustive_best_us"] = top["median_us"] if top else None
            row["pick_in_sweep_us"] = mine["median_us"] if mine else None
            row["pick_over_exhaustive"] = (mine["median_us"] / top["median_us"]
                                           if mine and top else None)
            row["pick_over_exhaustive_paired"] = paired_over(
                mine["rounds_us"], [f["rounds_us"] for f in swept]) if mine else None
        rows.append(row)
    journal = root / "fast" / "journal.jsonl"
    compiles = sum(1 for e in read_entries(journal, MOE_SPACE.from_dict) if e.batch is None)
    out = {"model": model, "layout": layout, "dtype": dtype, "target": "tilefit",
           "device_name": fast["device"]
           if isinstance(fast.get("device"), str) else "NVIDIA H200",
           "shape": layer_shape(layout, dtype, model).as_dict(), "ceilings": fast.get("ceilings"),
           "fast_wall_s": fast["wall_s"], "fast_s": active_seconds(journal),
           "fast_compiles": compiles, "model_bugs": fast["model_bugs"] + check["model_bugs"],
           "worker_restarts": fast["worker_restarts"] + check["worker_restarts"],
           "checked": checked, "rows": rows,
           "timing": "finalists re-timed in quiet, median of the rounds; batches <= 256: CUDA-graph "
                     "replays over weight copies touching 4x the L2 size per pass; larger: do_bench "
                     "(CUDA events per launch, L2 cleared)",
           "checked_against": f"the recorded sweep's best 4 configs per row ({against})",
           "rebuilt_from": f"{tag}: the run's work folder (tune_summary.json, journals)"}
    return out
