"""What goes into a report: a request (a deployment and/or recorded results) becomes sections of
figure data. Reading and modelling happen here; drawing happens in figures.py, layout in html.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilefit.errors import UsageError
from tilefit.report import CURVE_BATCHES, DEFAULT_ARCHS
from tilefit.report import data as D


@dataclass(frozen=True, slots=True)
class ReportRequest:
    model: str | None = None
    gpu: str | None = None
    gpus: int | None = None
    layouts: str | None = None        # compare's spelling: tp8,ep8,...
    engine: str | None = None
    archs: tuple[str, ...] = ()       # fit maps; empty: the defaults when a deployment is given
    dtype: str = "bf16"               # the triton-moe fit maps' dtype
    tune: tuple[str, ...] = ()        # tune output folders, summaries or journals
    compare: tuple[str, ...] = ()     # `tilefit compare --json` files
    batches: tuple[int, ...] = CURVE_BATCHES
    flashinfer: str | None = None
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Section:
    key: str          # a stable id: fit, tactics, layouts-<n>, tune-<n>, memory
    title: str
    text: tuple[str, ...]
    figures: tuple[tuple[str, Any], ...]  # (file stem, figure data from report/data.py)


@dataclass(frozen=True, slots=True)
class Report:
    title: str
    summary: tuple[str, ...]
    sections: tuple[Section, ...]


def build(req: ReportRequest) -> Report:
    if not (req.model or req.tune or req.compare or req.archs):
        raise UsageError("nothing to report: give a deployment (--model and --gpu), --tune, --compare "
                         "or --arch (see `tilefit report --help`)")
    if req.model and not req.gpu:
        raise UsageError("--model needs --gpu: the report is about a deployment on a GPU (see `tilefit gpus`)")
    summary: list[str] = []
    sections: list[Section] = []
    gpu = model = None
    if req.model:
        from tilefit.hw.catalog import get_gpu
        from tilefit.models import load_model

        model, gpu = load_model(req.model), get_gpu(req.gpu)
    archs = req.archs or (DEFAULT_ARCHS if model else ())
    if gpu is not None and gpu.arch.name not in archs:
        archs = (*archs, gpu.arch.name)
    if archs:
        maps = tuple((f"fit_{a}_{req.dtype}", D.fit_map(a, req.dtype)) for a in archs)
        sections.append(Section("fit", f"Which Triton fused-MoE tiles fit ({req.dtype})", (
            "One map per arch; in each, a panel per BLOCK_K (rows) and num_stages (columns), cells "
            "BLOCK_M x BLOCK_N. Colour: bytes left under the arch's shared-memory limit by the "
            "largest config of the cell (greens, darker = more room) or over it (reds). Hatched: "
            "only some num_warps fit. Model: tilefit's triton-moe family (byte-exact against "
            "Triton's compiler, see `tilefit fit --verify`).",), maps))
    if model is not None and gpu is not None:
        sections += _deployment(req, model, gpu, summary)
    for n, path in enumerate(req.tune, 1):
        curves = _tune_source(path)
        sections.append(Section(f"tune-{n}", f"Tuning: {_name(path)}", (
            "Per GEMM, against batch size: the tuned config's kernel time and the default config's, "
            "the share of the roofline floor each reaches (floor / time), and the speed-up "
            "(default / tuned). Source: " + path,), ((f"tune_{n}", curves),)))
    for n, path in enumerate(req.compare, 1):
        doc = _json(path, "a `tilefit compare --json` output")
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
            raise UsageError(f"--compare {path}: no \"rows\": not a `tilefit compare --json` output")
        lc = _layout_curves(doc, path)
        sections.append(Section(f"layouts-{n}", f"TP vs EP, {doc.get('source', 'predicted')}: {lc.title}",
                                (*_crossover_lines(lc), f"Source: {path}"), ((f"layouts_{n}", lc),)))
    files = ", ".join(_name(p) for p in (*req.tune, *req.compare))
    title = req.title or (f"{model.name} on {_gpus(req)} x {gpu.key}" if model and gpu else
                          f"tilefit report: {files}" if files else f"tilefit fit maps: {', '.join(archs)}")
    return Report(title, tuple(summary), tuple(sections))


def _gpus(req: ReportRequest) -> int:
    if not req.gpus:
        raise UsageError("--model and --gpu need --gpus N: the GPUs the MoE layers span, for TP vs EP")
    return req.gpus


def _deployment(req: ReportRequest, model: Any, gpu: Any, summary: list[str]) -> list[Section]:
    """The deployment's own sections: check's verdict per layout, the CUTLASS tactics of its arch,
    and TP vs EP from the performance model."""
    from tilefit.compare import CompareRequest, compare_data, parse_layouts

    gpus = _gpus(req)
    layouts = parse_layouts(req.layouts, gpus)
    out = []
    if req.engine:
        from tilefit.check.report import CheckRequest, run_check

        for tp, ep in layouts:
            d = run_check(CheckRequest(model=req.model, gpu=req.gpu, engine=req.engine, tp=tp, ep=ep,
                                       family_options=(("flashinfer", req.flashinfer),) if req.flashinfer
                                       else ())).as_dict()
            worst = [f for f in d["findings"] if f["severity"] != "info"]
            summary.append(f"{d['verdict']}: {d['layout']['label']}, {req.engine}: "
                           f"{d['backend']['family']} {d['backend']['family_dtype']}"
                           + (f"; {worst[0]['title']}" if worst else ""))
    from tilefit.kernels.registry import get_family

    cutlass = get_family("flashinfer-cutlass")
    dtypes = list(cutlass.dtypes(gpu.arch))
    if dtypes:
        dtype = model.weight_dtype if model.weight_dtype in dtypes else dtypes[0]
        bars = D.tactic_bars(gpu.arch.name, dtype, req.flashinfer)
        out.append(Section("tactics", f"FlashInfer CUTLASS MoE tactics on {gpu.arch.name} ({dtype})", (
            "Every tactic FlashInfer's autotuner profiles, as shared memory per block against the "
            f"{gpu.arch.name} limit, grouped by GEMM and epilogue fusion; red bars cannot launch "
            "(the autotuner skips them; `tilefit check` says whether that is fatal and what to set).",),
            ((f"tactics_{gpu.arch.name}_{dtype}", bars),)))
    from tilefit.memory import engines

    if req.engine in engines():
        ms = D.memory_stack(req.model, req.gpu, req.engine, layouts)
        out.append(Section("memory", f"Device memory per GPU: {ms.title}", (
            f"What each GPU holds under {req.engine}'s memory rules with its default settings: the "
            "weights by kind, the KV-cache pool its rule allocates, start-up and runtime extras, and "
            "what is left (`tilefit plan --memory` gives the figures and their basis).",),
            (("memory", ms),)))
    # No engine: compare's own kernel rule (Triton tiles), as `tilefit compare` without --engine.
    request = CompareRequest(gpu=req.gpu, batches=req.batches, model=req.model, gpus=gpus,
                             layouts=req.layouts)
    lc = _layout_curves(compare_data(request), "the performance model")
    out.append(Section("layouts", f"TP vs EP, predicted: {lc.title}",
                       (*_crossover_lines(lc), "Model: `tilefit compare` (its assumptions are printed "
                        "there); measured points appear where a `compare --measure` JSON is given "
                        "with --compare."), (("layouts", lc),)))
    return out


def _layout_curves(doc: dict[str, Any], source: str) -> D.LayoutCurves:
    try:
        return D.layout_curves(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"{source}: a compare row lacks a field ({e}); give `tilefit compare --json` "
                         f"output") from None


def _crossover_lines(lc: D.LayoutCurves) -> tuple[str, ...]:
    if not lc.crossovers:
        names = [n for n, _ in lc.layouts]
        return (f"No crossover between {' and '.join(names)} in the batch sizes shown.",)
    return tuple(f"{kind} crossover: {a} is faster below about {batch:g} tokens, {b} above."
                 for kind, batch, a, b in lc.crossovers)


def _tune_source(path: str) -> tuple[D.TuneCurve, ...]:
    """A tune output folder (its summary, else its journal), a summary JSON or a journal."""
    from tilefit.tune.run import JOURNAL, SUMMARY

    if not path.strip():
        raise UsageError("--tune is empty: give a `tilefit tune --out` folder, its summary or its journal")
    p = Path(path)
    if _kind(p) == "dir":
        if _kind(p / SUMMARY) == "file":
            p = p / SUMMARY
        elif _kind(p / JOURNAL) == "file":
            p = p / JOURNAL
        else:
            raise UsageError(f"--tune {path}: no {SUMMARY} or {JOURNAL} in it; give a `tilefit tune --out` folder")
    if _kind(p) != "file":
        raise UsageError(f"--tune {path}: no such file or folder; give a `tilefit tune --out` folder or its "
                         f"{SUMMARY}")
    if p.suffix == ".jsonl":
        from tilefit.tune.journal import read_entries
        from tilefit.tune.targets.base import MOE_SPACE  # journals tilefit tune writes: triton-moe configs

        curves = D.tune_curves(list(read_entries(p, MOE_SPACE.from_dict)), _name(path))
    else:
        try:
            curves = D.tune_curves(_json(str(p), "a tune summary"), _name(path))
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"--tune {path}: not a tilefit tune summary ({e})") from None
    if not curves:
        raise UsageError(f"--tune {path}: no measured rows in it")
    return curves


def _kind(p: Path) -> str | None:
    """'dir', 'file' (a regular file), or None: missing, something else, or a path the OS refuses
    (too long, a bad name) — every case a one-line answer for the user, never a traceback."""
    import os
    import stat

    try:
        mode = os.stat(p).st_mode
    except (OSError, ValueError):
        return None
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else None


def _json(path: str, what: str) -> Any:
    if _kind(Path(path)) != "file":
        raise UsageError(f"{path}: no such file; give {what}")
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: cannot read it as JSON ({e}); give {what}") from None


def _name(path: str) -> str:
    p = Path(path)
    return p.name if p.suffix not in (".json", ".jsonl") else p.stem
