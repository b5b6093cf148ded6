"""`tilefit fit`: the shared memory every config of a kernel family needs on an arch, and why a
config does not fit. Talks only to the family protocol (kernels/base.py) through the registry."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tilefit.cli.args import add_json_arg, add_target_args
from tilefit.cli.output import Block, Table, info, print_json, show
from tilefit.kernels.base import EXCEEDS_SMEM, FITS, NO_DISPATCH, UNSUPPORTED

SHOW_LIMIT = 64  # rows shown without --all when a space is larger than this (CUTLASS lists fit whole)
VERIFY_CHUNK = 16  # configs per oracle call while a progress bar is shown


def register(sub: argparse._SubParsersAction) -> None:
    from tilefit.kernels.registry import FAMILIES

    p = sub.add_parser("fit", help="shared memory each kernel config needs, and whether it fits",
                       description="Judge a kernel family's configs against an arch's shared-memory limit. "
                                   "Families: " + "; ".join(f"{k}: {v[1]}" for k, v in FAMILIES.items()))
    p.add_argument("--family", required=True, metavar="NAME", help=", ".join(FAMILIES))
    add_target_args(p)
    p.add_argument("--dtype", help="data type (default: the family's first on this arch)")
    p.add_argument("--config", action="append", metavar="CFG",
                   help="one config to judge (repeatable); triton-moe: BM,BN,BK,GM,warps,stages; "
                        "flashinfer-cutlass: a tile in elements (128x256x128) or as FlashInfer's enum "
                        "(CtaShape128x256x64B); a bare tile stands for all its catalogued tactics, "
                        "qualifiers pick one: finalize, swap-ab, gemm1|gemm2, cMxNxK or 2sm, nosmem, ultra")
    p.add_argument("--all", action="store_true", help="list every config, not only a summary and failures")
    p.add_argument("--verify", action="store_true",
                   help="compile the shown configs with the family's oracle and compare with the model")
    p.add_argument("--flashinfer", metavar="VERSION", help="FlashInfer version whose tactics to judge")
    p.add_argument("--gemm", choices=("gemm1", "gemm2"), help="only this GEMM's tactics (CUTLASS family)")
    p.add_argument("--scales", choices=("column", "row"),
                   help="triton-moe fp8-block: weight scales applied per column (vLLM's kernel, the "
                        "default) or per row where a tile's columns share one (SGLang's kernel)")
    p.add_argument("--swap-ab", action="store_true",
                   help="triton-moe fp8 on sm90: tiles with BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64 "
                        "computed as B^T A^T, as vLLM (>= 0.25) and SGLang run them")
    p.add_argument("--emit-blocklist", action="store_true",
                   help="print the tactics predicted to fail in the engine's blocklist format")
    add_json_arg(p)
    p.set_defaults(func=run)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if args.flashinfer:
        opts["flashinfer"] = args.flashinfer
    if args.gemm:
        opts["gemm"] = args.gemm
    if args.scales:
        opts["scales"] = args.scales
    if args.swap_ab:
        opts["swap_ab"] = True
    return opts


def _row(v: Any, dtype: str, gpu: Any) -> dict[str, Any]:
    fp = v.footprint
    return {
        "config": v.config.as_dict(),
        "label": v.config.label(),
        "arch": v.arch.name,
        "gpu": gpu.key if gpu else None,
        "dtype": dtype,
        "smem_bytes": fp.total if fp else None,
        "limit_bytes": v.limit,
        "margin_bytes": v.margin,
        "fits": v.fits,
        "status": v.status,
        "reason": v.reason,
        "stages": fp.stages if fp else None,
        "terms": [{"name": t.name, "bytes": t.bytes, "detail": t.detail} for t in fp.terms] if fp else [],
        "source": fp.source if fp else "catalog",
    }


def run(args: argparse.Namespace) -> int:
    from tilefit.errors import UsageError
    from tilefit.hw.catalog import resolve_target
    from tilefit.kernels.registry import get_family

    family = get_family(args.family)
    gpu, arch = resolve_target(args.gpu, args.arch)
    supported = list(family.dtypes(arch))
    if not supported:
        raise UsageError(f"{family.name} has no kernels for {arch.name}")
    dtype = args.dtype or supported[0]
    if dtype not in supported:
        family.configs(arch, dtype)  # a family that knows why (e.g. not catalogued) raises its reason
        raise UsageError(f"{family.name} does not support dtype {dtype!r} on {arch.name}; "
                         f"choose from {', '.join(supported)}")
    options = _options(args)
    unknown = [o for o in options if o not in family.options]
    if unknown:
        from tilefit.kernels.registry import FAMILIES

        takers = [n for n in FAMILIES if unknown[0] in get_family(n).options]
        raise UsageError(f"--{'/--'.join(unknown)} applies to --family {' or '.join(takers)} only")
    if args.config:
        configs = []
        for text in args.config:
            config = family.parse_config(text, dtype, arch=arch, **options)
            # A family may map one spelling to several catalogued configs (CUTLASS: a bare tile).
            configs += family.expand(text, config, arch, dtype, **options) or [config]
    else:
        configs = list(family.configs(arch, dtype, **options))
    judged = family.judge(configs, arch, dtype, gpu_name=gpu.name if gpu else None, **options)
    verdicts = list(judged.verdicts)
    if judged.note:
        info(f"tilefit: note: {judged.note}")

    if args.emit_blocklist:
        if judged.blocklist is None:
            from tilefit.kernels.registry import FAMILIES

            takers = [n for n in FAMILIES if get_family(n).blocklist([]) is not None]
            raise UsageError(judged.no_blocklist or f"{family.name} has no engine blocklist; --emit-blocklist "
                             f"applies to {' or '.join(takers)}")
        print(judged.blocklist.content)
        return 0

    grouped = bool(verdicts) and family.tile(verdicts[0].config) is not None \
        and not (args.all or args.config or args.json or args.verify)
    shown = verdicts if (args.all or args.config or args.json or len(verdicts) <= SHOW_LIMIT) \
        else [v for v in verdicts if not v.fits][:SHOW_LIMIT]
    rows = [_row(v, dtype, gpu) for v in shown]
    disagreements = 0
    if args.verify:
        if len(shown) > SHOW_LIMIT:
            info(f"verifying {len(shown)} configs with the compiler; this can take a while")
        checks = _verify(family, [v.config for v in shown if v.footprint], arch, dtype, options)
        by_label = {c.config.label(): c for c in checks}
        for row in rows:
            c = by_label.get(row["label"])
            if c is None:
                continue
            row["model_bytes"] = c.model_bytes
            row["oracle_bytes"] = c.oracle_bytes
            row["oracle"] = c.oracle
            row["source"] = "oracle"
            row["agrees"] = c.agrees
            disagreements += not c.agrees

    if args.json:
        print_json(rows)
    elif grouped:
        show(*_render_tiles(family, arch, gpu, dtype, verdicts))
    else:
        show(*_render(family, arch, gpu, dtype, verdicts, rows, args))
    if disagreements:
        print(f"tilefit: {disagreements} config(s) where the model and the oracle disagree: "
              f"this is a bug in the model, please report it", file=sys.stderr)
        return 1
    if args.config and any(not v.fits for v in verdicts):
        return 1
    return 0


def _verify(family: Any, configs: list, arch: Any, dtype: str, options: dict[str, Any]) -> list:
    """The oracle's checks; on a terminal in chunks, so that a bar on stderr shows how far it got
    (a chunk keeps the oracle's own parallel compiles busy)."""
    from tilefit.cli.progress import Bar

    with Bar(f"compiling {len(configs)} configs", len(configs)) as bar:
        if not bar.live:
            return list(family.verify(configs, arch, dtype, **options))
        checks: list = []
        for i in range(0, len(configs), VERIFY_CHUNK):
            chunk = configs[i:i + VERIFY_CHUNK]
            checks += family.verify(chunk, arch, dtype, **options)
            bar.advance(len(chunk))
        return checks


def _headline(family: Any, arch: Any, gpu: Any, dtype: str, verdicts: list) -> list[str]:
    target = f"{gpu.name} ({arch.name})" if gpu else arch.name
    fits = sum(v.fits for v in verdicts)
    lines = [f"{family.name} {dtype} on {target}: limit {arch.smem_per_block_optin:,} B per block; "
             f"{len(verdicts)} config(s), {fits} fit, {len(verdicts) - fits} do not"]
    return lines + family.summary(verdicts)


def tile_rows(family: Any, verdicts: list) -> list[tuple[Any, ...]]:
    """One row per tile: (tile, deepest fitting depth, its bytes, margin, configs that fit, verdict,
    why). The bytes are the largest among the configs at that depth (warps can change them)."""
    by_tile: dict[str, dict[int, list]] = {}
    for v in verdicts:
        tile, depth = family.tile(v.config)
        by_tile.setdefault(tile, {}).setdefault(depth, []).append(v)
    rows = []
    for tile, depths in by_tile.items():
        fitting = [d for d, vs in depths.items() if any(v.fits for v in vs)]
        count = sum(v.fits for vs in depths.values() for v in vs)
        total = sum(len(vs) for vs in depths.values())
        if not fitting:
            low = min(depths)
            v = min(depths[low], key=lambda v: v.footprint.total if v.footprint else 0)
            rows.append((tile, None, v.footprint.total if v.footprint else None, v.margin,
                         f"0 of {total}", _verdict_word(_row(v, "", None)), f"s{low}: {v.reason}"))
            continue
        deep = max(fitting)
        best = max((v for v in depths[deep] if v.fits), key=lambda v: v.footprint.total)
        deeper = [d for d in depths if d > deep]
        if deeper:
            nxt = min(deeper)
            over = min((v for v in depths[nxt] if v.footprint), key=lambda v: v.footprint.total)
            why = f"s{nxt} needs {over.footprint.total:,} B (over by {-over.margin:,} B)"
        else:
            why = f"every depth fits; largest: {best.footprint.dominant().name} {best.footprint.dominant().bytes:,} B"
        rows.append((tile, f"s{deep}", best.footprint.total, best.margin, f"{count} of {total}", "fits", why))
    return rows


def _render_tiles(family: Any, arch: Any, gpu: Any, dtype: str, verdicts: list) -> list[Block]:
    rows = tile_rows(family, verdicts)
    return [*_headline(family, arch, gpu, dtype, verdicts), "",
            Table.of(["tile", "deepest fit", "smem B", "margin B", "configs fit", "verdict", "why"], rows,
                     "lrrrrll"),
            f"one row per tile (BMxBNxBK) at the deepest pipeline that fits; GROUP_SIZE_M and num_warps "
            f"do not change whether it fits. --all lists all {len(verdicts)} configs, --json gives them as data"]


def _render(family: Any, arch: Any, gpu: Any, dtype: str, verdicts: list, rows: list[dict], args) -> list[Block]:
    lines: list[Block] = [*_headline(family, arch, gpu, dtype, verdicts), ""]
    verify = any("oracle_bytes" in r for r in rows)
    headers = ["config", "stages", "smem B", "limit B", "margin B", "verdict", "why"]
    if verify:
        headers[3:3] = ["oracle B"]
    body = []
    for r in rows:
        top = max(r["terms"], key=lambda t: t["bytes"]) if r["terms"] else None
        if r["status"] != FITS:
            why = r["reason"]
        else:
            why = ("exactly at the limit; " if r["margin_bytes"] == 0 else "") + \
                (f"largest: {top['name']} {top['bytes']:,} B" if top else "")
        cells = [r["label"], r["stages"], r["smem_bytes"], r["limit_bytes"], r["margin_bytes"],
                 _verdict_word(r), why]
        if verify:
            cells[3:3] = [r.get("oracle_bytes")]
        body.append(cells)
    lines.append(Table.of(headers, body, "lrrr" + ("r" if verify else "") + "rll"))
    hidden = len(verdicts) - len(rows)
    if hidden > 0:
        lines.append(f"... {hidden} more config(s) not shown (fitting ones and any past {SHOW_LIMIT}); "
                     f"--all lists every one, --json gives all as data")
    return lines


def _verdict_word(r: dict) -> str:
    return {FITS: "fits", EXCEEDS_SMEM: "EXCEEDS", NO_DISPATCH: "NO DISPATCH",
            UNSUPPORTED: "UNSUPPORTED"}.get(r["status"], r["status"])
