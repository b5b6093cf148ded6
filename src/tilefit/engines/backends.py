"""Backend resolution: which tilefit kernel family an engine runs for a weight dtype on an arch.

Rules are data (data/backends.toml, first match wins, each with its source and the engine
versions read); `--backend triton|flashinfer-cutlass` overrides them, checked against what the
engine's runner accepts on that arch.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from tilefit._toml import load_package_toml
from tilefit.engines.types import (
    OVERRIDES, BackendChoice, Source, VersionRange, check_arch, check_engine, check_weight_dtype,
    parse_version)
from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch

# The engine's own spelling of the two families, and the switch that selects each.
_SELECT = {
    ("sglang", "triton-moe"): ("triton", "--moe-runner-backend triton"),
    ("sglang", "flashinfer-cutlass"): ("flashinfer_cutlass",
                                       "--moe-runner-backend flashinfer_cutlass"),
    ("vllm", "triton-moe"): ("TRITON", "--moe-backend triton"),
    ("vllm", "flashinfer-cutlass"): ("FLASHINFER_CUTLASS", "--moe-backend flashinfer_cutlass"),
    ("trtllm", "flashinfer-cutlass"): ("CUTLASS",
                                       "moe_config: {backend: CUTLASS} in the LLM API options"),
}

# Where FlashInfer's CUTLASS MoE takes each weight dtype (vLLM's FlashInferExperts checks,
# which follow FlashInfer's own dispatch): unquantized and per-tensor fp8 on SM90+, block fp8
# on SM90 only, NVFP4 and MXFP4 (x MXFP8) on SM100+ (SM110 excluded by vLLM).
_FI_CUTLASS_ARCHS = {
    "bf16": ("sm90", "sm100", "sm103", "sm120", "sm121"),
    "fp16": ("sm90", "sm100", "sm103", "sm120", "sm121"),
    "fp8": ("sm90", "sm100", "sm103", "sm120", "sm121"),
    "fp8-block": ("sm90",),
    "nvfp4": ("sm100", "sm103", "sm120", "sm121"),
    "mxfp4": ("sm100", "sm103", "sm120", "sm121"),
}
_FP8_TENSOR_CORE_MIN_CC = (8, 9)


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, Source], tuple[dict[str, Any], ...]]:
    raw = load_package_toml("tilefit.engines", "backends.toml")
    sources = {k: Source(*v) for k, v in raw["sources"].items()}
    return sources, tuple(raw["rule"])


def _family_dtype(rule_dtype: str, weight_dtype: str) -> str:
    if rule_dtype != "same":
        return rule_dtype
    return "fp8" if weight_dtype.startswith("fp8") else weight_dtype


def _matches(rule: dict[str, Any], engine: str, dtype: str, arch: str, version: str | None,
             ep: int) -> bool:
    if rule["engine"] != engine:
        return False
    if "dtypes" in rule and dtype not in rule["dtypes"]:
        return False
    if "archs" in rule and arch not in rule["archs"]:
        return False
    if "ep_gt1" in rule and bool(rule["ep_gt1"]) != (ep > 1):
        return False
    low, high = rule.get("applies", ["", ""])
    return VersionRange(low, high).contains(version)


def resolve_backend(engine: str, weight_dtype: str, arch: Arch | str, *,
                    engine_version: str | None = None, override: str | None = None,
                    ep: int = 1) -> BackendChoice:
    """The kernel family `engine` runs for experts stored as `weight_dtype` on `arch`.

    `override` is the CLI's `--backend` (auto | triton | flashinfer-cutlass); `ep` the expert-
    parallel size (vLLM picks FlashInfer CUTLASS for block FP8 on Hopper only under EP).
    Paths tilefit does not model, and overrides the engine cannot run, are a UsageError saying
    what the engine supports there.
    """
    engine = check_engine(engine)
    dtype = check_weight_dtype(weight_dtype)
    a = check_arch(arch)
    if engine_version is not None:
        parse_version(engine_version)  # reject garbage early, with the usage message
    if ep < 1:
        raise UsageError(f"expert-parallel size must be >= 1, got {ep}")
    choice = (override or "auto").strip().lower()
    if choice not in OVERRIDES:
        raise UsageError(f"unknown --backend {override!r}; use one of {', '.join(OVERRIDES)}")
    if choice != "auto":
        return _forced(engine, dtype, a, choice, engine_version)
    sources, rules = _table()
    for rule in rules:
        if not _matches(rule, engine, dtype, a.name, engine_version, ep):
            continue
        src = tuple(sources[s] for s in rule["source"])
        if not rule["family"]:
            raise UsageError(f"{engine} + {dtype} on {a.name}: {rule['rule']}")
        caveats = list(rule.get("caveats", ()))
        caveats.append(f"rule read in {engine} {rule['verified']}")
        bs = rule.get("block_shape")
        return BackendChoice(
            engine=engine, weight_dtype=dtype, arch=a.name, family=rule["family"],
            family_dtype=_family_dtype(rule["family_dtype"], dtype),
            block_shape=(int(bs[0]), int(bs[1])) if bs else None,
            engine_backend=rule["engine_backend"], rule=rule["rule"], selector=rule["selector"],
            versions=VersionRange(*rule.get("applies", ["", ""])), sources=src,
            caveats=tuple(caveats))
    raise UsageError(f"{engine} + {dtype} on {a.name}: no rule known; pass --backend "
                     f"triton or --backend flashinfer-cutlass to check one path")


def _forced(engine: str, dtype: str, a: Arch, family_opt: str, version: str | None
            ) -> BackendChoice:
    """`--backend triton|flashinfer-cutlass`: the family the user asks for, if the engine can."""
    sources, _ = _table()
    family = "triton-moe" if family_opt == "triton" else "flashinfer-cutlass"
    caveats: list[str] = []
    if family == "triton-moe":
        if engine == "trtllm":
            raise UsageError("TensorRT-LLM has no vLLM-style Triton fused-MoE (its TRITON MoE "
                             "backend is the triton_kernels MXFP4 path); use --backend "
                             "flashinfer-cutlass or auto")
        if dtype in ("nvfp4", "mxfp4"):
            raise UsageError(f"the Triton fused-MoE kernel takes bf16, fp16 and fp8 weights, "
                             f"not {dtype}; use --backend flashinfer-cutlass or auto")
        if dtype.startswith("fp8") and a.cc < _FP8_TENSOR_CORE_MIN_CC:
            raise UsageError(f"{a.name} has no FP8 tensor cores; the Triton fp8 MoE path needs "
                             f"sm89 or newer")
        src = ("sgl_fp8_runner", "sgl_unquant_runner") if engine == "sglang" else (
            "vllm_fp8_oracle", "vllm_unq_oracle")
    else:
        allowed = _FI_CUTLASS_ARCHS[dtype]
        if a.name not in allowed:
            raise UsageError(f"FlashInfer's CUTLASS MoE takes {dtype} on {', '.join(allowed)} "
                             f"only, not {a.name}; use --backend auto or triton")
        if engine == "sglang" and dtype.startswith("fp8"):
            # sglang's Fp8MoEMethod has no flashinfer_cutlass path: it runs those layers on Triton.
            caveats.append("sglang runs FP8 experts on Triton even under --moe-runner-backend "
                           "flashinfer_cutlass (Fp8MoEMethod.create_moe_runner)")
            family = "triton-moe"
            if a.cc < _FP8_TENSOR_CORE_MIN_CC:
                raise UsageError(f"{a.name} has no FP8 tensor cores for the Triton fp8 MoE path")
        src = {"sglang": ("sgl_fp8_runner", "sgl_nvfp4_runner", "sgl_mxfp4"),
               "vllm": ("vllm_fi_cutlass",),
               "trtllm": ("trtllm_create_moe", "trtllm_moeconfig")}[engine]
    engine_backend, selector = _SELECT[(engine, family)]
    if engine == "sglang" and dtype == "mxfp4":
        engine_backend, selector = "flashinfer_mxfp4", "--moe-runner-backend flashinfer_mxfp4"
    fdtype = "mxfp8-mxfp4" if dtype == "mxfp4" else _family_dtype("same", dtype)
    return BackendChoice(
        engine=engine, weight_dtype=dtype, arch=a.name, family=family, family_dtype=fdtype,
        block_shape=(128, 128) if dtype == "fp8-block" else None,
        engine_backend=engine_backend,
        rule=f"--backend {family_opt}: {engine} runs {family} for {dtype} on {a.name} when told "
             f"to with {selector}",
        selector=selector, versions=VersionRange(), sources=tuple(sources[s] for s in src),
        caveats=tuple(caveats), overridden=True)
