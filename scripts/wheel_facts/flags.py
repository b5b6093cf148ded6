"""The command-line flags an engine's argument parser accepts, read from its wheel's source.

sglang: "--..." strings of server_args.py and arg_groups/ plus, from 0.5.15, the annotated dataclass
fields of arg_groups/fields/*.py (each `name: A[...]` becomes --name-with-dashes). vLLM: the fields of
EngineArgs (engine/arg_utils.py) and FrontendArgs (entrypoints/openai/cli_args.py), each a
--field-name, plus every "--..."/"-xx" string in those files and the serve command.
"""

from __future__ import annotations

import re
from pathlib import Path

_LITERAL = re.compile(r"""["'](--?[a-zA-Z][a-zA-Z0-9-]*)["']""")
_FIELD = re.compile(r"^    ([a-z_][a-z0-9_]*)\s*:\s*(?!ClassVar)", re.M)


def _literals(text: str) -> set[str]:
    return {f for f in _LITERAL.findall(text) if f.startswith("--") or len(f) <= 4}


def _fields(text: str, class_name: str | None = None) -> set[str]:
    if class_name is not None:
        m = re.search(rf"^class {class_name}\b.*?(?=^class |\Z)", text, re.M | re.S)
        text = m.group(0) if m else ""
    return {"--" + name.replace("_", "-") for name in _FIELD.findall(text) if not name.startswith("_")}


_ANNOTATED = re.compile(r"^    ([a-z_][a-z0-9_]*)\s*:\s*A\[", re.M)


def sglang_flags(root: Path) -> set[str]:
    srt = root / "sglang" / "srt"
    out: set[str] = set()
    for p in [srt / "server_args.py", *sorted((srt / "arg_groups").rglob("*.py"))]:
        if p.is_file():
            text = p.read_text(errors="replace")
            out |= _literals(text)
            out |= {"--" + n.replace("_", "-") for n in _ANNOTATED.findall(text)}
    return {f for f in out if f.startswith("--")}


def vllm_flags(root: Path) -> set[str]:
    out: set[str] = set()
    arg_utils = root / "vllm" / "engine" / "arg_utils.py"
    if arg_utils.is_file():
        text = arg_utils.read_text(errors="replace")
        out |= _fields(text, "EngineArgs") | _literals(text)
    for rel in ("entrypoints/openai/cli_args.py", "entrypoints/cli/serve.py"):
        p = root / "vllm" / rel
        if p.is_file():
            text = p.read_text(errors="replace")
            out |= _fields(text, "FrontendArgs") | _literals(text)
    return out
