"""What tilefit's data files and code say for each fact, per engine version: the other column of
the table. Read from the installed tilefit (its TOML data and the functions that read them)."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from tilefit._toml import load_package_toml
from tilefit.versions import parse_version

ABSENT = "absent"
RULES_DIR = Path(__import__("tilefit").__file__).parent / "diagnose" / "rules"


def _v(text: str) -> tuple[int, int, int]:
    return parse_version(text)


def _in(version: str, bounds: list[str] | tuple[str, str]) -> bool:
    low, high = (list(bounds) + ["", ""])[:2]
    v = _v(version)
    return (not low or v >= _v(low)) and (not high or v < _v(high))


@lru_cache(maxsize=None)
def _toml(name: str) -> dict[str, Any]:
    return load_package_toml("tilefit.engines", name)


def backend(engine: str, dtype: str, arch: str, version: str, env: dict[str, str] | None = None,
            ep: int = 1, flags: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The first of the engine's backend rules (engines/data/*.toml, as engines/table.py loads
    them) that matches, as the engines' resolver reads it."""
    from tilefit.engines.table import facts

    env, flags = env or {}, flags or {}
    for rule in facts(engine).rules:
        if dtype not in rule.get("dtypes", [dtype]):
            continue
        if arch not in rule.get("archs", [arch]) or not _in(version, rule.get("applies", ["", ""])):
            continue
        if "ep_gt1" in rule and bool(rule["ep_gt1"]) != (ep > 1):
            continue
        if any(env.get(k) != val for k, val in rule.get("env", {}).items()):
            continue
        if any(flags.get(k) != val for k, val in rule.get("flags", {}).items()):
            continue
        # `need_flags` (sglang's DeepEP-class all-to-all rows): flags that must be set to a listed value.
        if any(flags.get(k) not in allowed for k, allowed in rule.get("need_flags", {}).items()):
            continue
        return rule
    return None


def _remedy(engine: str, setting_prefix: str, version: str) -> str:
    for row in _toml("remedies.toml")["remedy"]:
        if row["engine"] == engine and row["setting"].startswith(setting_prefix) \
                and _in(version, row["versions"]):
            return "present"
    return ABSENT


@lru_cache(maxsize=1)
def _markers() -> tuple[str, ...]:
    """The literal markers of tilefit's diagnose rules (the text a line must contain)."""
    out = []
    for p in sorted(RULES_DIR.glob("*.py")):
        out += re.findall(r'Rule\(\s*"[^"]+",\s*\w+,\s*\w+,\s*\w+,\s*"([^"]+)"', p.read_text())
    return tuple(out)


def recognised(line: str) -> str:
    """The line as the wheel prints it, if a diagnose rule recognises it; else 'not recognised'."""
    if line == ABSENT:
        return ABSENT
    sample = line.replace("{role}", "target")
    return line if any(m in sample for m in _markers()) else "not recognised"


# ------------------------------------------------------------------------------------- sglang
def sglang_nvfp4(version: str) -> str:
    rule = backend("sglang", "nvfp4", "sm120", version, flags={"quantization": "modelopt_fp4"})
    bare = backend("sglang", "nvfp4", "sm120", version)
    if rule is None or "auto resolves" not in rule.get("selector", ""):
        return ABSENT
    if rule.get("flags", {}).get("quantization") == "modelopt_fp4" and bare is not rule:
        return "flashinfer_cutlass when --quantization modelopt_fp4 is given"
    return "flashinfer_cutlass for any NVFP4 checkpoint"


def sglang_finalize(version: str) -> str:
    from tilefit.engines import get_engine
    state = get_engine("sglang").fused_finalize(version=version, environ={})
    if "no fused-finalize switch" in state.why:
        return "no switch (FlashInfer default: on)"
    return "on" if state.enabled else "off"


def sglang_config_root(version: str) -> str:
    from tilefit.engines import sglang
    for rel, since in sglang.PKG_ROOTS:
        if not since or _v(version) >= _v(since):
            return "/".join(rel[3:]) if rel[-1] == "triton_utils" else rel[-1]
    return ABSENT


def sglang_fallback(version: str) -> str:
    from tilefit.engines import sglang
    if _v(version) < _v(sglang.LISTS_FOLDERS_SINCE):
        return "fixed list " + ",".join(sglang.OLD_FALLBACK)
    return "triton_* folders on disk, newest first"


def sglang_config_env(version: str) -> str:
    rows = [r for r in _toml("remedies.toml")["remedy"]
            if r["engine"] == "sglang" and r["setting"].startswith("SGLANG_MOE_CONFIG_DIR")]
    return "replaces the package folder" if rows and "replaces its shipped folder" in rows[0]["text"] \
        else ABSENT


def sglang_config_layout(version: str) -> str:
    """The folder tilefit's SGLang writer puts a file in, below the folder it is given."""
    import tempfile

    from tilefit.engines import get_engine
    from tilefit.engines.triton_moe import CONFIG_KEYS
    with tempfile.TemporaryDirectory() as d:
        (path,) = get_engine("sglang").write_tuned_configs(
            d, E=8, N=64, device_name="GPU", weight_dtype="bf16", gemm1={1: dict.fromkeys(CONFIG_KEYS, 1)},
            gemm2=None, triton_version="1.2.3")
        rel = path.parent.relative_to(d).as_posix()
    return "<dir>/" + rel.replace("triton_1_2_3", "triton_X_Y_Z") + "/"


def pinned(engine: str) -> Callable[[str], str]:
    def says(version: str) -> str:
        from tilefit.engines.pins import flashinfer_pin
        return flashinfer_pin(engine, version) or ABSENT
    return says


# --------------------------------------------------------------------------------------- vllm
def _vllm_path(dtype: str, env_var: str, with_ep: bool) -> Callable[[str], str]:
    def says(version: str) -> str:
        plain = backend("vllm", dtype, "sm120", version)
        forced = backend("vllm", dtype, "sm120", version, env={env_var: "1"}, ep=8 if with_ep else 1)
        name = (plain or {}).get("engine_backend", ABSENT)
        if name == "FLASHINFER_CUTLASS":
            dp = any("dp > 1" in c for c in (plain or {}).get("caveats", []))
            return name + (" (TRITON with dp > 1)" if dp else "")
        if forced is not plain and (forced or {}).get("engine_backend") == "FLASHINFER_CUTLASS":
            return f"{name} unless {env_var}=1" + (" with EP" if with_ep else "")
        return name
    return says


def vllm_finalize(version: str) -> str:
    from tilefit.engines import get_engine
    # vLLM has FlashInfer's CUTLASS MoE at this version only if some rule can select it.
    paths = [backend("vllm", d, "sm120", version, env={e: "1"}, ep=8)
             for d, e in (("bf16", "VLLM_USE_FLASHINFER_MOE_FP16"), ("nvfp4", "VLLM_USE_FLASHINFER_MOE_FP4"))]
    if not any((r or {}).get("engine_backend") == "FLASHINFER_CUTLASS" for r in paths):
        return ABSENT
    state = get_engine("vllm").fused_finalize(version=version)
    return "not passed (FlashInfer default: on)" if "passes no use_fused_finalize" in state.why \
        else "passed"


def vllm_version_key(version: str) -> str:
    from tilefit.engines.vllm import VERSION_KEY_POPPED_SINCE
    return "popped" if _v(version) >= _v(VERSION_KEY_POPPED_SINCE) else \
        "int() like a batch key (a file carrying it fails)"


def vllm_default_warning(version: str) -> str:
    # check/ quotes the warning wherever it reports a missing tuned file (the module has moved once).
    src = "".join(p.read_text() for p in (RULES_DIR.parent.parent / "check").glob("*.py"))
    return "present" if "Using default MoE config. Performance might be sub-optimal!" in src else ABSENT


# ---------------------------------------------------------------------------------- flashinfer
def fi_blocklist(version: str) -> str:
    from tilefit.kernels.flashinfer_cutlass import BLOCKLIST_SINCE
    return "read" if _v(version) >= _v(BLOCKLIST_SINCE) else ABSENT


def fi_switch(version: str) -> str:
    from tilefit.kernels.flashinfer_cutlass import catalog
    on = catalog.tactics("sm120", "nvfp4", version, "gemm2")
    off = catalog.tactics("sm120", "nvfp4", version, "gemm2", fused_finalize=False)
    if on != off and not any(t.fusion == "finalize" for t in off):
        return "yes (off: FINALIZE copies left out)"
    return "no switch (FINALIZE copies always listed)"


def fi_finalize_archs(version: str) -> str:
    from tilefit.kernels.flashinfer_cutlass import catalog
    tl = catalog.find_list("sm120", "nvfp4", version)
    return "SM90 and later" if tl.finalize else "SM90 only"


def fi_order(version: str) -> str:
    from tilefit.kernels.flashinfer_cutlass import catalog
    parts = ["base"]
    for t in catalog.tactics("sm120", "nvfp4", version, "gemm2"):
        name = "swap-AB copies" if t.swap_ab else ("FINALIZE copies" if t.fusion == "finalize" else "")
        if name and name not in parts:
            parts.append(name)
    return ", ".join(parts)


def block_fp8_tiles(engine: str) -> Callable[[str], str]:
    """What Engine.runs_as_tuned says of BN 32/64 + BK 64 and of BK 256 under 128x128 scales."""
    def says(version: str) -> str:
        from tilefit.engines import get_engine
        from tilefit.kernels.triton_moe.config import MoEConfig

        e = get_engine(engine)
        small = [e.runs_as_tuned(MoEConfig(16, bn, bk, 1, 4, 3).as_dict(), "fp8-block")
                 for bn, bk in ((32, 128), (64, 64))]
        wide = e.runs_as_tuned(MoEConfig(16, 64, 256, 1, 4, 3).as_dict(), "fp8-block") or ""
        how = ("runs as 128" if "as 128" in wide else
               "one scale per step (wrong)" if "wrong results" in wide else "as tuned")
        first = "as tuned" if small == [None, None] else "not as tuned"
        return f"BLOCK_SIZE_N 32/64, BLOCK_SIZE_K 64: {first}; BLOCK_SIZE_K 256: {how}"
    return says


def swap_ab(engine: str) -> Callable[[str], str]:
    """Engine.swaps_ab's condition at `version`, probed at its edges on sm90 and sm120."""
    def says(version: str) -> str:
        from tilefit.engines import get_engine
        from tilefit.kernels.triton_moe.config import MoEConfig

        e = get_engine(engine)
        if e.swap_ab_since is None or _v(version) < _v(e.swap_ab_since):
            return ABSENT
        probe = {(bm, bn, arch): e.swaps_ab(MoEConfig(bm, bn, 128, 1, 4, 3).as_dict(), "fp8-block", arch)
                 for bm in (32, 64) for bn in (32, 64) for arch in ("sm90", "sm120")}
        if [k for k, on in probe.items() if on] == [(32, 64, "sm90")]:
            return "sm90, BLOCK_SIZE_M < 64, BLOCK_SIZE_N >= 64"
        return "other: " + ", ".join(f"{k}" for k, on in probe.items() if on)
    return says


SAYS: dict[str, Callable[[str], str]] = {
    "sglang: NVFP4 MoE on SM120, --moe-runner-backend auto": sglang_nvfp4,
    "sglang: fused-finalize switch default": sglang_finalize,
    "sglang: tuned-config package folder": sglang_config_root,
    "sglang: Triton-version folder fallback": sglang_fallback,
    "sglang: SGLANG_MOE_CONFIG_DIR read": sglang_config_env,
    "sglang: tuned-file folder under the config dir": sglang_config_layout,
    "sglang: --disable-flashinfer-autotune": lambda v: _remedy("sglang", "--disable-flashinfer-autotune", v),
    "sglang: pinned flashinfer-python": pinned("sglang"),
    "vllm: pinned flashinfer-python": pinned("vllm"),
    "vllm: bf16 MoE on SM120, auto": _vllm_path("bf16", "VLLM_USE_FLASHINFER_MOE_FP16", True),
    "vllm: NVFP4 MoE on SM120, auto": _vllm_path("nvfp4", "VLLM_USE_FLASHINFER_MOE_FP4", False),
    "vllm: VLLM_TUNED_CONFIG_FOLDER": lambda v: _remedy("vllm", "VLLM_TUNED_CONFIG_FOLDER", v),
    "vllm: VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS": lambda v: _remedy("vllm", "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS", v),
    "vllm: --moe-backend": lambda v: _remedy("vllm", "--moe-backend", v),
    "vllm: fused finalize passed to FlashInfer": vllm_finalize,
    "vllm: default-config warning": vllm_default_warning,
    "vllm: triton_version key of a tuned file": vllm_version_key,
    "vllm: block-fp8 tiles of the Triton fused-MoE kernel": block_fp8_tiles("vllm"),
    "sglang: block-fp8 tiles of the Triton fused-MoE kernel": block_fp8_tiles("sglang"),
    "vllm: fp8 swap-AB path of the Triton fused-MoE kernel": swap_ab("vllm"),
    "sglang: fp8 swap-AB path of the Triton fused-MoE kernel": swap_ab("sglang"),
    "flashinfer: FLASHINFER_TACTICS_BLOCKLIST": fi_blocklist,
    "flashinfer: gemm2 list follows use_fused_finalize": fi_switch,
    "flashinfer: FINALIZE tactics on": fi_finalize_archs,
    "flashinfer: gemm2 list order": fi_order,
}
# Log lines: tilefit "says" a line when its diagnose rules recognise the text the wheel prints.
LOG_LINES = ("sglang: ready line", "sglang: init progress line",
             "sglang: decode CUDA-graph capture line", "flashinfer: 'Skipped N unsupported tactic(s)' line")
