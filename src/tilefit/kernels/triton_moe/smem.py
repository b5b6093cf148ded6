"""Shared memory of our fused-MoE kernel as a formula plus a per-(Triton version, arch, dtype)
calibration learned from compiler runs, byte-exact with `triton.compile` on the engines' grid.

What the compiler does (read off its figures, see scripts/calibrate_triton.py): the software
pipeliner keeps `buffers` copies of the A tile [BM, BK] and the B tile [BK, BN], where buffers is
num_stages (Hopper wgmma / Blackwell tcgen05 paths, BLOCK_SIZE_M >= 64) or num_stages - 1 (mma.sync
paths); a few configs add a small calibrated amount (mbarriers on sm100, layout-conversion scratch
for the fp8-block scales). GROUP_SIZE_M only reorders program ids and never changes the figure.

  bytes = max((stages - offset[BM]) * (BM*BK + BK*BN) * elem + per_stage[g] * stages + const[g],
              epilogue_scratch[g])
  g = (BM, BN, BK, num_warps); the three extras are 0 unless the calibration lists g.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from tilefit._io import write_json_atomic as _write_json_atomic
from tilefit.dtypes import elem_bytes
from tilefit.hw.catalog import Arch
from tilefit.versions import parse_version
from tilefit.kernels.base import SmemFootprint, SmemTerm

# fp8-block has two tables: weight scales applied per column (vLLM's kernel) and per row where a
# tile's columns share one scale group (SGLang's): the per-row form drops the pipelined column
# scales, e.g. 512 B fewer for 64x128x128 w4 s4 on sm90 (98,816 -> 98,304; Triton 3.6.0).
ROW_TABLE = "fp8-block-row"
SCALES = ("column", "row")  # the family's `scales` option
# fp8 tiles computed as B^T A^T (the engines' sm90 swap-AB path, config.swap_ab_tile): the MMA's M
# is then BLOCK_SIZE_N >= 64, so the wgmma pipeline keeps num_stages buffers where the unswapped
# BLOCK_SIZE_M < 64 tile keeps num_stages - 1 (16x64x128 w4 s4 fp8 on sm90: 30,720 -> 40,960 B).
# Recorded for sm90 and the tiles the engines swap only.
SWAP_SUFFIX = "-swap"
_FP8_TABLES = ("fp8", "fp8-block", ROW_TABLE)
ELEM_BYTES = elem_bytes(("bf16", "fp16", "fp8", "fp8-block")) | {
    t: 1 for t in (ROW_TABLE, *(f + SWAP_SUFFIX for f in _FP8_TABLES))}
# fp16 compiles to the same shared memory as bf16 (same element size and layouts); the tests
# check a sample live. Calibration tables therefore hold "bf16" and the fp8 ones only.
TABLE_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8-block": "fp8-block",
               ROW_TABLE: ROW_TABLE} | {f + SWAP_SUFFIX: f + SWAP_SUFFIX for f in _FP8_TABLES}


def table_dtype(dtype: str, scales: str = "column", swap_ab: bool = False) -> str:
    """The calibration table of `dtype` with fp8-block weight scales applied per `scales`, and
    computed swapped (swap_ab: fp8 only; bf16 and fp16 never take the engines' swap path)."""
    if scales not in SCALES:
        from tilefit.errors import UsageError

        raise UsageError(f"scales must be one of {', '.join(SCALES)}, got {scales!r}")
    table = TABLE_DTYPE[dtype]
    table = ROW_TABLE if table == "fp8-block" and scales == "row" else table
    return table + SWAP_SUFFIX if swap_ab and table in _FP8_TABLES else table


def swapped(cfg: Any, dtype: str, swap_ab: bool) -> bool:
    """Whether `cfg` runs swapped when `swap_ab` asks for the engines' path: fp8 tiles that
    config.swap_ab_tile names (the ones the swap tables hold)."""
    from tilefit.kernels.triton_moe.config import swap_ab_tile

    return bool(swap_ab) and TABLE_DTYPE[dtype] in _FP8_TABLES and swap_ab_tile(cfg)


# Format 2 names per-tensor "fp8" and block-scaled "fp8-block"; tables without a format were written
# when the family had block-scaled fp8 only and called it "fp8" (read by `upgrade_table`).
TABLE_FORMAT = 2
_FILE_RE = re.compile(r"^calib_triton-(\d+)\.(\d+)\.(\d+)\.json$")


def table_key(arch: str, dtype: str, cfg: Any) -> str:
    """Key of one recorded oracle figure: 'sm90/bf16/BM,BN,BK,warps,stages' (GROUP_SIZE_M dropped)."""
    bm, bn, bk, _gm, w, s = cfg if isinstance(cfg, tuple) else cfg.values()
    return f"{arch}/{TABLE_DTYPE[dtype]}/{bm},{bn},{bk},{w},{s}"


def parse_table_key(key: str) -> tuple[str, str, tuple[int, int, int, int, int]]:
    """'sm90/bf16/64,128,64,4,3' -> ('sm90', 'bf16', (64, 128, 64, 4, 3)): table_key's inverse."""
    arch, dtype, vals = key.split("/")
    bm, bn, bk, w, s = map(int, vals.split(","))
    return arch, dtype, (bm, bn, bk, w, s)


def upgrade_table(obj: dict[str, Any]) -> dict[str, Any]:
    """An oracle table or calibration in format 2: an older one's "fp8" (then the family's only,
    128x128 block-scaled, fp8) is renamed "fp8-block"; a format-2 one is returned as it is."""
    if int(obj.get("format", 1)) >= TABLE_FORMAT:
        return obj
    out = {**obj, "format": TABLE_FORMAT}
    if "entries" in obj:
        out["entries"] = {_renamed_key(k): v for k, v in obj["entries"].items()}
    if "archs" in obj:
        out["archs"] = {arch: {("fp8-block" if d == "fp8" else d): c for d, c in per.items()}
                        for arch, per in obj["archs"].items()}
    return out


def _renamed_key(key: str) -> str:
    arch, dtype, vals = key.split("/")
    return f"{arch}/{'fp8-block' if dtype == 'fp8' else dtype}/{vals}"


def write_json_atomic(path: Path, obj: Any) -> None:
    _write_json_atomic(path, obj, indent=1, sort_keys=True)


# ---------------------------------------------------------------------------------------------
# Fitting (used by scripts/calibrate_triton.py): recorded oracle figures -> calibration


def fit_calibration(table: dict[str, Any]) -> dict[str, Any]:
    """Learn offset[BM] and the per-group extras from recorded figures; exact or listed as exceptions.

    For each (arch, dtype) and group g = (BM, BN, BK, warps), the figures over num_stages follow a
    line, bytes = slope * stages + intercept, read off the two deepest stage counts; slope -
    stage_bytes is the per-stage extra; the offset is the whole number of stage buffers the
    intercept removes; the rest is the constant. A shallow config can sit above the line: its
    epilogue's layout conversion needs more scratch than the pipeline buffers it reuses; that
    scratch is the group's floor.
    """
    table = upgrade_table(table)
    groups: dict[tuple[str, str], dict[tuple[int, ...], dict[int, int]]] = defaultdict(
        lambda: defaultdict(dict))
    for key, shared in table["entries"].items():
        arch, dtype, (bm, bn, bk, w, s) = parse_table_key(key)
        groups[(arch, dtype)][(bm, bn, bk, w)][s] = int(shared)
    out: dict[str, Any] = {"format": TABLE_FORMAT, "triton_version": table["triton_version"],
                           "kernel_hash": table.get("kernel_hash", ""), "archs": {}}
    for (arch, dtype), by_group in sorted(groups.items()):
        elem = ELEM_BYTES[dtype]
        fitted = {}
        for g, figures in by_group.items():
            bm, bn, bk, _w = g
            stage = (bm * bk + bk * bn) * elem
            ss = sorted(figures)
            if len(ss) > 1:
                hi, lo = ss[-1], ss[-2]
                slope = (figures[hi] - figures[lo]) // (hi - lo)
            else:  # one recorded stage count: assume no per-stage extra (more points would tell)
                hi, slope = ss[-1], stage
            intercept = figures[hi] - slope * hi
            offset = -(intercept // stage) if intercept < 0 else 0
            fitted[g] = (offset, slope - stage, intercept + offset * stage)
        rule: dict[str, int] = {}
        for bm in {g[0] for g in fitted}:
            # one offset per BLOCK_SIZE_M (the MMA path); the most common wins, others go to const
            counts = [o for g, (o, _, _) in fitted.items() if g[0] == bm]
            rule[str(bm)] = max(set(counts), key=counts.count)
        extra: dict[str, list[int]] = {}
        exceptions: dict[str, int] = {}
        for g, (o, per_stage, const) in fitted.items():
            bm, bn, bk, w = g
            stage = (bm * bk + bk * bn) * elem
            const += (o - rule[str(bm)]) * stage  # absorb a group whose offset differs
            line = {s: (s - rule[str(bm)]) * stage + per_stage * s + const for s in by_group[g]}
            above = [fig for s, fig in by_group[g].items() if fig > line[s]]

            def misses(floor: int) -> int:
                return sum(max(line[s], floor) != fig for s, fig in by_group[g].items())

            # a floor must explain the figures above the line, else they are exceptions
            scratch = max(above, default=0)
            if misses(scratch) >= misses(0):
                scratch = 0
            if per_stage or const or scratch:
                extra[f"{bm},{bn},{bk},{w}"] = [per_stage, const, scratch]
            for s, fig in by_group[g].items():
                if max(line[s], scratch) != fig:
                    exceptions[f"{bm},{bn},{bk},{w},{s}"] = fig
        out["archs"].setdefault(arch, {})[dtype] = {
            "offset_by_block_m": dict(sorted(rule.items(), key=lambda kv: int(kv[0]))),
            "extra": dict(sorted(extra.items())),
            "exceptions": dict(sorted(exceptions.items())),
            "configs_fitted": sum(len(f) for f in by_group.values())}
    return out


def check_against_table(table: dict[str, Any], calib: dict[str, Any]) -> list[str]:
    """Lines for every recorded figure the calibration does not reproduce (should be none)."""
    bad = []
    lookup = _lookup(upgrade_table(calib))
    for key, shared in upgrade_table(table)["entries"].items():
        arch, dtype, values = parse_table_key(key)
        got = _bytes(lookup[(arch, dtype)], dtype, *values)
        if got != shared:
            bad.append(f"{key}: model {got} != oracle {shared}")
    return bad


# ---------------------------------------------------------------------------------------------
# The model


@lru_cache(maxsize=1)
def _available() -> dict[tuple[int, ...], str]:
    data = resources.files("tilefit.kernels.triton_moe") / "data"
    found = {}
    for entry in data.iterdir():
        m = _FILE_RE.match(entry.name)
        if m:
            found[tuple(int(x) for x in m.groups())] = entry.name
    return found


def _installed_triton() -> str | None:
    try:
        from importlib.metadata import version

        return version("triton")
    except Exception:  # noqa: BLE001 - not installed, or broken metadata
        return None


@lru_cache(maxsize=4)
def load_calibration(version: str | None = None) -> dict[str, Any]:
    """The calibration for `version` (default: the installed Triton), else the newest shipped."""
    avail = _available()
    if not avail:
        raise FileNotFoundError("no triton-moe calibration tables shipped; run scripts/calibrate_triton.py")
    text = version or _installed_triton()
    want = parse_version(text, "Triton version", "3.6.0") if text else ()
    pick = want if want in avail else max(avail)
    data = resources.files("tilefit.kernels.triton_moe") / "data" / avail[pick]
    calib = upgrade_table(json.loads(data.read_text()))
    calib["_requested"] = ".".join(map(str, want)) if want else ""
    calib["_lookup"] = _lookup(calib)
    return calib


def _lookup(calib: dict[str, Any]) -> dict[tuple[str, str], tuple[dict, dict, dict]]:
    """{(arch, table dtype): (offset by BLOCK_SIZE_M, extras by (BM, BN, BK, warps), exceptions
    by (BM, BN, BK, warps, stages))} of a calibration, with integer keys."""
    return {
        (arch, dt): ({int(k): v for k, v in c["offset_by_block_m"].items()},
                     {tuple(map(int, k.split(","))): tuple(v) for k, v in c["extra"].items()},
                     {tuple(map(int, k.split(","))): v for k, v in c["exceptions"].items()})
        for arch, per in calib["archs"].items() for dt, c in per.items()}


def model_version() -> str:
    """The Triton version whose calibration the model uses."""
    return load_calibration()["triton_version"]


def _calibrated(arch: Arch, table: str):
    """The calibration of one table (table_dtype) on `arch`; a UsageError naming it when none."""
    calib = load_calibration()
    try:
        return calib["_lookup"][(arch.name, table)]
    except KeyError:
        from tilefit.errors import UsageError

        raise UsageError(f"no triton-moe calibration for {arch.name}/{table} (triton "
                         f"{calib['triton_version']}); run scripts/calibrate_triton.py "
                         f"--archs {arch.name}") from None


_NO_EXTRA = (0, 0, 0)


def total_bytes(cfg: Any, arch: Arch, dtype: str, scales: str = "column", swap_ab: bool = False) -> int:
    """Shared memory `cfg` requests at launch on `arch` (fast path, no breakdown); `scales`: how
    fp8-block weight scales are applied (SCALES); `swap_ab`: fp8 run as the engines run it on
    sm90, the tiles config.swap_ab_tile names computed as B^T A^T."""
    bm, bn, bk, _gm, w, s = cfg.values()
    table = table_dtype(dtype, scales, swapped(cfg, dtype, swap_ab))
    return _bytes(_calibrated(arch, table), dtype, bm, bn, bk, w, s)


def _bytes(calibrated: tuple[dict, dict, dict], dtype: str, bm: int, bn: int, bk: int, w: int,
           s: int) -> int:
    """The model's formula for one config, from one (arch, dtype) entry of `_lookup`."""
    offsets, extra, exceptions = calibrated
    exc = exceptions.get((bm, bn, bk, w, s)) if exceptions else None
    if exc is not None:
        return exc
    per_stage, const, scratch = extra.get((bm, bn, bk, w), _NO_EXTRA)
    pipeline = (s - offsets[bm]) * (bm * bk + bk * bn) * ELEM_BYTES[dtype] + per_stage * s + const
    return pipeline if pipeline >= scratch else scratch


def footprint(cfg: Any, arch: Arch, dtype: str, scales: str = "column",
              swap_ab: bool = False) -> SmemFootprint:
    """Shared memory of `cfg` on `arch` as named terms (A stages, B stages, calibrated extras)."""
    table = table_dtype(dtype, scales, swapped(cfg, dtype, swap_ab))
    offsets, extra, exceptions = _calibrated(arch, table)
    bm, bn, bk, _gm, w, s = cfg.values()
    elem = ELEM_BYTES[dtype]
    buffers = s - offsets[bm]
    per_stage, const, scratch = extra.get((bm, bn, bk, w), _NO_EXTRA)
    path = "num_stages buffers" if buffers == s else f"num_stages - {s - buffers} buffers"
    terms = [
        SmemTerm("A stages", buffers * bm * bk * elem,
                 f"{buffers} x [{bm}x{bk}] x {elem} B ({path})"),
        SmemTerm("B stages", buffers * bk * bn * elem,
                 f"{buffers} x [{bk}x{bn}] x {elem} B"),
    ]
    if per_stage:
        terms.append(SmemTerm("per-stage extra", per_stage * s,
                              f"{s} x {per_stage} B (barriers / scale buffers, calibrated)"))
    if const:
        what = "fp8 block-scale layout scratch + barriers" if dtype == "fp8-block" else "barriers"
        terms.append(SmemTerm("scratch", const, f"{what}, calibrated"))
    pipeline = sum(t.bytes for t in terms)
    if scratch > pipeline:
        terms.append(SmemTerm("epilogue scratch", scratch - pipeline,
                              f"layout conversion of the output tile needs {scratch:,} B; it reuses "
                              f"the {pipeline:,} B of pipeline buffers (calibrated)"))
    total = sum(t.bytes for t in terms)
    exc = exceptions.get((bm, bn, bk, w, s)) if exceptions else None
    calib = load_calibration()
    notes = [f"triton {calib['triton_version']} calibration"]
    if table.startswith(ROW_TABLE):
        notes.append("fp8 block scales applied per row where the tile's columns share one (SGLang's kernel)")
    if table.endswith(SWAP_SUFFIX):
        notes.append("computed as B^T A^T, the engines' sm90 swap-AB path")
    if exc is not None:
        notes.append("recorded oracle figure (no formula fit)")
        total = exc
    if not calib["_requested"]:
        notes.append(f"triton is not installed: figures are triton {calib['triton_version']}'s")
    elif calib["_requested"] != calib["triton_version"]:
        notes.append(f"installed triton {calib['_requested']} has no calibration; figures may "
                     f"differ (check with --verify; scripts/calibrate_triton.py records one)")
    return SmemFootprint(total=total, terms=tuple(terms), stages=s, source="model",
                         notes=tuple(notes))
