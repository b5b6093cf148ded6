"""Why it happened and what to do, for a finished `Diagnosis`.

Tile failures are sized by the fit engines through the kernel-family protocol (the CUTLASS family
for FlashInfer/TensorRT-LLM tactics); Triton's OutOfResources carries its own numbers, checked
against the arch catalog. Remedies are given in the engine's own terms. When a fit engine or the
arch is missing, the explanation says so instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilefit.diagnose import events as ev
from tilefit.diagnose.verdict import FATAL, RECOVERED, Diagnosis, FailureClass
from tilefit.kernels.base import EXCEEDS_SMEM, FITS

CUTLASS_FAMILY = "flashinfer-cutlass"
MAX_TILES = 8
_BITS = {"fp4": 4, "fp8": 8, "bf16": 16}


@dataclass(frozen=True, slots=True)
class Explanation:
    about: str      # a failure kind, or "tile 128x256x128"
    finding: str
    remedy: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"about": self.about, "finding": self.finding, "remedy": self.remedy}


def explain(d: Diagnosis, family_loader: Any = None) -> list[Explanation]:
    """Explanations for the cause (if fatal), then for tile and Triton failures."""
    arch = _arch(d.arch)
    out: list[Explanation] = []
    if d.verdict == FATAL and d.cause:
        out.append(_cause(d, arch))
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


# -- the fatal cause ---------------------------------------------------------------------------

def _cause(d: Diagnosis, arch: Any) -> Explanation:
    kind = d.cause
    line = d.decisive.line if d.decisive else None
    phase = f" during {d.phase.rsplit(', line', 1)[0]}" if d.phase else ""
    fc = d.failure(kind) if kind else None
    skipped = d.failure(ev.TACTIC_SKIPPED)
    aside = (f" The {skipped.count} skipped tactics before it were caught by the autotuner and are not "
             f"the cause." if skipped and kind != ev.TACTIC_SKIPPED else "")
    if kind == ev.CUDA_OOM:
        return Explanation(kind, f"the process ran out of GPU memory{phase} (line {line}).{aside}",
                           "leave more memory outside the KV cache: SGLang --mem-fraction-static lower "
                           "(e.g. by 0.05) or --cuda-graph-max-bs smaller; vLLM --gpu-memory-utilization "
                           "lower or --max-num-seqs smaller; or use more GPUs (tilefit plan)")
    if kind == ev.TRITON_OOR and fc is not None:
        return _triton_oor(fc, arch, fatal=True, hints=d.hints)
    if kind == ev.TRITON_CRASH:
        mlir = d.hints.get("mlir_pass")
        where = f" in pass {mlir}" if mlir else ""
        tool = d.hints.get("tool")
        lost = (" benchmark_moe writes its config file only after every batch size, so nothing was saved."
                if tool == "benchmark_moe" else "")
        return Explanation(kind, f"Triton's compiler crashed{where} (line {line}); a crash is not "
                           f"OutOfResources, so the sweep did not skip the config but ended.{lost}{aside}",
                           "rerun without that config (or with another Triton version); `tilefit tune` "
                           "runs each config in an isolated worker (a crash costs only that config) and "
                           "journals every result as it goes, so a rerun resumes")
    if kind in (ev.ILLEGAL_INSTRUCTION, ev.ILLEGAL_ACCESS, ev.CUDA_ERROR):
        return Explanation(kind, f"a kernel faulted{phase} (line {line}); CUDA reports it at the next "
                           f"synchronising call, so the Python frame shown may not be the faulting kernel."
                           f"{aside}",
                           "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; if it is an autotuned "
                           "MoE tactic on SM120 (see FlashInfer issue #4841), pin the default tactic or "
                           "block the autotuned ones with FLASHINFER_TACTICS_BLOCKLIST")
    if kind == ev.NCCL:
        return Explanation(kind, f"a collective failed or timed out (line {line}); other ranks often fail "
                           f"next, so look at the first rank that failed.{aside}",
                           "rerun with NCCL_DEBUG=INFO; check that every rank got past the same step")
    if kind in (ev.CUTLASS_INIT, ev.UNSUPPORTED_TILE):
        return Explanation(kind, f"a CUTLASS tile failure was not caught by an autotuner and ended the "
                           f"process (line {line}); see the tile explanations below",
                           "let the autotuner run (it skips such tactics) or choose a tile that fits")
    text = d.decisive.text[:160] if d.decisive else ""
    what = {ev.KILLED: "the process was killed (often the kernel's OOM killer: host memory)",
            ev.CRASHED: "the process crashed (segfault or abort)",
            ev.ENGINE_DIED: "the engine process died",
            ev.EXIT: "the process exited with a non-zero code",
            ev.EXCEPTION: "an uncaught Python exception ended the process"}.get(kind or "", kind or "")
    return Explanation(kind or "fatal", f"{what} (line {line}): {text}.{aside}",
                       "read the lines just before the decisive line; the first error there is the cause"
                       if kind in (ev.KILLED, ev.ENGINE_DIED, ev.EXIT) else "")


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
    if not tiles:
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


def _family(loader: Any) -> tuple[Any, str]:
    try:
        if loader is not None:
            return loader(CUTLASS_FAMILY), ""
        from tilefit.kernels.registry import get_family

        return get_family(CUTLASS_FAMILY), ""
    except Exception as e:  # any failure to load is reported, never raised
        return None, f"{type(e).__name__}: {e}"


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
        return Explanation(about, f"fit engine for {CUTLASS_FAMILY} could not size it: {type(e).__name__}: {e}")


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
        switch = _finalize_switch(d.engine)
        if switch:
            steps.append(f"the fused-finalize GEMM2 epilogue needs more shared memory: {switch} turns it off")
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


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
