"""The report's figures: data from report/data.py in, a matplotlib Figure out.

matplotlib is imported here only (the `tilefit[report]` extra), through its object API (Figure,
no pyplot), so drawing needs no display and leaves no global state. Every drawn element that
stands for a value carries a gid (it becomes the id of its <g> in the SVG), so tests and readers
can find a cell, a bar or a line in the output and check it against the data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tilefit.report.data import EXCEEDS, SOME, FitMap, LayoutCurves, MemoryStack, TacticBars, TuneCurve

# Colours: one scale for "bytes left under the limit" (greens, darker = more room) and
# "bytes over it" (reds, darker = further over), so a fit map and a tactic chart read alike.
CMAP = "RdYlGn"
TUNED, DEFAULT, FLOOR = "#1f77b4", "#7f7f7f", "#2ca02c"
GEMM_COLOUR, COMM_COLOUR = "#4c72b0", "#dd8452"


def _mpl() -> Any:
    try:
        import matplotlib
    except ImportError:
        from tilefit.errors import MissingDependency

        raise MissingDependency("tilefit report draws with matplotlib: pip install 'tilefit[report]'") from None
    return matplotlib


def margin_colour(margin: int, limit: int) -> tuple[float, float, float]:
    """RGB for a margin in bytes: 0.60-1.00 of the colour map when it fits (0 B left is 0.60),
    0.00-0.20 (reds) when it does not (50% or more over the limit is 0.00): never a shade in
    between, so a cell's colour alone says whether it fits."""
    mpl = _mpl()
    if margin >= 0:
        x = 0.60 + 0.40 * min(1.0, margin / limit)
    else:
        x = 0.20 - 0.20 * min(1.0, -margin / (0.5 * limit))
    r, g, b, _ = mpl.colormaps[CMAP](x)
    return (r, g, b)


def gid(*parts: object) -> str:
    """An element id from its parts: letters, digits and . _ - only (it becomes an HTML id)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(str(p) for p in parts))


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def fit_map_figure(m: FitMap) -> Any:
    """One arch: a panel per (BLOCK_K, num_stages), cells BLOCK_M (rows) x BLOCK_N (columns)
    coloured by the margin of the cell's largest config; hatched where only some configs fit."""
    from matplotlib.patches import Rectangle

    bms, bns, bks, depths = m.axis("block_m"), m.axis("block_n"), m.axis("block_k"), m.axis("stages")
    fig = _figure(1.25 * len(depths) + 0.8, 1.3 * len(bks) + 0.9)
    axes = fig.subplots(len(bks), len(depths), squeeze=False, sharex=True, sharey=True)
    for i, bk in enumerate(bks):
        for j, stages in enumerate(depths):
            ax = axes[i][j]
            for y, bm in enumerate(bms):
                for x, bn in enumerate(bns):
                    c = m.cell(bm, bn, bk, stages)
                    if c is None:
                        continue
                    ax.add_patch(Rectangle((x, y), 1, 1, facecolor=margin_colour(c.margin, m.limit),
                                           edgecolor="white", linewidth=0.6,
                                           hatch="///" if c.verdict == SOME else None,
                                           gid=gid("fit", m.arch, f"{bm}x{bn}x{bk}", f"s{stages}")))
            ax.set_xlim(0, len(bns))
            ax.set_ylim(0, len(bms))
            ax.set_xticks([k + 0.5 for k in range(len(bns))], [str(v) for v in bns], fontsize=6)
            ax.set_yticks([k + 0.5 for k in range(len(bms))], [str(v) for v in bms], fontsize=6)
            ax.tick_params(length=0)
            if i == 0:
                ax.set_title(f"{stages} stages", fontsize=8)
            if j == 0:
                ax.set_ylabel(f"BK {bk}\nBLOCK_M", fontsize=7)
            if i == len(bks) - 1:
                ax.set_xlabel("BLOCK_N", fontsize=7)
    _margin_bar(fig, axes, m.limit)
    over = sum(c.verdict == EXCEEDS for c in m.cells)
    fig.suptitle(f"{m.arch} {m.dtype}: limit {m.limit:,} B; {over} of {len(m.cells)} tiles x depths "
                 f"cannot launch", fontsize=9)
    return fig


def _margin_bar(fig: Any, axes: Any, limit: int) -> None:
    """A colour bar in KiB of margin: the same piecewise scale as the cells."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import ListedColormap, Normalize

    lo, hi = -limit // 2, limit
    steps = [lo + (hi - lo) * i // 255 for i in range(256)]
    bar = ScalarMappable(Normalize(lo / 1024, hi / 1024), ListedColormap([margin_colour(x, limit) for x in steps]))
    cb = fig.colorbar(bar, ax=axes, shrink=0.5, pad=0.02)
    cb.set_label("KiB left under the limit (< 0: over)", fontsize=7)
    cb.ax.tick_params(labelsize=6)


def tactics_figure(t: TacticBars) -> Any:
    """FlashInfer CUTLASS tactics: bytes against the limit, one panel per (GEMM, fusion)."""
    heights = [max(1, len(g.bars)) for g in t.groups]
    fig = _figure(7.5, 0.17 * sum(heights) + 0.6 * len(t.groups) + 0.6)
    axes = fig.subplots(len(t.groups), 1, squeeze=False, sharex=True,
                        gridspec_kw={"height_ratios": heights})
    top = max([t.limit] + [b.bytes for g in t.groups for b in g.bars])
    for ax, g in zip((a[0] for a in axes), t.groups):
        for y, bar in enumerate(g.bars):
            ax.barh(y, bar.bytes, height=0.75, color=margin_colour(t.limit - bar.bytes, t.limit),
                    edgecolor="none", gid=gid("tactic", t.arch, bar.label))
        ax.axvline(t.limit, color="black", linewidth=1, linestyle="--", gid=gid("limit", t.arch, g.gemm, g.fusion))
        ax.set_yticks(range(len(g.bars)), [b.label for b in g.bars], fontsize=6)
        ax.invert_yaxis()
        ax.set_xlim(0, top * 1.08)
        ax.set_title(f"{g.gemm}, fusion {g.fusion}", fontsize=8, loc="left")
        ax.tick_params(axis="x", labelsize=7)
    axes[-1][0].set_xlabel(f"shared memory per block, bytes (dashed: the {t.arch} limit, {t.limit:,} B)",
                           fontsize=7)
    fails = sum(not b.fits for g in t.groups for b in g.bars)
    total = sum(len(g.bars) for g in t.groups)
    fig.suptitle(f"FlashInfer {t.flashinfer} CUTLASS MoE tactics, {t.dtype} on {t.arch}: "
                 f"{fails} of {total} cannot launch", fontsize=9)
    return fig


def tune_figure(curves: Sequence[TuneCurve]) -> Any:
    """Per GEMM: time (tuned and default), % of the roofline floor, and speed-up, against batch."""
    fig = _figure(10, 2.5 * len(curves) + 0.4)
    axes = fig.subplots(len(curves), 3, squeeze=False)
    for row, curve in zip(axes, curves):
        pts = curve.points
        b = [p.batch for p in pts]
        _line(row[0], b, [p.tuned_us for p in pts], gid("tune", curve.title, "tuned-us"), "tuned", TUNED)
        _line(row[0], b, [p.default_us for p in pts], gid("tune", curve.title, "default-us"), "default", DEFAULT)
        _line(row[0], b, [p.floor_us for p in pts], gid("tune", curve.title, "floor-us"), "roofline floor", FLOOR,
              style=":")
        row[0].set_yscale("log")
        row[0].set_ylabel(f"{curve.title}\ntime, us", fontsize=8)
        _line(row[1], b, [p.tuned_pct_of_floor for p in pts], gid("tune", curve.title, "tuned-pct"), "tuned",
              TUNED)
        _line(row[1], b, [p.default_pct_of_floor for p in pts], gid("tune", curve.title, "default-pct"), "default",
              DEFAULT)
        row[1].set_ylabel("% of floor", fontsize=8)
        pcts = [v for p in pts for v in (p.tuned_pct_of_floor, p.default_pct_of_floor) if v is not None]
        row[1].set_ylim(0, max([105.0] + [1.05 * v for v in pcts]))  # the floor is a model: >100% happens
        _line(row[2], b, [p.speedup for p in pts], gid("tune", curve.title, "speedup"), "default / tuned", TUNED)
        row[2].axhline(1.0, color="black", linewidth=0.6)
        row[2].set_ylabel("speed-up over default", fontsize=8)
        for ax in row:
            _batch_axis(ax)
            ax.tick_params(labelsize=7)
            ax.grid(True, which="major", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("batch (tokens)", fontsize=8)
    return fig


def _line(ax: Any, xs: Sequence[float], ys: Sequence[float | None], ident: str, label: str, colour: str,
          style: str = "-") -> None:
    """A line through the points that have a value; nothing when none has."""
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if not pts:
        return
    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", markersize=3, color=colour,
            label=label, gid=ident, linewidth=1.2)


def _batch_axis(ax: Any) -> None:
    """Batch sizes on a log2 axis, labelled as numbers (1, 4, 16, ...), not powers."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def layouts_figure(lc: LayoutCurves) -> Any:
    """Left: each layout's predicted layer time (lines) and measured time (points), crossovers
    marked. Then one panel per layout: GEMM and communication stacked (predicted), measured on top."""
    n = len(lc.layouts)
    fig = _figure(3.6 * (n + 1), 3.2)
    axes = fig.subplots(1, n + 1, squeeze=False, sharey=True)[0]
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
    for k, (name, pts) in enumerate(lc.layouts):
        colour = colours[k % len(colours)]
        b = [p.batch for p in pts]
        _line(axes[0], b, [p.total_us for p in pts], gid("layout", lc.title, name, "predicted-total"),
              f"{name} predicted", colour)
        measured = [(p.batch, p.measured_total_us) for p in pts if p.measured_total_us is not None]
        if measured:
            axes[0].scatter([m[0] for m in measured], [m[1] for m in measured], marker="s", s=22,
                            facecolors="none", edgecolors=colour, label=f"{name} measured",
                            gid=gid("layout", lc.title, name, "measured-total"), zorder=3)
        ax = axes[k + 1]
        ax.stackplot(b, [p.gemm_us for p in pts], [p.comm_us for p in pts], colors=[GEMM_COLOUR, COMM_COLOUR],
                     labels=["GEMM (predicted)", "communication (predicted)"], alpha=0.75,
                     gid=gid("layout", lc.title, name, "stack"))
        for key, marker, label in (("measured_total_us", "s", "measured total"),
                                   ("measured_gemm_us", "^", "measured GEMM")):
            pm = [(p.batch, getattr(p, key)) for p in pts if getattr(p, key) is not None]
            if pm:
                ax.scatter([x for x, _ in pm], [y for _, y in pm], marker=marker, s=18, color="black",
                           label=label, gid=gid("layout", lc.title, name, key), zorder=3)
        ax.set_title(name, fontsize=9)
    for kind, batch, a, b_ in lc.crossovers:
        style = "--" if kind == "predicted" else ":"
        for k, ax in enumerate(axes):
            ax.axvline(batch, color="black", linewidth=0.9, linestyle=style,
                       gid=gid("crossover", lc.title, kind, a, b_, k))
        axes[0].annotate(f"{a}->{b_} ~{batch:.0f} ({kind})", (batch, 0.02), xycoords=("data", "axes fraction"),
                         fontsize=6, rotation=90, va="bottom", ha="right" if kind == "predicted" else "left")
    for ax in axes:
        _batch_axis(ax)
        ax.set_yscale("log")
        ax.set_xlabel("batch (tokens)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
    axes[0].set_ylabel("one MoE layer, us (busiest GPU)", fontsize=8)
    fig.suptitle(f"TP vs EP: {lc.title}", fontsize=9)
    return fig


def memory_figure(ms: MemoryStack) -> Any:
    """One horizontal bar per layout: the GPU's memory by kind (weights by kind, KV pool, start-up,
    runtime, free), against the memory the driver reports."""
    mpl = _mpl()
    kinds = list(dict.fromkeys(name for bar in ms.bars for name, _ in bar.parts))
    palette = mpl.colormaps["tab20"]
    colour = {k: ("#e8e8e8" if k == "free" else palette(i % 20)) for i, k in enumerate(kinds)}
    fig = _figure(10, 0.7 * len(ms.bars) + 2.2)
    ax = fig.subplots()
    gib = 2 ** 30
    for y, bar in enumerate(ms.bars):
        left = 0
        for name, size in bar.parts:
            ax.barh(y, size / gib, left=left / gib, color=colour[name], edgecolor="white", linewidth=0.5,
                    height=0.6, gid=gid("memory", ms.title, bar.layout, name))
            left += size
        ax.annotate(f"{bar.verdict}, {bar.kv_tokens:,} KV tokens", (max(left, ms.total) / gib, y), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=7)
    ax.axvline(ms.total / gib, color="black", linewidth=1, linestyle="--", gid=gid("memory", ms.title, "total"))
    ax.set_yticks(range(len(ms.bars)), [b.layout for b in ms.bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"GiB per GPU (dashed: the {ms.total / gib:,.1f} GiB the driver reports)", fontsize=8)
    ax.set_xlim(0, ms.total / gib * 1.3)
    ax.tick_params(labelsize=7)
    handles = [mpl.patches.Patch(color=colour[k], label=k) for k in kinds]
    ax.legend(handles=handles, fontsize=6, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25),
              frameon=False)
    fig.suptitle(f"Device memory per GPU, {ms.engine}'s rules and defaults: {ms.title}", fontsize=9)
    return fig


def svg(fig: Any) -> str:
    """The figure as an SVG document (text as text, reproducible ids, no date)."""
    import io

    mpl = _mpl()
    buf = io.StringIO()
    with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tilefit"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: inlined in HTML


def png(fig: Any) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=130, metadata={"Software": None})
    return buf.getvalue()
