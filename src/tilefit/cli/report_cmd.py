"""`tilefit report`: one self-contained HTML page of figures (fit maps, CUTLASS tactics, tuning,
TP vs EP) for a deployment or a set of results; `--png DIR` writes the same figures as PNGs."""

from __future__ import annotations

import argparse
import sys

from tilefit.cli.args import add_json_arg, int_list, positive_int


def _names(text: str) -> tuple[str, ...]:
    items = tuple(dict.fromkeys(t.strip().lower() for t in text.split(",") if t.strip()))
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list such as sm89,sm90,sm120")
    return items


def register(sub: argparse._SubParsersAction) -> None:
    from tilefit.engines import engine_names
    from tilefit.report import CURVE_BATCHES, DEFAULT_ARCHS

    p = sub.add_parser("report", help="an HTML page of figures: fit maps, tactics, tuning, TP vs EP",
                       description="Draw what tilefit knows about a deployment (--model, --gpu, --gpus), or "
                                   "about recorded results (--tune, --compare), as one self-contained HTML "
                                   "file: nothing is fetched when it opens; figures are inline SVG. Needs "
                                   "the plotting extra: pip install 'tilefit[report]'.")
    p.add_argument("--model", metavar="M", help="a deployment's model: preset or config.json path")
    p.add_argument("--gpu", metavar="NAME", help="the deployment's GPU (see `tilefit gpus`)")
    p.add_argument("--gpus", type=positive_int, metavar="N", help="GPUs the MoE layers span (for TP vs EP)")
    p.add_argument("--layouts", metavar="L,L,...", help="layouts to compare, e.g. tp8,ep8 (default: tpN,epN)")
    p.add_argument("--engine", choices=engine_names(),
                   help="add `tilefit check`'s verdict for each layout under this engine, and (sglang, "
                        "vLLM) its per-GPU memory plan")
    p.add_argument("--arch", type=_names, metavar="smXX,...",
                   help="archs for the fit maps (default with a deployment: "
                        f"{','.join(DEFAULT_ARCHS)} and the GPU's own)")
    p.add_argument("--dtype", default="bf16", metavar="bf16|fp16|fp8|fp8-block",
                   help="the Triton fused-MoE kernel's dtype in the fit maps (default: %(default)s)")
    p.add_argument("--flashinfer", metavar="V", help="FlashInfer version whose tactics to draw "
                                                    "(default: newest catalogued)")
    p.add_argument("--batch", type=int_list, default=CURVE_BATCHES, metavar="B,B,...",
                   help="batch sizes of the predicted TP vs EP curves (default: %(default)s)")
    p.add_argument("--tune", action="append", default=[], metavar="PATH",
                   help="a `tilefit tune --out` folder, its tune_summary.json or journal.jsonl, or a "
                        "recorded tune result (repeatable)")
    p.add_argument("--compare", action="append", default=[], metavar="FILE",
                   help="a `tilefit compare --json` output, with --measure's points if it ran (repeatable)")
    p.add_argument("--title", help="the page's title (default: the deployment or the files)")
    p.add_argument("-o", "--out", default="tilefit-report.html", metavar="FILE",
                   help="the HTML file to write (default: %(default)s)")
    p.add_argument("--png", metavar="DIR", help="also write every figure as a PNG file in DIR")
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tilefit._io import write_text_atomic
    from tilefit.cli.output import info, print_json
    from tilefit.report.build import ReportRequest, build
    from tilefit.report.figures import _mpl

    _mpl()  # the extra's absence is one line and exit 2, before any work
    req = ReportRequest(model=args.model, gpu=args.gpu, gpus=args.gpus, layouts=args.layouts,
                        engine=args.engine, archs=args.arch or (), dtype=args.dtype, tune=tuple(args.tune),
                        compare=tuple(args.compare), batches=tuple(args.batch), flashinfer=args.flashinfer,
                        title=args.title)
    report = build(req)
    from tilefit.report.html import render

    import os

    from tilefit.errors import UsageError

    if os.path.isdir(args.out):  # (os.path: False, not an error, for a name the OS refuses)
        raise UsageError(f"-o {args.out} is a folder; give the HTML file to write, e.g. {args.out}/report.html")
    try:
        html, pngs = render(report, args.png)
        path = write_text_atomic(args.out, html)
    except OSError as e:  # past the folder checks: a full disk, a name the OS refuses
        raise UsageError(f"cannot write the report: {e.strerror or e}; choose another -o / --png") from None
    figures = sum(len(s.figures) for s in report.sections)
    if args.json:
        print_json({"html": str(path), "png": [str(p) for p in pngs], "title": report.title,
                    "summary": list(report.summary),
                    "sections": [{"key": s.key, "title": s.title, "figures": [n for n, _ in s.figures]}
                                 for s in report.sections]})
    else:
        print(f"wrote {path} ({len(report.sections)} sections, {figures} figures)")
        for p in pngs:
            print(f"wrote {p}")
        for line in report.summary:
            info(line)
    sys.stdout.flush()
    return 0
