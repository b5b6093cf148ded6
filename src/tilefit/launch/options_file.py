"""Options files that launch commands point at: TensorRT-LLM's --extra_llm_api_options/--config
YAML and vLLM's --config YAML. PyYAML reads them (TensorRT-LLM itself loads the file with
yaml.safe_load, so the same parser reads the same mappings)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tilefit._io import read_small_file
from tilefit.errors import UsageError

ReadFile = Callable[[str], str]


MAX_OPTIONS_BYTES = 4 * 2**20  # an engine's options YAML is a few KiB


def _read_disk(path: str) -> str:
    """The file's text: a regular file under MAX_OPTIONS_BYTES (read_small_file: /dev/zero or a FIFO
    is refused before any read), UTF-8."""
    what = "a launch options file (YAML)"
    try:
        data = read_small_file(Path(path).expanduser(), limit=MAX_OPTIONS_BYTES, what=what)
    except UsageError as e:
        raise UsageError(f"cannot read the options file {path!r} named in the launch command ({e}): "
                         f"run tilefit where the command runs, or fix the path") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"the options file {path!r} named in the launch command is not text "
                         f"(expected {what})") from None


def read_options(path: str, read_file: ReadFile | None = None) -> dict[str, Any]:
    """The mapping in the YAML file `path` (read with `read_file`, else from disk)."""
    import yaml  # lazy: only launch commands with an options file need it

    text = (read_file or _read_disk)(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UsageError(f"options file {path!r} is not valid YAML: {str(e).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"options file {path!r} holds a {type(data).__name__}, not a mapping of options")
    return data


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'kv_cache_config': {'dtype': 'fp8'}} -> {'kv_cache_config.dtype': 'fp8'}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out
