"""Check of the Triton fused-MoE path (vLLM, SGLang): the tuned config file the engine would load,
or else its default config per batch size, judged by the triton-moe shared-memory model. A config
that cannot launch raises OutOfResources at first use and takes the server down."""

from __future__ import annotations

from typing import Any

from tilefit.check.report import FATAL, INFO, WARNING, CheckRequest, Finding

MODEL_CAVEAT = ("bytes are tilefit's Triton fused-MoE kernel compiled by the installed Triton's "
                "calibration; the engine's own kernel differs in detail (scale and epilogue buffers), "
                "so treat margins under ~4 KB as too close to call")


def check_triton(req: CheckRequest, choice: Any, gpu: Any, plan: Any) -> tuple[list[Finding], dict]:
    from tilefit.engines import get_engine
    from tilefit.engines.triton_moe import installed_triton_version, read_config_file
    from tilefit.kernels.registry import get_family
    from tilefit.kernels.triton_moe.config import MoEConfig, in_grid

    family = get_family("triton-moe")
    arch, dtype = gpu.arch, choice.family_dtype
    model = plan.model
    e_local, n = plan.local_experts, model.expert_width // plan.layout.tp
    engine = get_engine(choice.engine)
    fatal_info = engine.fatality("triton-moe")
    findings = [Finding(INFO, "backend", f"{choice.engine} runs {choice.engine_backend} "
                        f"({choice.family}, {dtype}) on {arch.name}", (choice.rule,))]
    lookup = engine.find_tuned_config(E=e_local, N=n, device_name=gpu.name, weight_dtype=model.weight_dtype,
                                      triton_version=installed_triton_version(), config_dir=req.config_dir,
                                      version=req.engine_version, environ=req.env)
    tune_cmd = f"tilefit tune --model {req.model} --tp {req.tp} --ep {req.ep} --target {choice.engine}"
    tuned_fix = [r.as_dict() for r in engine.remedies("triton-moe", arch=arch, version=req.engine_version,
                                                      kinds=("tuned-config",), name=lookup.file_name)]
    tuned_fix.insert(0, {"kind": "tuned-config", "setting": tune_cmd,
                         "text": f"tune {lookup.file_name} on this GPU (every config it writes fits); "
                                 f"where to write it and how to point {choice.engine} at it:"})
    if lookup.found is not None:
        version, per_batch = read_config_file(lookup.found)
        judged = {b: family.verdict(MoEConfig.from_dict(c), arch, dtype) for b, c in sorted(per_batch.items())}
        bad = {b: v for b, v in judged.items() if not v.fits}
        source = f"tuned file {lookup.found}"
        if bad:
            findings.append(Finding(
                FATAL if fatal_info.fatal else WARNING, "tuned-config-exceeds-smem",
                f"{len(bad)} of {len(judged)} entries of {lookup.found.name} cannot launch on {arch.name}",
                tuple(f"batch {b}: {v.config.label()}: {v.reason}" for b, v in bad.items())
                + (fatal_info.why, MODEL_CAVEAT), tuple(tuned_fix),
                tuple(_item(b, v) for b, v in bad.items())))
        else:
            findings.append(Finding(INFO, "tuned-config", f"tuned config found: {lookup.found}",
                                    (f"all {len(judged)} entries fit {arch.smem_per_block_optin:,} B"
                                     + (f" (written for triton {version})" if version else ""),)))
    else:
        source = "engine defaults"
        defaults = engine.default_configs(req.batches, E=e_local, weight_dtype=model.weight_dtype,
                                          arch=arch, version=req.engine_version)
        judged = {b: family.verdict(d.as_moe_config(), arch, dtype) for b, d in defaults.items()}
        bad = {b: v for b, v in judged.items() if not v.fits}
        tried = "; ".join(str(p) for p in lookup.tried) or "no folder to search"
        findings.append(Finding(
            WARNING, "no-tuned-config",
            f"no tuned config {lookup.file_name}: {choice.engine} falls back to its default configs",
            (f"searched: {tried}", "performance may be sub-optimal: the engine logs "
             "'Using default MoE config. Performance might be sub-optimal!'") + ((lookup.note,) if lookup.note else ()),
            tuple(tuned_fix)))
        if bad:
            branch = {b: defaults[b].branch for b in bad}
            findings.append(Finding(
                FATAL if fatal_info.fatal else WARNING, "default-config-exceeds-smem",
                f"{choice.engine}'s default config cannot launch on {gpu.name} at batch "
                f"{', '.join(map(str, bad))}",
                tuple(f"batch {b} ({branch[b]}; {defaults[b].version_range}): {v.config.label()}: {v.reason}"
                      for b, v in bad.items())
                + (f"{'fatal' if fatal_info.fatal else 'not fatal'}: {fatal_info.why}",
                   f"log line to expect: {fatal_info.log_line}", MODEL_CAVEAT),
                tuple(tuned_fix) + tuple(r.as_dict() for r in engine.remedies(
                    "triton-moe", arch=arch, version=req.engine_version, kinds=("backend",))),
                tuple(_item(b, v) for b, v in bad.items())))
    off_grid = [f"batch {b}: {v.config.label()}" for b, v in judged.items() if not in_grid(v.config, dtype)]
    if off_grid:
        findings.append(Finding(INFO, "extrapolated", f"{len(off_grid)} judged config(s) lie outside the "
                                f"grid the shared-memory model was calibrated on: their bytes are the "
                                f"model's formula, not a recorded compile", tuple(off_grid)))
    checked = {"family": "triton-moe", "dtype": dtype, "E": e_local, "N": n, "config_source": source,
               "configs": len(judged), "fit": sum(v.fits for v in judged.values()),
               "fail": sum(not v.fits for v in judged.values())}
    return findings, checked


def _item(batch: int, v: Any) -> dict[str, Any]:
    fp = v.footprint
    return {"batch": batch, "config": v.config.as_dict(), "status": v.status,
            "smem_bytes": fp.total if fp else None, "limit_bytes": v.limit, "reason": v.reason}
