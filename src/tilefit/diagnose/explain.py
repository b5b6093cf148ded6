"""Why it happened and what to do, for a finished `Diagnosis`.

Tile failures are sized by the fit engines through the kernel-family protocol (the CUTLASS family
for FlashInfer/TensorRT-LLM tactics); Triton's OutOfResources carries its own numbers, checked
against the arch catalog. Remedies are given in the engine's own terms. When a fit engine or the
arch is missing, the explanation says so instead of guessing.
"""

from __future__ import annotations

from typing import Any

from tilefit.diagnose import events as ev
from tilefit.diagnose.causes import cause
from tilefit.diagnose.diagnosis import Explanation  # defined beside Diagnosis; importers use this name
from tilefit.diagnose.verdict import FATAL, RECOVERED, Diagnosis, FailureClass
from tilefit.kernels.base import EXCEEDS_SMEM, FITS

CUTLASS_FAMILY = "flashinfer-cutlass"
MAX_TILES = 8
_BITS = {"fp4": 4, "fp8": 8, "bf16": 16}


def explain(d: Diagnosis, family_loader: Any = None) -> list[Explanation]:
    """Explanations for the cause (if fatal), then for tile and Triton failures."""
    arch = _arch(d.arch)
    out: list[Explanation] = []
    if d.verdict == FATAL and d.cause:
        def sized(kind: str) -> Explanation | None:
            fc = d.failure(kind)
            return _triton_oor(fc, arch, fatal=True, hints=d.hints) if kind == ev.TRITON_OOR and fc else None

        out.append(cause(d, sized))
    elif d.verdict == RECOVERED and d.ready is not None:
        when = f", {d.seconds_to_ready:g} s after the first failure" if d.seconds_to_ready is not None else ""
        out.append(Explanation("recovery", f"every failure before line {d.ready.line} was survived: the "
                               f"process became ready at line {d.ready.line}{when}"))
    tiles = _tile_failures(d)
    if tiles:
        out.extend(_tiles(d, arch, tiles, family_loader))
    oor = d.failure(ev.TRITON_OOR)
    if oor is not None and d.cause != ev.TRITON_OOR:
        out.append(_triton_oor(oor, arch, fatal=False, hints=d.hints))
    return out


# -- Triton OutOfResources -----------------------------------------------------------------------

def _triton_oor(fc: FailureClass, arch: Any, *, fatal: bool, hints: dict[str, Any] | None = None
                ) -> Explanation:
    req, lim = _int(fc.fields.get("required")), _int(fc.fields.get("limit"))
    if req is None or lim is None:
        finding = "Triton kernel needs more shared memory than the GPU allows"
    else:
        finding = f"Triton kernel needs {req:,} B of shared memory; the GPU allows {lim:,} B per block " \
                  f"(over by {req - lim:,} B)"
    if arch is not None and lim is not None and lim == arch.smem_per_block_optin:
        finding += f", {arch.name}'s opt-in limit"
    elif arch is not None:
        finding += f"; {arch.name} allows {arch.smem_per_block_optin:,} B per block"
        if lim is not None:
            finding += ": the log may come from another GPU than the one given"
    elif lim is not None:
        from tilefit.hw.catalog import all_archs

        names = [a.name for a in all_archs() if a.smem_per_block_optin == lim]
        finding += f", the opt-in limit of {', '.join(names)}" if names else ""
    default = (hints or {}).get("default-moe-config")
    if isinstance(default, dict) and default.get("device"):
        finding += f"; the engine had no tuned MoE config for {default['device']} and used its default"
    if fatal:
        finding += "; it happened outside a tuning sweep, so the config in use does not fit and the " \
                   "process stopped"
    else:
        finding += f"; {fc.survived} of {fc.count} were skipped configs (the run went on)"
    from tilefit.engines import get_engine

    vllm, sglang = get_engine("vllm"), get_engine("sglang")
    remedy = ("lower num_stages, or BLOCK_SIZE_K / BLOCK_SIZE_N; give the engine a tuned config file for "
              f"this GPU (vLLM: {vllm.tuned_config_env}, SGLang: {sglang.tuned_config_env}), or run "
              "`tilefit tune`; `tilefit fit --family triton-moe` shows which configs fit")
    return Explanation(ev.TRITON_OOR, finding, remedy)


# -- CUTLASS tiles -------------------------------------------------------------------------------

def _tile_failures(d: Diagnosis) -> list[FailureClass]:
    return [f for f in d.failures if f.kind in ev.TILE_KINDS]


def _tiles(d: Diagnosis, arch: Any, classes: list[FailureClass], family_loader: Any) -> list[Explanation]:
    tiles: list[str] = []
    finalize: set[str] = set()
    fields: dict[str, Any] = {}
    for fc in classes:
        for t in fc.tiles:
            if t not in tiles:
                tiles.append(t)
        finalize.update(fc.finalize_tiles)
        for k, v in fc.fields.items():
            fields.setdefault(k, v)
    counts = ", ".join(f"{fc.count} {fc.kind}" for fc in classes)
    out: list[Explanation] = []
    tactic_ids = [t for fc in classes for t in fc.tactics if t.lstrip("-").isdigit()]
    if not tiles and tactic_ids and arch is not None:
        # FlashInfer <= 0.6.7 names only the tactic id: the tactic list of the FlashInfer version
        # the log printed (or the newest catalogued) says which tile and fusion that id is.
        found = _tactics_by_id(d, arch, fields, tactic_ids, family_loader)
        out.extend(found[0])
        finalize.update(found[1])
    elif not tiles:
        how = ("rerun with TLLM_LOG_LEVEL=DEBUG (the warning says so) to see the exceptions"
               if d.engine == "trtllm" else
               "FlashInfer >= 0.6.8 logs each failed tactic only at DEBUG level; rerun with FlashInfer's "
               "debug logging to see them")
        out.append(Explanation("tiles", f"{counts}: the log does not name the failing tiles",
                               f"{how}, or run `tilefit fit --family {CUTLASS_FAMILY}` for the tiles that "
                               "cannot fit"))
    elif arch is None:
        out.append(Explanation("tiles", f"{counts}; tiles {', '.join(tiles[:MAX_TILES])}: arch unknown "
                               "(the log names none), so they cannot be sized",
                               "pass --gpu NAME or --arch smXX"))
    else:
        family, problem = _family(family_loader)
        for tile in tiles[:MAX_TILES]:
            if family is None:
                out.append(Explanation(f"tile {tile}", f"fit engine for {CUTLASS_FAMILY} not available: "
                                       f"{problem}"))
                continue
            out.append(_size_tile(family, tile, arch, fields, tile in finalize))
        if len(tiles) > MAX_TILES:
            out.append(Explanation("tiles", f"{len(tiles) - MAX_TILES} more tiles not shown"))
    out.append(Explanation("tactics", _tactic_summary(d, classes),
                           _tile_remedy(d, {**fields, "finalize_tiles": sorted(finalize)})))
    return out


def _flashinfer_version(d: Diagnosis) -> tuple[str | None, str]:
    """(the FlashInfer version the log printed or None, how to say which version was used)."""
    from tilefit.kernels.flashinfer_cutlass.catalog import latest_version

    versions = d.hints.get("versions") or {}
    printed = versions.get("flashinfer") if isinstance(versions, dict) else None
    if printed:
        return printed, f"FlashInfer {printed} (from the log)"
    return None, f"FlashInfer {latest_version()} assumed (the log prints no version; tactic ids are per version)"


def _tactics_by_id(d: Diagnosis, arch: Any, fields: dict[str, Any], ids: list[str], family_loader: Any
                   ) -> tuple[list[Explanation], set[str]]:
    """Explanations for failed tactic ids: the tile, fusion and bytes vs limit of each."""
    family, problem = _family(family_loader)
    if family is None:
        return [Explanation("tactics", f"fit engine for {CUTLASS_FAMILY} not available: {problem}")], set()
    version, said = _flashinfer_version(d)
    try:
        dtype = _dtype(family, arch, fields.get("dtype_hint"))
        try:
            listed = family.configs(arch, dtype, flashinfer=version)
        except Exception:  # a version the catalog does not know: the newest list, said so
            version, said = None, f"FlashInfer {version} is not catalogued; its newest list assumed"
            listed = family.configs(arch, dtype)
        by_id = {t.tactic_id: t for t in listed if getattr(t, "tactic_id", None) is not None}
    except Exception as e:  # the fit engine is someone else's code: report, never fail the diagnosis
        return [Explanation("tactics", f"could not size these tactics: {_reason(e)}")], set()
    out: list[Explanation] = []
    finalize: set[str] = set()
    dtype_note = "" if fields.get("dtype_hint") else f", {dtype} assumed"
    for tid in list(dict.fromkeys(ids))[:MAX_TILES]:
        t = by_id.get(int(tid))
        if t is None:
            out.append(Explanation(f"tactic {tid}", f"{said} lists no tactic {tid} for {dtype} on {arch.name}"))
            continue
        if t.fusion == "finalize":
            finalize.add(t.tile_text)
        try:
            v = family.verdict(t, arch, dtype, flashinfer=version)
            fp = v.footprint
            if fp is None:
                finding = f"{t.label()} ({dtype}) on {arch.name}: {v.status}: {v.reason}"
            else:
                finding = (f"{t.label()} ({dtype}) on {arch.name} {'fits' if v.fits else 'does NOT fit'}: "
                           f"needs {fp.total:,} B vs limit {v.limit:,} B")
                if v.fits:
                    finding += ("; it fits, so it failed for another reason, or this id is another tile in the "
                                "FlashInfer version that wrote the log")
        except Exception as e:
            finding = f"{t.label()}: could not size this tile: {_reason(e)}"
        out.append(Explanation(f"tactic {tid}", f"{finding} ({said}{dtype_note})"))
    return out, finalize


def _family(loader: Any) -> tuple[Any, str]:
    try:
        if loader is not None:
            return loader(CUTLASS_FAMILY), ""
        from tilefit.kernels.registry import get_family

        return get_family(CUTLASS_FAMILY), ""
    except Exception as e:  # any failure to load is reported, never raised
        return None, _reason(e)


def _size_tile(family: Any, tile: str, arch: Any, fields: dict[str, Any], finalize: bool) -> Explanation:
    about = f"tile {tile}"
    try:
        dtype = _dtype(family, arch, fields.get("dtype_hint"))
        text = _elements(tile, fields.get("dtype_hint"))
        variants = [f"{text} finalize", text] if finalize else [text]
        last_error: Exception | None = None
        for variant in variants:
            try:
                config = family.parse_config(variant, dtype)
                break
            except Exception as e:  # try the plainer spelling
                last_error = e
        else:
            raise last_error or ValueError("no config")
        versions = _undispatched_versions(arch.name, dtype, tile) if tile.endswith("B") else []
        v = family.verdict(config, arch, dtype, flashinfer=versions[0][0]) if versions else \
            family.verdict(config, arch, dtype)
        fp = v.footprint
        label = config.label() if hasattr(config, "label") else variant
        seen_in = ""
        if versions:
            spans = ", ".join(f"{lo} to {'before ' + hi if hi else 'the newest catalogued'}" for lo, hi in versions)
            seen_in = (f"; FlashInfer offers this tile without a dispatch case only in {spans}, so the log "
                       f"comes from such a version")
        if fp is None:
            return Explanation(about, f"{label} ({dtype}) on {arch.name}: {v.status}: {v.reason}{seen_in}")
        top = fp.dominant()
        stages = f", {fp.stages} stages" if fp.stages else ""
        verdict = "fits" if v.fits else "does NOT fit"
        finding = (f"{label} ({dtype}) on {arch.name} {verdict}: needs {fp.total:,} B vs limit {v.limit:,} B"
                   f"{stages}; largest term {top.name} {top.bytes:,} B")
        finding += seen_in
        if v.status not in (FITS, EXCEEDS_SMEM):
            finding += f"; {v.status}: {v.reason}"
        elif v.fits:
            finding += ("; it fits, so it failed for another reason (a tile with no dispatch case, or a "
                        "model error: `tilefit fit --verify` compiles it)")
        return Explanation(about, finding)
    except Exception as e:  # the fit engine is someone else's code: report, never fail the diagnosis
        return Explanation(about, f"could not size this tile: {_reason(e)}")


def _undispatched_versions(arch: str, dtype: str, tile_bytes: str) -> list[tuple[str, str | None]]:
    """FlashInfer version ranges [lo, hi) whose candidate list offers the tile enum `tile_bytes`
    ('128x128x256B') on arch/dtype without a dispatch case: the versions that can print
    'Unsupported tile shape config' for it."""
    from tilefit.kernels.flashinfer_cutlass.catalog import tactic_lists

    def text(v: tuple[int, ...]) -> str:
        return ".".join(map(str, v))

    spans = sorted((tl.min, tl.max) for tl in tactic_lists()
                   if arch in tl.archs and dtype in tl.dtypes and tile_bytes not in tl.dispatch
                   and any(enum == tile_bytes for enum, *_ in tl.configs))
    merged: list[tuple[tuple[int, ...], tuple[int, ...] | None]] = []
    for lo, hi in spans:  # join back-to-back ranges: [0.6.8, 0.6.11) + [0.6.11, 0.7.1)
        if merged and merged[-1][1] == lo:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return [(text(lo), text(hi) if hi else None) for lo, hi in merged]


def _dtype(family: Any, arch: Any, hint: str | None) -> str:
    names = list(family.dtypes(arch))
    if not names:
        raise ValueError(f"no dtypes for {arch.name}")
    if hint:
        for n in names:
            if hint in n:
                return n
    return names[0]


def _elements(tile: str, hint: str | None) -> str:
    """'128x128x256B' (K in bytes, from a tile enum) -> elements when the data type is known."""
    if not tile.endswith("B"):
        return tile
    m, n, k = tile[:-1].split("x")
    bits = _BITS.get(hint or "")
    return f"{m}x{n}x{int(k) * 8 // bits}" if bits else tile


def _tactic_summary(d: Diagnosis, classes: list[FailureClass]) -> str:
    parts = []
    for fc in classes:
        tactics = f" (tactics {', '.join(fc.tactics[:12])}{', ...' if len(fc.tactics) > 12 else ''})" \
            if fc.tactics else ""
        parts.append(f"{fc.count} {fc.kind}{tactics}, lines {fc.first_line}-{fc.last_line}")
    caught = all(fc.survived >= fc.count for fc in classes)
    tail = ("; all were caught (the autotuner scores a failed tactic as infinitely slow and picks another)"
            if caught else "")
    return "; ".join(parts) + tail


def _tile_remedy(d: Diagnosis, fields: dict[str, Any]) -> str:
    if d.engine == "trtllm":
        steps = ["harmless on their own: TensorRT-LLM's autotuner records failed tactics and picks another"]
    else:
        steps = ["harmless on their own; to stop profiling them, list them in a FLASHINFER_TACTICS_BLOCKLIST "
                 "file (a JSON path FlashInfer's autotuner loads at start)",
                 f"`tilefit fit --family {CUTLASS_FAMILY} --emit-blocklist` prints the tactics predicted to "
                 "fail"]
    if fields.get("finalize") or fields.get("finalize_tiles") or fields.get("gemm") == "gemm2":
        from tilefit.engines import engine_names

        servers = [d.engine] if d.engine in engine_names() else \
            [e for e in getattr(d, "components", []) if e in engine_names()]
        if servers:
            switches = [s for s in map(_finalize_switch, servers) if s]
        else:  # a library log with no server named: the servers' switches
            switches = [f"{e}: {s}" for e in engine_names() if (s := _finalize_switch(e))]
        if switches:
            steps.append("FINALIZE tactics failed: the fused-finalize GEMM2 epilogue needs more shared memory; "
                         f"{' / '.join(dict.fromkeys(switches))} turns it off")
    return "; ".join(steps)


def _finalize_switch(engine: str | None) -> str | None:
    """The engine's setting that turns fused finalize off (engines' remedies table), if it has one."""
    from tilefit.engines import engine_names, get_engine

    if engine not in engine_names():
        return None
    return next((r.setting for r in get_engine(engine).remedies(CUTLASS_FAMILY, kinds=("finalize",))
                 if r.setting), None)


def _arch(name: str | None) -> Any:
    if not name:
        return None
    try:
        from tilefit.hw.catalog import get_arch

        return get_arch(name)
    except Exception:
        return None


def _reason(e: Exception) -> str:
    """A fit engine's error as a reason for people: its message, never a Python class name."""
    text = " ".join(str(e).split()) or "no reason given"
    return text[:300]


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
