"""Model presets (models.toml) and the one entry point `load_model(name_or_path)`.

Presets are stored as config.json fields and built by the same loader as user files, so a preset
cannot drift from what the loader would make of the real config.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

from tilefit._toml import load_package_toml
from tilefit.errors import unknown_name
from tilefit.models.loader import from_config, load_config_path, path_exists
from tilefit.models.types import MoEModel


@lru_cache(maxsize=1)
def _raw_presets() -> dict[str, dict[str, Any]]:
    return load_package_toml("tilefit.models", "models.toml")["model"]


def _preset_config(key: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    entry = _raw_presets()[key]
    if "base" in entry:
        cfg, _ = _preset_config(entry["base"])
    else:
        cfg = copy.deepcopy(entry["config"])
    quant = entry.get("quant")
    if quant and quant.get("quant_method") == "fp8":  # config.json style
        cfg["quantization_config"] = dict(quant)
        quant = None
    elif quant:  # hf_quant_config.json style: {"quantization": {...}}
        quant = {"quantization": {k: v for k, v in quant.items() if k != "quant_method"}}
    return cfg, quant


@lru_cache(maxsize=None)
def preset(key: str) -> MoEModel:
    cfg, quant = _preset_config(key)
    return from_config(cfg, name=key, source=f"preset {key} ({_raw_presets()[key]['hf']})", quant=quant)


def _index() -> dict[str, str]:
    idx = {}
    for key, entry in _raw_presets().items():
        idx[key] = key
        for alias in entry.get("aliases", ()):
            idx[alias] = key
    return idx


def all_presets() -> list[MoEModel]:
    return [preset(k) for k in _raw_presets()]


def preset_aliases(key: str) -> list[str]:
    return list(_raw_presets()[key].get("aliases", ()))


def load_model(name_or_path: str) -> MoEModel:
    """A preset by name or alias, a config.json file or a directory holding one, or a Hugging Face
    id (`zai-org/GLM-5`) from the local Hugging Face cache, else the preset of that id."""
    key, path = resolve(name_or_path)
    return preset(key) if key is not None else load_config_path(path)


def resolve(name_or_path: str) -> tuple[str | None, Path | None]:
    """Where `load_model` reads a model from: (preset key, None) for a preset, its alias or the
    Hugging Face id of one not in the local cache; (None, path) for a config.json file, a folder
    holding one or a cached Hugging Face snapshot. A UsageError naming the choices otherwise."""
    from tilefit.errors import UsageError
    from tilefit.models import hub

    idx = _index()
    key = name_or_path.strip().lower()
    if key in idx:
        return idx[key], None
    path = Path(name_or_path).expanduser()
    if path_exists(path):
        return None, path
    if hub.looks_like_repo_id(name_or_path.strip()):
        repo_id = name_or_path.strip()
        snap = hub.snapshot_dir(repo_id)
        if snap is not None:
            return None, snap
        by_id = _by_repo_id(repo_id)
        if by_id is not None:
            return by_id, None
        raise hub.not_cached(repo_id)
    if "/" in name_or_path or name_or_path.endswith(".json"):
        raise UsageError(f"no such file or directory: {name_or_path}; pass --model with a preset (see "
                         f"`tilefit models`), a config.json, or a Hugging Face id")
    raise unknown_name("model", name_or_path, idx, "tilefit models")


def _by_repo_id(repo_id: str) -> str | None:
    """The preset whose Hugging Face id is `repo_id` (or whose alias is its name), if any."""
    want = repo_id.lower()
    for key, entry in _raw_presets().items():
        if str(entry.get("hf", "")).lower() == want:
            return key
    return _index().get(want.rsplit("/", 1)[-1])
