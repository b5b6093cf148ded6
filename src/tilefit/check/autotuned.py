"""Check of a family whose configs the engine's autotuner profiles at warmup (FlashInfer's and
TensorRT-LLM's CUTLASS MoE tactics): every config the family lists for the arch, dtype and the
engine's fused-finalize setting, judged by the family's shared-memory model. A tactic's footprint
depends on its tile, stages, epilogue and swap-AB, not on the GEMM's N, so a layout change alters
which tactic wins, not which ones fail."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tilefit.check.types import FATAL, INFO, WARNING, Checked, CheckRequest, Finding, Judged
from tilefit.engines import BackendChoice, Engine, Remedy
from tilefit.engines.pins import flashinfer_pin
from tilefit.hw.catalog import GPU
from tilefit.kernels.base import EXCEEDS_SMEM, NO_DISPATCH, Judgement, KernelFamily
from tilefit.layout.plan import LayerPlan


def check_autotuned(req: CheckRequest, engine: Engine, family: KernelFamily, choice: BackendChoice,
                    gpu: GPU, plan: LayerPlan) -> tuple[list[Finding], Checked]:
    arch, dtype, options = gpu.arch, choice.family_dtype, dict(req.family_options)
    # The library version whose list to judge: the one given, else the one the engine release pins
    # (its wheel's Requires-Dist), else the family's newest catalogued.
    pinned = None if "flashinfer" in options else flashinfer_pin(choice.engine, req.engine_version)
    if pinned:
        options["flashinfer"] = pinned
    options["gpu_name"] = gpu.name  # a blocklist names the GPU its ids hold for
    backend = Finding(INFO, "backend", f"{choice.engine} runs {choice.engine_backend} "
                      f"({choice.family}, {dtype}) on {arch.name}", (choice.rule,))
    if dtype not in family.dtypes(arch):
        # The engine runs tactics tilefit has not catalogued: say so rather than guess.
        return [backend, Finding(
            WARNING, "not-modelled",
            f"tilefit has no catalog of {family.name} {dtype} tactics on {arch.name} "
            f"({family.source(**options)}): their shared memory was not checked",
            (f"catalogued on {arch.name}: {', '.join(family.dtypes(arch)) or 'none'}",
             "pass --backend triton to check the Triton fused-MoE path instead, if the engine can run it"))], \
            _checked(family, dtype, family.source(**options), 0, 0, options)
    finalize = engine.fused_finalize(version=req.engine_version, environ=req.env,
                                     settings=dict(req.flags) if req.flags else None)
    # The list the engine really profiles: with fused finalize off FlashInfer (>= 0.6.15) leaves the
    # FINALIZE copies out, and every later gemm2 id moves down.
    configs = family.configs(arch, dtype, fused_finalize=finalize.enabled is not False, **options)
    judged = family.judge(configs, arch, dtype, **options)
    fatal_info = engine.fatality(family.name)
    pin_note = (f"{choice.engine} {req.engine_version} installs flashinfer-python {pinned} (its wheel pins "
                f"it): these are that version's tactics; pass --flashinfer if yours differs",) if pinned else ()
    findings = [replace(backend, details=backend.details + (finalize.why,) + pin_note
                        + ((judged.note,) if judged.note else ()))]
    groups: dict[str, list[Any]] = {}
    for v in judged.verdicts:
        groups.setdefault(family.group(v.config), []).append(v)
    for group, verdicts in sorted(groups.items()):
        if not any(v.fits for v in verdicts):
            findings.append(Finding(
                FATAL, "no-tactic-fits", f"none of the {len(verdicts)} {group} tactics can launch on {arch.name}",
                (f"{choice.engine} has no fallback once every tactic fails",)))
    failing = judged.failing
    if failing:
        over = [v for v in failing if v.status == EXCEEDS_SMEM]
        nodisp = [v for v in failing if v.status == NO_DISPATCH]
        shapes = ", ".join(f"{g.name} [{g.n} x {g.k}] x {g.groups}" for g in plan.routed)
        details = [f"per-GPU GEMMs under {plan.layout.label()}: {shapes}; these tactics fail under any "
                   f"layout (a tactic's shared memory does not depend on N)",
                   f"{'fatal' if fatal_info.fatal else 'not fatal'}: {fatal_info.why}",
                   "log line to expect: " + fatal_info.log_line.replace(
                       "{gemm}", "/".join(sorted({family.group(v.config) for v in failing}))),
                   "extra warmup time per failed tactic: not known (nothing published measures it)"]
        details += [f"{v.config.label()}: {v.reason}" for v in over + nodisp]
        fixes = tuple(_with_blocklist(r, judged) for r in engine.remedies(
            family.name, arch=arch, version=req.engine_version, kinds=("blocklist", "finalize")))
        findings.append(Finding(
            FATAL if fatal_info.fatal else WARNING, "tactics-cannot-launch",
            f"{len(failing)} of {len(judged.verdicts)} tactics cannot launch on {gpu.name} "
            f"({len(over)} exceed {arch.smem_per_block_optin:,} B of shared memory, "
            f"{len(nodisp)} have no dispatch case)", tuple(details), fixes,
            tuple(Judged(v, family.group(v.config)) for v in failing)))
    for r in engine.remedies(family.name, arch=arch, version=req.engine_version, kinds=("warning",)):
        findings.append(Finding(WARNING, "known-risk", r.text, tuple(f"source: {src}" for src in r.sources)))
    return findings, _checked(family, dtype, judged.source, len(judged.verdicts), len(failing), options)


def _checked(family: KernelFamily, dtype: str, source: str, total: int, failing: int,
             options: dict[str, Any]) -> Checked:
    """What was judged; the JSON also names the family options the list was read under (e.g.
    the FlashInfer version given or pinned by the engine release)."""
    given = tuple((k, v) for k, v in options.items() if k in family.options and v is not None)
    return Checked(family.name, dtype, f"{total} tactics of {source}", total, failing,
                   (("source", source), ("tactics", total), *given))


def _with_blocklist(remedy: Remedy, judged: Judgement) -> Remedy:
    """A blocklist remedy with the file's content filled in (when this library version reads one)."""
    if remedy.kind != "blocklist" or not remedy.setting:
        return remedy
    if judged.blocklist is None:
        return replace(remedy, setting="", text=judged.no_blocklist) if judged.no_blocklist else remedy
    return replace(remedy, text=f"{remedy.text}; {judged.blocklist.note}",
                   setting=f"{remedy.setting}\n<file.json>:\n{judged.blocklist.content}")
