"""Check of the FlashInfer / TensorRT-LLM CUTLASS MoE path: every tactic the autotuner will profile,
judged by the SharedStorage model. A tactic's footprint depends on its tile, stages, epilogue and
swap-AB, not on the GEMM's N, so a layout change alters which tactic wins, not which ones fail."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from tilefit.check.report import FATAL, INFO, WARNING, CheckRequest, Finding
from tilefit.kernels.base import EXCEEDS_SMEM, NO_DISPATCH


def check_cutlass(req: CheckRequest, choice: Any, gpu: Any, plan: Any) -> tuple[list[Finding], dict]:
    from tilefit.engines import get_engine
    from tilefit.kernels.registry import get_family

    from tilefit.engines.pins import flashinfer_pin

    engine = get_engine(choice.engine)
    family = get_family("flashinfer-cutlass")
    # The FlashInfer whose tactic list to judge: the one given, else the one the engine release
    # pins (its wheel's Requires-Dist), else the newest catalogued.
    pinned = None if req.flashinfer else flashinfer_pin(choice.engine, req.engine_version)
    flashinfer = req.flashinfer or pinned
    arch, dtype = gpu.arch, choice.family_dtype
    backend = Finding(INFO, "backend", f"{choice.engine} runs {choice.engine_backend} "
                      f"({choice.family}, {dtype}) on {arch.name}", (choice.rule,))
    if dtype not in family.dtypes(arch):
        # The engine runs tactics tilefit has not catalogued: say so rather than guess.
        return [backend, Finding(
            WARNING, "not-modelled",
            f"tilefit has no catalog of FlashInfer's {dtype} CUTLASS MoE tactics on {arch.name}: "
            f"their shared memory was not checked",
            (f"catalogued on {arch.name}: {', '.join(family.dtypes(arch)) or 'none'}",
             "pass --backend triton to check the Triton fused-MoE path instead, if the engine can run it"))], \
            _checked(dtype, flashinfer, 0, 0)
    state = engine.fused_finalize(version=req.engine_version, environ=req.env,
                                  settings=dict(req.flags) if req.flags else None)
    finalize, finalize_why = state.enabled, state.why
    # The list the engine really profiles: with fused finalize off FlashInfer (>= 0.6.15) leaves the
    # FINALIZE copies out, and every later gemm2 id moves down.
    tactics = list(family.configs(arch, dtype, flashinfer=flashinfer,
                                  fused_finalize=finalize is not False))
    verdicts = [family.verdict(t, arch, dtype, flashinfer=flashinfer) for t in tactics]
    failing = [v for v in verdicts if not v.fits]
    fatal_info = engine.fatality("flashinfer-cutlass")
    shapes = ", ".join(f"{g.name} [{g.n} x {g.k}] x {g.groups}" for g in plan.routed)
    note = family.note(flashinfer=flashinfer)
    pin_note = (f"{choice.engine} {req.engine_version} installs flashinfer-python {pinned} (its wheel pins "
                f"it): these are that version's tactics; pass --flashinfer if yours differs",) if pinned else ()
    findings = [replace(backend, details=backend.details + (finalize_why,) + pin_note
                        + ((note,) if note else ()))]
    by_gemm = Counter(v.config.gemm for v in verdicts)
    fits_by_gemm = Counter(v.config.gemm for v in verdicts if v.fits)
    for gemm, total in sorted(by_gemm.items()):
        if fits_by_gemm[gemm] == 0:
            findings.append(Finding(
                FATAL, "no-tactic-fits", f"none of the {total} {gemm} tactics can launch on {arch.name}",
                (f"{choice.engine} has no fallback once every tactic fails",)))
    if failing:
        items = tuple(_item(v) for v in failing)
        over = [v for v in failing if v.status == EXCEEDS_SMEM]
        nodisp = [v for v in failing if v.status == NO_DISPATCH]
        details = [f"per-GPU GEMMs under {plan.layout.label()}: {shapes}; these tactics fail under any "
                   f"layout (a tactic's shared memory does not depend on N)",
                   f"{'fatal' if fatal_info.fatal else 'not fatal'}: {fatal_info.why}",
                   "log line to expect: " + fatal_info.log_line.replace(
                       "{gemm}", "/".join(sorted({v.config.gemm for v in failing}))),
                   "extra warmup time per failed tactic: not known (nothing published measures it)"]
        details += [f"{v.config.label()}: {v.reason}" for v in over + nodisp]
        fix = [_with_blocklist(r.as_dict(), family, failing, flashinfer, gpu.name)
               for r in engine.remedies("flashinfer-cutlass", arch=arch, version=req.engine_version,
                                        kinds=("blocklist", "finalize"))]
        findings.append(Finding(
            FATAL if fatal_info.fatal else WARNING, "tactics-cannot-launch",
            f"{len(failing)} of {len(verdicts)} tactics cannot launch on {gpu.name} "
            f"({len(over)} exceed {arch.smem_per_block_optin:,} B of shared memory, "
            f"{len(nodisp)} have no dispatch case)", tuple(details), tuple(fix), items))
    for r in engine.remedies("flashinfer-cutlass", arch=arch, version=req.engine_version,
                             kinds=("warning",)):
        findings.append(Finding(WARNING, "known-risk", r.text,
                                tuple(f"source: {src}" for src in r.as_dict()["sources"])))
    return findings, _checked(dtype, flashinfer, len(verdicts), len(failing))


def _checked(dtype: str, flashinfer: str | None, tactics: int, failing: int) -> dict[str, Any]:
    """The report's summary of what was checked."""
    return {"family": "flashinfer-cutlass", "dtype": dtype, "flashinfer": flashinfer or "latest catalogued",
            "tactics": tactics, "fit": tactics - failing, "fail": failing}


def _with_blocklist(remedy: dict[str, Any], family: Any, failing: list, flashinfer: str | None,
                    gpu_name: str | None = None) -> dict[str, Any]:
    """A blocklist remedy with the file's content filled in (when this FlashInfer reads one)."""
    from tilefit.errors import UsageError

    if remedy["kind"] != "blocklist" or not remedy["setting"]:
        return remedy
    try:
        content = family.blocklist(failing, flashinfer=flashinfer, gpu_name=gpu_name)
    except UsageError as e:  # FlashInfer before 0.6.15 has no blocklist
        return {**remedy, "setting": "", "text": str(e)}
    from tilefit.kernels.flashinfer_cutlass.catalog import latest_version

    version = flashinfer or latest_version()
    note = (f"tactic ids of FlashInfer {version}" + ("" if flashinfer else " (the newest catalogued)")
            + ": ids move between versions, so pass --flashinfer with the version the engine has installed")
    return {**remedy, "text": remedy["text"] + "; " + note,
            "setting": remedy["setting"] + "\n<file.json>:\n" + content}


def _item(v: Any) -> dict[str, Any]:
    fp = v.footprint
    return {"gemm": v.config.gemm, "tactic": v.config.label(), "config": v.config.as_dict(),
            "status": v.status, "smem_bytes": fp.total if fp else None, "limit_bytes": v.limit,
            "stages": fp.stages if fp else None, "reason": v.reason}
