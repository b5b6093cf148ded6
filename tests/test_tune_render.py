"""`tilefit tune`'s text summary (cli/tune_view.render)."""

from __future__ import annotations

from types import SimpleNamespace


def _row(batch: int, pct: float):
    return SimpleNamespace(job="gemm1", batch=batch, config=None, timing="cuda-graph", time_us=10.0,
                           pct_of_floor=pct, pct_of_catalog_floor=pct * 0.88, default_us=11.0,
                           speedup=1.1, trials=58, exhaustive_us=None)


def _report(rows, ceilings=True):
    line = "measured ceilings: copy 4,244 GB/s (catalog 4,800)"
    return SimpleNamespace(rows=rows, ceilings=SimpleNamespace(line=lambda: line) if ceilings else None,
                           wall_s=1.0, worker_restarts=0, resumed_entries=0, stale_entries=0,
                           stale_contexts=(), files=(), figures=None, model_bugs=())


def test_rows_above_the_measured_floor_are_explained():
    from tilefit.cli.tune_view import render

    text = render(_report([_row(1, 72.0), _row(64, 107.7), _row(128, 104.9)]))
    assert "2 rows above 100% of the measured floor" in text
    assert "catalog floor is the hard bound" in text
    assert "above 100%" not in render(_report([_row(1, 72.0), _row(64, 99.9)]))
    # Without measured ceilings the floor is the catalog's: no such note.
    assert "above 100%" not in render(_report([_row(64, 107.7)], ceilings=False))


def test_the_scale_form_and_the_searched_part_are_said_for_fp8_block():
    from tilefit.cli.tune_view import render

    text = render(_report([_row(1, 72.0)]), scales="row",
                  searched="searched 1,280 of the 1,920 configs: the ones SGLang runs as tuned")
    assert "fp8 block weight scales applied per row" in text and "searched 1,280" in text
    plain = render(_report([_row(1, 72.0)]))
    assert "weight scales" not in plain and "searched" not in plain


def test_the_swapped_tiles_are_said():
    from tilefit.cli.tune_view import render

    assert "computed as B^T A^T" in render(_report([_row(1, 72.0)]), scales="row", swap_ab=True)
    assert "B^T A^T" not in render(_report([_row(1, 72.0)]), scales="row")
