"""A report as one self-contained HTML file (figures inline as SVG, styles inline, no script, nothing
fetched when it opens), or its figures as PNG files."""

from __future__ import annotations

from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any

from tilefit import __version__
from tilefit.report import data as D
from tilefit.report import figures as F
from tilefit.report.build import Report

DRAW = {D.FitMap: F.fit_map_figure, D.TacticBars: F.tactics_figure, D.LayoutCurves: F.layouts_figure,
        D.MemoryStack: F.memory_figure}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
.row { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
figure { margin: 0; } figure svg { max-width: 100%; height: auto; }
figcaption { font-size: .8em; color: #555; }
ul.summary li { font-family: ui-monospace, monospace; font-size: .9em; }
p.note { font-size: .9em; } footer { font-size: .8em; color: #777; margin-top: 3em; }
"""


def draw(item: Any) -> Any:
    """The matplotlib Figure for one figure datum."""
    if isinstance(item, tuple):  # tune curves: one figure for all of a source's GEMMs
        return F.tune_figure(item)
    return DRAW[type(item)](item)


def figures(report: Report) -> Iterator[tuple[str, str, Any]]:
    """(section key, file stem, Figure) for every figure of the report, in order."""
    for section in report.sections:
        for stem, item in section.figures:
            yield section.key, stem, draw(item)


def render(report: Report, png_dir: str | Path | None = None) -> tuple[str, list[Path]]:
    """The HTML page, and (with `png_dir`) every figure as <png_dir>/<stem>.png, written atomically;
    each figure is drawn once for both."""
    from tilefit._io import write_bytes_atomic

    drawn, pngs = {}, []
    for key, stem, fig in figures(report):
        drawn[(key, stem)] = F.svg(fig)
        if png_dir is not None:
            pngs.append(write_bytes_atomic(Path(png_dir) / f"{stem}.png", F.png(fig)))
    return _page(report, drawn), pngs


def _page(report: Report, drawn: dict[tuple[str, str], str]) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(report.title)}</title>", f"<style>{CSS}</style></head><body>",
             f"<h1>{escape(report.title)}</h1>"]
    if report.summary:
        parts.append('<ul class="summary">' + "".join(f"<li>{escape(s)}</li>" for s in report.summary) + "</ul>")
    for section in report.sections:
        parts.append(f'<section id="{escape(section.key)}"><h2>{escape(section.title)}</h2>')
        parts += [f'<p class="note">{escape(t)}</p>' for t in section.text]
        parts.append('<div class="row">')
        for stem, _ in section.figures:
            parts.append(f'<figure id="figure-{escape(stem)}">{drawn[(section.key, stem)]}'
                         f"<figcaption>{escape(stem)}</figcaption></figure>")
        parts.append("</div></section>")
    parts.append(f"<footer>tilefit {escape(__version__)}: `tilefit report`</footer></body></html>")
    return "\n".join(parts) + "\n"
