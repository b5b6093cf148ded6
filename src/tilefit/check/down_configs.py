"""SGLang's separately tuned gemm2 file (`..._down.json`), judged as SGLang runs it.

SGLang picks gemm1's entry and the `_down` entry each by the batch key nearest the running batch
(fused_moe_triton_config.py try_get_optimal_moe_config, 0.5.4.post2-0.5.23); both GEMMs share one
alignment, so the `_down` entry must have gemm1's BLOCK_SIZE_M: releases before 0.5.13 assert it
(an AssertionError at the first batch that pairs two that differ), later ones run gemm1's
BLOCK_SIZE_M with the rest of the `_down` entry (Engine.down_block_m_mismatch names the boundary).
Every pair a batch can select is found from the two files' keys and the midpoints between them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tilefit.check.types import FATAL, INFO, WARNING, CheckRequest, Finding, Judged
from tilefit.engines import Engine
from tilefit.engines.triton_moe import installed_triton_version, nearest_batch, read_tuned_configs
from tilefit.hw.catalog import GPU
from tilefit.kernels.base import KernelFamily
from tilefit.layout.plan import LayerPlan


@dataclass(frozen=True)
class DownCheck:
    """What judging the `_down` file needs from the check of gemm1's configs."""

    req: CheckRequest
    engine: Engine
    family: KernelFamily
    gpu: GPU
    plan: LayerPlan
    dtype: str  # the family's dtype, as gemm1's configs are judged
    form: dict[str, Any]  # the family's options (fp8 scales, swap-AB) as the engine runs them
    up_file: Any  # gemm1's tuned file (None: the engine's defaults)
    up_at: Callable[[int], Any]  # gemm1's config the engine takes at a batch
    up_keys: tuple[int, ...]  # gemm1's batch keys (the defaults': the batches checked)
    fatal: Any  # Engine.fatality of the family
    fixes: tuple[Any, ...]
    caveat: str


def check_down_file(c: DownCheck) -> tuple[list[Finding], dict[int, Any]]:
    """({findings}, {_down batch key: verdict}); nothing when the engine reads no `_down` file here."""
    engine, req, model = c.engine, c.req, c.plan.model
    if not engine.reads_down_files(req.engine_version):
        return [], {}
    down = engine.find_tuned_config(E=c.plan.local_experts, N=model.expert_width // c.plan.layout.tp,
                                    device_name=c.gpu.name, weight_dtype=model.weight_dtype,
                                    triton_version=installed_triton_version(), config_dir=req.config_dir,
                                    version=req.engine_version, environ=req.env, down=True)
    if down.found is None or down.found == c.up_file:
        return [], {}
    _version, entries = read_tuned_configs(down.found)
    pairs = _pairs(c.up_keys, tuple(entries))
    differ = {(u, d): c.up_at(u) for u, d in pairs if entries[d].block_m != c.up_at(u).block_m}
    name = down.found.name
    findings = _block_m_findings(c, name, entries, differ, len(entries))
    overrides = req.engine_version is None or engine.down_block_m_mismatch(req.engine_version) == "override"
    # What runs for each _down entry: as written, or (overridden) with each gemm1 BLOCK_SIZE_M it meets.
    runs = [(d, entries[d]) for d in entries]
    if overrides:
        runs += [(d, replace(entries[d], block_m=up.block_m)) for (_u, d), up in differ.items()]
    judged = c.family.judge([cfg for _d, cfg in runs], c.gpu.arch, c.dtype, **c.form).verdicts
    verdicts: dict[int, Any] = {}
    for (d, _cfg), v in zip(runs, judged):  # per entry: a variant that cannot launch, else as written
        if d not in verdicts or (verdicts[d].fits and not v.fits):
            verdicts[d] = v
    bad = {b: v for b, v in verdicts.items() if not v.fits}
    if bad:
        findings.append(Finding(
            FATAL if c.fatal.fatal else WARNING, "down-config-exceeds-smem",
            f"{len(bad)} of {len(verdicts)} entries of {name} (gemm2) cannot launch on {c.gpu.arch.name}",
            tuple(f"batch {b}: {v.config.label()}: {v.reason}" for b, v in bad.items())
            + (c.fatal.why, c.caveat), c.fixes, tuple(Judged(v, batch=b) for b, v in bad.items())))
    else:
        findings.append(Finding(INFO, "down-config", f"gemm2 tuned config found: {down.found}",
                                (f"all {len(verdicts)} entries fit {c.gpu.arch.smem_per_block_optin:,} B",)))
    return findings, verdicts


def _pairs(up_keys: tuple[int, ...], down_keys: tuple[int, ...]) -> set[tuple[int, int]]:
    """Every (gemm1 key, _down key) the engine's two nearest-key lookups select together for some
    batch: each selection changes only at a key or at a midpoint between two keys."""
    keys = sorted(set(up_keys) | set(down_keys))
    probes = set(keys)
    for ks in (sorted(up_keys), sorted(down_keys)):
        for a, b in zip(ks, ks[1:]):
            probes |= {(a + b) // 2, (a + b + 1) // 2}
    return {(nearest_batch(list(up_keys), m), nearest_batch(list(down_keys), m)) for m in probes if m > 0}


def _block_m_findings(c: DownCheck, name: str, entries: dict[int, Any], differ: dict, total: int) -> list[Finding]:
    if not differ:
        return []
    engine, version = c.engine, c.req.engine_version
    head = (f"{len({d for _u, d in differ})} of {total} entries of {name} meet a gemm1 config with "
            f"another BLOCK_SIZE_M at some batch")
    items = tuple(f"batch {d} (gemm1 key {u}): gemm2 {entries[d].label()}, gemm1 {up.label()}"
                  for (u, d), up in sorted(differ.items()))
    since = engine.down_block_m_override_since
    if version is None:
        return [Finding(WARNING, "down-config-block-m", f"{head}: {engine.title} releases before {since} "
                        f"assert they are equal, later ones run gemm1's (pass --engine-version to decide)",
                        items + ("judged as the newer releases run them; under the older ones the first "
                                 "such batch ends the server with an AssertionError",), c.fixes)]
    if engine.down_block_m_mismatch(version) == "assert":
        return [Finding(FATAL, "down-config-block-m", f"{head}: {engine.title} {version} asserts they are equal",
                        items + ("the first batch that selects such a pair ends the server with an "
                                 "AssertionError (try_get_optimal_moe_config)",), c.fixes)]
    return [Finding(INFO, "down-config-block-m", f"{head}: {engine.title} {version} runs them with gemm1's, "
                    f"judged so", items)]
