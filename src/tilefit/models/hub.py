"""Models by Hugging Face id, read from the local Hugging Face cache; tilefit never downloads.

The cache (huggingface_hub's layout) is $HF_HUB_CACHE, else $HF_HOME/hub, else
~/.cache/huggingface/hub; a repo `org/name` lives in models--org--name/, refs/main names the
snapshot revision, snapshots/<rev>/ holds config.json (and hf_quant_config.json for NVIDIA's
quantized checkpoints). The two small files are all tilefit needs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from tilefit.errors import UsageError

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")


def looks_like_repo_id(text: str) -> bool:
    """'zai-org/GLM-5' yes; './models/x', '/models/x', 'a/b/c', 'config.json' no."""
    return bool(_REPO_ID.match(text)) and not text.startswith(".") and not text.endswith(".json")


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    home = Path(env["HF_HOME"]).expanduser() if env.get("HF_HOME") else Path("~/.cache/huggingface").expanduser()
    return home / "hub"


def snapshot_dir(repo_id: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The cached snapshot folder of `repo_id` that holds config.json (refs/main's revision,
    else the only snapshot), or None when the repo or its config.json is not cached."""
    repo = cache_dir(environ) / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        rev = ref.read_text(encoding="utf-8").strip()
        candidate = snapshots / rev
        return candidate if (candidate / "config.json").is_file() else None
    found = [d for d in snapshots.iterdir() if (d / "config.json").is_file()]
    if len(found) > 1:
        raise UsageError(f"{repo_id} has {len(found)} cached snapshots and no refs/main to choose one: "
                         f"pass --model {found[0]} (a snapshot folder)")
    return found[0] if found else None


def not_cached(repo_id: str, environ: Mapping[str, str] | None = None) -> UsageError:
    """The error for a repo id that is neither cached nor a preset: which files, and how to get them."""
    return UsageError(
        f"model {repo_id!r} is not in the local Hugging Face cache ({cache_dir(environ)}): tilefit reads "
        f"only its config.json and hf_quant_config.json (the latter exists for NVIDIA's quantized "
        f"checkpoints); fetch them with `huggingface-cli download {repo_id} config.json "
        f"hf_quant_config.json`, or pass --model with a preset (see `tilefit models`) or a config.json")
