"""Fatality and remedies: what an engine does when a config/tactic cannot launch, and the fixes.

Both are data (data/remedies.toml) with sources and the engine versions read. Remedy texts carry
{dir}, {name} and {file} placeholders that the caller fills (or that stay as <dir> etc.).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from tilefit._toml import load_package_toml
from tilefit.engines.types import (
    FAMILIES, NEWEST, Fatality, FinalizeState, Remedy, Source, VersionRange, check_arch,
    check_engine, parse_version)
from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch

REMEDY_KINDS: tuple[str, ...] = ("tuned-config", "blocklist", "finalize", "backend", "warning")
# The CUDA-graph corruption reports (FlashInfer #4841) are for SM120-class parts only.
_WARNING_ARCHS = ("sm120", "sm121")


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, Source], tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    raw = load_package_toml("tilefit.engines", "remedies.toml")
    sources = {k: Source(*v) for k, v in raw["sources"].items()}
    return sources, tuple(raw["fatality"]), tuple(raw["remedy"])


def _family(family: str) -> str:
    f = str(family).strip().lower()
    if f not in FAMILIES:
        raise UsageError(f"unknown kernel family {family!r}; use one of {', '.join(FAMILIES)}")
    return f


def fatality(engine: str, family: str) -> Fatality:
    """Whether a config/tactic of `family` that cannot launch kills `engine` at warmup."""
    engine, family = check_engine(engine), _family(family)
    sources, rows, _ = _table()
    for row in rows:
        if row["engine"] == engine and row["family"] == family:
            return Fatality(engine, family, bool(row["fatal"]), row["why"], row["log_line"],
                            tuple(sources[s] for s in row["source"]))
    raise UsageError(f"{engine} does not run the {family} family (see tilefit's backend rules)")


def remedies(engine: str, family: str, *, arch: Arch | str | None = None,
             engine_version: str | None = None, kinds: tuple[str, ...] | None = None,
             dir: str | None = None, name: str | None = None, file: str | None = None
             ) -> list[Remedy]:
    """The fixes `engine` offers for `family`, in the engine's terms, for this version.

    Warnings (kind 'warning') are returned only for the archs they were reported on (SM120/121)
    or when `arch` is None. Placeholders are filled from dir/name/file.
    """
    engine, family = check_engine(engine), _family(family)
    if engine_version is not None:
        parse_version(engine_version)
    if kinds is not None:
        bad = [k for k in kinds if k not in REMEDY_KINDS]
        if bad:
            raise UsageError(f"unknown remedy kind {bad[0]!r}; use {', '.join(REMEDY_KINDS)}")
    arch_name = None if arch is None else check_arch(arch).name
    sources, _, rows = _table()
    fill = {"dir": dir or "<dir>", "name": name or "<config file>", "file": file or "<file.json>"}
    out = []
    for row in rows:
        if row["engine"] != engine or row["family"] != family:
            continue
        if kinds is not None and row["kind"] not in kinds:
            continue
        if row["kind"] == "warning" and arch_name is not None and arch_name not in _WARNING_ARCHS:
            continue
        versions = VersionRange(*row["versions"])
        if not versions.contains(engine_version):
            continue
        text = _fill(row["text"], fill)
        if engine_version is None and (versions.low or versions.high):
            # Version unknown: every range's fix applies to someone; say which is whose.
            text = f"{engine} {versions}: {text}"
        out.append(Remedy(engine=engine, kind=row["kind"],
                          setting=_fill(row["setting"], fill), text=text,
                          versions=versions, sources=tuple(sources[s] for s in row["source"])))
    return out


def _fill(text: str, values: dict[str, str]) -> str:
    # Plain replacement: remedy texts contain JSON braces that str.format would choke on.
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


SGLANG_FF_ENV = "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"
_TRUE = ("1", "true", "yes", "on")


def fused_finalize(engine: str, *, engine_version: str | None = None,
                   environ: dict[str, str] | None = None,
                   trtllm_disable_finalize_fusion: bool = False) -> FinalizeState:
    """Whether gemm2's FINALIZE tactics are in play: FlashInfer defaults use_fused_finalize to
    True; sglang passes its env switch (absent before 0.5.18, default on 0.5.18-0.5.20, off from
    0.5.21); vLLM passes nothing; TensorRT-LLM has MoeConfig.disable_finalize_fusion.
    `engine_version` None means the newest version read (sglang 0.5.23)."""
    engine = check_engine(engine)
    sources, _, _ = _table()
    env = environ or {}
    if engine == "vllm":
        return FinalizeState("vllm", True, "vLLM passes no use_fused_finalize: FlashInfer's "
                             "default (fused finalize on) applies",
                             (sources["vllm_no_ff"], sources["fi_fused_finalize"]))
    if engine == "trtllm":
        on = not trtllm_disable_finalize_fusion
        return FinalizeState("trtllm", on, "MoeConfig.disable_finalize_fusion is "
                             f"{str(not on).lower()}", (sources["trtllm_moeconfig"],))
    v = parse_version(engine_version or NEWEST["sglang"])
    src = (sources["sgl_ff_env"], sources["fi_fused_finalize"])
    if v < (0, 5, 18):
        return FinalizeState("sglang", True, "this sglang has no fused-finalize switch; "
                             "FlashInfer's default (on) applies", src)
    default = v < (0, 5, 21)
    if SGLANG_FF_ENV in env:
        on = env[SGLANG_FF_ENV].strip().lower() in _TRUE
        return FinalizeState("sglang", on, f"{SGLANG_FF_ENV}={env[SGLANG_FF_ENV]}", src)
    return FinalizeState("sglang", default, f"{SGLANG_FF_ENV} unset: default "
                         f"{'1' if default else '0'} in this sglang version", src)
