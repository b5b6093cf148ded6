"""Where vLLM and SGLang look for a tuned fused-MoE config file, and whether one is there.

Names come from tilefit.tune.config_files (the same code that writes them). Roots, in the
engine's order: vLLM tries $VLLM_TUNED_CONFIG_FOLDER/<name>, then <vllm>/model_executor/layers/
fused_moe/configs/<name>. SGLang uses $SGLANG_MOE_CONFIG_DIR (replacing its package folder) and
reads <root>/configs/triton_X_Y_Z/<name>, falling back to other triton_* folders. The installed
engine is located with importlib.util.find_spec, never imported.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from tilefit.engines.types import (
    ConfigLookup, Source, check_engine, engine_dtype, parse_version)
from tilefit.errors import UsageError
from tilefit.tune.config_files import sglang_config_name, sglang_version_dir, vllm_config_name

VLLM_ENV = "VLLM_TUNED_CONFIG_FOLDER"
SGLANG_ENV = "SGLANG_MOE_CONFIG_DIR"
# Package-relative folders that hold the shipped files.
VLLM_PKG_CONFIGS = ("model_executor", "layers", "fused_moe", "configs")
SGLANG_PKG_ROOTS = (("srt", "layers", "moe", "moe_runner", "triton_utils"),  # >= 0.5.15
                    ("srt", "layers", "moe", "fused_moe_triton"))             # 0.5.10 and older
# SGLang < 0.5.15 falls back through this fixed list (newest first); later versions list the
# triton_* folders on disk, newest first.
SGLANG_OLD_FALLBACK = ("3.4.0", "3.3.1", "3.2.0", "3.1.0")

SOURCES = {
    "vllm": Source("vllm-project/vllm", "vllm/model_executor/layers/fused_moe/fused_moe.py "
                   "(get_config_file_name, get_moe_configs)", "0.11.0, 0.16.0, 0.33.0 wheels"),
    "sglang": Source("sgl-project/sglang", "python/sglang/srt/layers/moe/moe_runner/triton_utils/"
                     "fused_moe_triton_config.py (get_config_file_name, get_moe_configs)",
                     "0.5.15-0.5.23 wheels; fused_moe_triton/ in 0.5.10"),
}


def engine_package_dir(engine: str) -> Path | None:
    """The installed engine's package folder, found without importing it; None if absent."""
    name = {"vllm": "vllm", "sglang": "sglang"}.get(check_engine(engine))
    if name is None:
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or spec.origin in ("namespace", "built-in"):
        locs = list(spec.submodule_search_locations or []) if spec else []
        return Path(locs[0]) if locs else None
    return Path(spec.origin).parent


def installed_triton_version() -> str | None:
    """The Triton version pip recorded, read from metadata (Triton is not imported)."""
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def find_tuned_config(engine: str, *, E: int, N: int, device_name: str, weight_dtype: str,
                      triton_version: str | None = None,
                      config_dir: str | os.PathLike[str] | None = None,
                      environ: Mapping[str, str] | None = None, engine_version: str | None = None,
                      down: bool = False) -> ConfigLookup:
    """The tuned config file the engine would load for (E, N, device, dtype), or None.

    N is the per-rank expert width I/tp. `config_dir` is a folder the user will point the engine
    at (vLLM: the VLLM_TUNED_CONFIG_FOLDER itself; SGLang: the SGLANG_MOE_CONFIG_DIR, i.e. the
    folder holding configs/triton_X_Y_Z/, or tilefit tune's output holding triton_X_Y_Z/);
    it is searched first. `environ` defaults to this process's environment.
    """
    engine = check_engine(engine)
    if engine == "trtllm":
        raise UsageError("TensorRT-LLM has no tuned Triton fused-MoE config files; its CUTLASS "
                         "MoE picks tactics with its autotuner")
    if E < 1 or N < 1:
        raise UsageError(f"E and N must be >= 1, got E={E}, N={N}")
    env = os.environ if environ is None else environ
    dtype, block = engine_dtype(weight_dtype)
    user = Path(config_dir).expanduser() if config_dir is not None else None
    if user is not None and not user.is_dir():
        raise UsageError(f"--config-dir {str(user)!r} is not a folder")
    if engine == "vllm":
        return _vllm(E, N, device_name, dtype, block, user, env)
    return _sglang(E, N, device_name, dtype, block, user, env, triton_version, engine_version, down)


def _vllm(E, N, device_name, dtype, block, user, env) -> ConfigLookup:
    name = vllm_config_name(E, N, device_name, dtype, block)
    roots: list[Path] = []
    if user is not None:
        roots.append(user)
    if env.get(VLLM_ENV):
        roots.append(Path(env[VLLM_ENV]))
    pkg = engine_package_dir("vllm")
    if pkg is not None:
        roots.append(pkg.joinpath(*VLLM_PKG_CONFIGS))
    tried = tuple(r / name for r in roots)
    found = next((p for p in tried if p.is_file()), None)
    note = "" if pkg is not None else \
        "vllm is not installed here: its shipped configs were not searched"
    return ConfigLookup("vllm", name, found, tried, note)


def _sglang(E, N, device_name, dtype, block, user, env, triton_version, engine_version,
            down) -> ConfigLookup:
    version = triton_version or installed_triton_version()
    if not version:
        raise UsageError("SGLang keeps configs per Triton version: pass the Triton version the "
                         "server runs (e.g. --triton-version 3.4.0)")
    parse_version(version)
    name = sglang_config_name(E, N, device_name, dtype, block, down=down)
    roots: list[Path] = []
    if user is not None:
        roots += [user / "configs", user]  # an SGLANG_MOE_CONFIG_DIR, or tune's output folder
    notes: list[str] = []
    if env.get(SGLANG_ENV):
        roots.append(Path(env[SGLANG_ENV]) / "configs")
        notes.append(f"{SGLANG_ENV} is set: SGLang will not read its shipped configs")
    else:
        pkg = engine_package_dir("sglang")
        if pkg is None:
            notes.append("sglang is not installed here: its shipped configs were not searched")
        for rel in SGLANG_PKG_ROOTS if pkg is not None else ():
            if pkg.joinpath(*rel, "configs").is_dir():
                roots.append(pkg.joinpath(*rel, "configs"))
                break
    old = engine_version is not None and parse_version(engine_version) < (0, 5, 15)
    tried: list[Path] = []
    for root in roots:
        for vdir in _version_dirs(root, version, old):
            tried.append(root / vdir / name)
    found = next((p for p in tried if p.is_file()), None)
    if found is not None and sglang_version_dir(version) not in found.parts:
        notes.append(f"found only for another Triton version ({found.parent.name}): SGLang uses "
                     f"it with a 'Fallback to triton version' warning")
    if found is None and down:
        up = _sglang(E, N, device_name, dtype, block, user, env, version, engine_version, False)
        if up.found is not None:
            notes.append("no _down file: SGLang 0.5.23 reuses the gemm1 (up) config for gemm2")
        return ConfigLookup("sglang", name, up.found, tuple(tried) + up.tried, "; ".join(notes))
    return ConfigLookup("sglang", name, found, tuple(tried), "; ".join(notes))


def _version_dirs(root: Path, version: str, old: bool) -> list[str]:
    """triton_X_Y_Z folders in SGLang's search order: the running version, then the fallbacks."""
    first = sglang_version_dir(version)
    if old:
        rest = [sglang_version_dir(v) for v in SGLANG_OLD_FALLBACK]
    else:
        found = [d.name for d in root.iterdir() if d.is_dir() and d.name.startswith("triton_")
                 and all(p.isdigit() for p in d.name[len("triton_"):].split("_"))] \
            if root.is_dir() else []
        rest = sorted(found, key=lambda n: tuple(int(p) for p in n[len("triton_"):].split("_")),
                      reverse=True)
    return [first] + [d for d in rest if d != first]
