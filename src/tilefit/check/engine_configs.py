"""Check of a family whose configs the engine picks itself (vLLM's and SGLang's Triton fused MoE):
the tuned config file the engine would load, or else its default config per batch size, and
SGLang's separately tuned gemm2 file (check/down_configs.py), judged by the family's shared-memory
model. A config that cannot launch raises OutOfResources at first use
and takes the server down."""

from __future__ import annotations

from typing import Any

from tilefit.check.down_configs import DownCheck, check_down_file
from tilefit.check.types import FATAL, INFO, WARNING, Checked, CheckRequest, Finding, Judged, fix
from tilefit.engines import BackendChoice, Engine
from tilefit.engines.triton_moe import installed_triton_version, nearest_batch, read_tuned_configs
from tilefit.hw.catalog import GPU
from tilefit.kernels.base import KernelFamily
from tilefit.layout.plan import LayerPlan

MODEL_CAVEAT = ("bytes are tilefit's Triton fused-MoE kernel compiled by the installed Triton's "
                "calibration, fp8 block scales applied as the engine applies them; the engine's own "
                "kernel differs in detail (epilogue buffers), so treat margins under ~4 KB as too "
                "close to call")


def check_engine_configs(req: CheckRequest, engine: Engine, family: KernelFamily, choice: BackendChoice,
                         gpu: GPU, plan: LayerPlan) -> tuple[list[Finding], Checked]:
    arch, dtype = gpu.arch, choice.family_dtype
    model = plan.model
    # As the engine runs fp8: weight scales per column (vLLM) or row (SGLang), and on sm90 the
    # narrow-row tiles swapped (more shared memory: kernels/triton_moe/smem.py).
    form = {"scales": engine.block_scales(req.engine_version),
            "swap_ab": engine.swap_ab_path(model.weight_dtype, arch, req.engine_version)}
    e_local, n = plan.local_experts, model.expert_width // plan.layout.tp
    fatal_info = engine.fatality(family.name)
    findings = [Finding(INFO, "backend", f"{choice.engine} runs {choice.engine_backend} "
                        f"({choice.family}, {dtype}) on {arch.name}", (choice.rule,))]
    lookup = engine.find_tuned_config(E=e_local, N=n, device_name=gpu.name, weight_dtype=model.weight_dtype,
                                      triton_version=installed_triton_version(), config_dir=req.config_dir,
                                      version=req.engine_version, environ=req.env)
    # The engine's own kernel is tuned where tilefit can build its inputs; with the shared expert
    # inside the fused MoE tilefit's kernel stands in (tune refuses --target there).
    how = f"--target tilefit --emit {choice.engine}" if plan.fused_shared else f"--target {choice.engine}"
    tune_cmd = f"tilefit tune --model {req.model} --tp {req.tp} --ep {req.ep} {how}"
    tuned_fix = (fix("tuned-config", tune_cmd, f"tune {lookup.file_name} on this GPU (every config it writes "
                     f"fits); where to write it and how to point {choice.engine} at it:"),
                 *engine.remedies(family.name, arch=arch, version=req.engine_version, kinds=("tuned-config",),
                                  name=lookup.file_name))
    if lookup.found is not None:
        version, configs = read_tuned_configs(lookup.found)
        judged = dict(zip(configs, family.judge(list(configs.values()), arch, dtype, **form).verdicts))
        bad = {b: v for b, v in judged.items() if not v.fits}
        source = f"tuned file {lookup.found}"
        if bad:
            findings.append(Finding(
                FATAL if fatal_info.fatal else WARNING, "tuned-config-exceeds-smem",
                f"{len(bad)} of {len(judged)} entries of {lookup.found.name} cannot launch on {arch.name}",
                tuple(f"batch {b}: {v.config.label()}: {v.reason}" for b, v in bad.items())
                + (fatal_info.why, MODEL_CAVEAT), tuned_fix,
                tuple(Judged(v, batch=b) for b, v in bad.items())))
        else:
            findings.append(Finding(INFO, "tuned-config", f"tuned config found: {lookup.found}",
                                    (f"all {len(judged)} entries fit {arch.smem_per_block_optin:,} B"
                                     + (f" (written for triton {version})" if version else ""),)))
    else:
        source = "engine defaults"
        defaults = engine.default_configs(req.batches, E=e_local, weight_dtype=model.weight_dtype,
                                          arch=arch, version=req.engine_version)
        verdicts = family.judge([d.as_moe_config() for d in defaults.values()], arch, dtype,
                                  **form).verdicts
        judged = dict(zip(defaults, verdicts))
        bad = {b: v for b, v in judged.items() if not v.fits}
        tried = "; ".join(str(p) for p in lookup.tried) or "no folder to search"
        findings.append(Finding(
            WARNING, "no-tuned-config",
            f"no tuned config {lookup.file_name}: {choice.engine} falls back to its default configs",
            (f"searched: {tried}", "performance may be sub-optimal: the engine logs "
             "'Using default MoE config. Performance might be sub-optimal!'") + ((lookup.note,) if lookup.note else ()),
            tuned_fix))
        if bad:
            findings.append(Finding(
                FATAL if fatal_info.fatal else WARNING, "default-config-exceeds-smem",
                f"{choice.engine}'s default config cannot launch on {gpu.name} at batch "
                f"{', '.join(map(str, bad))}",
                tuple(f"batch {b} ({defaults[b].branch}; {defaults[b].version_range}): {v.config.label()}: "
                      f"{v.reason}" for b, v in bad.items())
                + (f"{'fatal' if fatal_info.fatal else 'not fatal'}: {fatal_info.why}",
                   f"log line to expect: {fatal_info.log_line}", MODEL_CAVEAT),
                tuned_fix + tuple(engine.remedies(family.name, arch=arch, version=req.engine_version,
                                                  kinds=("backend",))),
                tuple(Judged(v, batch=b) for b, v in bad.items())))
    def up_at(batch: int) -> Any:
        if lookup.found is not None:
            return configs[nearest_batch(list(configs), batch)]
        return engine.default_configs([batch], E=e_local, weight_dtype=model.weight_dtype, arch=arch,
                                      version=req.engine_version)[batch].as_moe_config()

    down_found, down_judged = check_down_file(DownCheck(
        req, engine, family, gpu, plan, dtype, form, lookup.found, up_at,
        tuple(configs if lookup.found is not None else defaults), fatal_info, tuned_fix, MODEL_CAVEAT))
    findings += down_found
    source += " and its gemm2 (_down) file" if down_judged else ""
    every = [(f"batch {b}", v) for b, v in judged.items()] + [(f"gemm2 batch {b}", v)
                                                              for b, v in down_judged.items()]
    off_grid = [f"{at}: {v.config.label()}" for at, v in every if family.extrapolated(v.config, dtype)]
    if off_grid:
        findings.append(Finding(INFO, "extrapolated", f"{len(off_grid)} judged config(s) lie outside the "
                                f"grid the shared-memory model was calibrated on: their bytes are the "
                                f"model's formula, not a recorded compile", tuple(off_grid)))
    failing = sum(not v.fits for _at, v in every)
    checked = Checked(family.name, dtype, f"{len(every)} configs from {source} (E={e_local}, N={n})",
                      len(every), failing, (("E", e_local), ("N", n), ("config_source", source),
                                            ("configs", len(every)))
                      + ((("block_scales", form["scales"]),) if dtype == "fp8-block" else ())
                      + ((("swap_ab", True),) if form["swap_ab"] else ()))
    return findings, checked

