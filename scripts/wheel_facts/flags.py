"""The command-line flags an engine's argument parser accepts, read from its wheel's source.

sglang: "--..." strings of server_args.py and arg_groups/ plus, from 0.5.15, the annotated dataclass
fields of arg_groups/fields/*.py (each `name: A[...]` becomes --name-with-dashes). vLLM: the fields of
EngineArgs (engine/arg_utils.py) and of (Base)FrontendArgs (entrypoints/openai/cli_args.py, from
0.29 entrypoints/common/cli_args.py), each a --field-name, plus every "--..."/"-xx" string in those
files and the serve command. Both: the --no-X form argparse.BooleanOptionalAction adds to an option
(vLLM's get_kwargs gives it to every bool-typed config field, 0.9.0-0.33.0; sglang names the action
in add_argument calls and, from 0.5.15, in a field's Arg(...)).
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

_LITERAL = re.compile(r"""["'](--?[a-zA-Z][a-zA-Z0-9-]*)["']""")
_FIELD = re.compile(r"^    ([a-z_][a-z0-9_]*)\s*:\s*(?!ClassVar)([^=\n]*)", re.M)
_ADD_ARGUMENT = re.compile(r"add_argument\(")
_KWARGS_FIELD = re.compile(r"\*\*\w+_kwargs\[[\"']([a-z_][a-z0-9_]*)[\"']\]")


def _literals(text: str) -> set[str]:
    return {f for f in _LITERAL.findall(text) if f.startswith("--") or len(f) <= 4}


def _annotations(text: str, class_name: str) -> dict[str, str]:
    """Field name -> annotation text of `class_name`'s body in `text`."""
    # The body runs to the next line at column 0 (a function after the class is not a field).
    m = re.search(rf"^class {class_name}\b[^\n]*\n(.*?)(?=^\S|\Z)", text, re.M | re.S)
    return {name: ann for name, ann in _FIELD.findall(m.group(1) if m else "")
            if not name.startswith("_") and not keyword.iskeyword(name)}


def _fields(text: str, class_name: str) -> set[str]:
    return {"--" + name.replace("_", "-") for name in _annotations(text, class_name)}


def _is_bool(annotation: str) -> bool:
    # get_kwargs: a type that holds bool gets BooleanOptionalAction; bool | str | None is an
    # optional-valued flag instead (0.33.0), so str in the union means no --no- form.
    return bool(re.search(r"\bbool\b", annotation)) and not re.search(r"\bstr\b", annotation)


def _negated_options(text: str, bool_fields: set[str]) -> set[str]:
    """--no-X for each add_argument("--X", ...) call that uses BooleanOptionalAction, directly or
    through get_kwargs of a bool field (`**cache_kwargs["enable_prefix_caching"]`)."""
    out: set[str] = set()
    for m in _ADD_ARGUMENT.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        call = text[m.end():i]
        field = _KWARGS_FIELD.search(call)
        if "BooleanOptionalAction" in call or (field and field.group(1) in bool_fields):
            out |= {"--no-" + f[2:] for f in _LITERAL.findall(call) if f.startswith("--")}
    return out


_ANNOTATED = re.compile(r"^    ([a-z_][a-z0-9_]*)\s*:\s*A\[", re.M)


def sglang_flags(root: Path) -> set[str]:
    srt = root / "sglang" / "srt"
    out: set[str] = set()
    for p in [srt / "server_args.py", *sorted((srt / "arg_groups").rglob("*.py"))]:
        if p.is_file():
            text = p.read_text(errors="replace")
            out |= _literals(text) | _negated_options(text, set())
            fields = list(_ANNOTATED.finditer(text))
            for m, nxt in zip(fields, fields[1:] + [None]):
                flag = "--" + m.group(1).replace("_", "-")
                out.add(flag)
                if "BooleanOptionalAction" in text[m.end():nxt.start() if nxt else len(text)]:
                    out.add("--no-" + flag[2:])  # Arg(action=argparse.BooleanOptionalAction)
    return {f for f in out if f.startswith("--")}


def vllm_flags(root: Path) -> set[str]:
    out: set[str] = set()
    arg_utils = root / "vllm" / "engine" / "arg_utils.py"
    if arg_utils.is_file():
        text = arg_utils.read_text(errors="replace")
        annotations = _annotations(text, "EngineArgs")
        out |= _fields(text, "EngineArgs") | _literals(text)
        out |= _negated_options(text, {n for n, a in annotations.items() if _is_bool(a)})
    for rel in ("entrypoints/openai/cli_args.py", "entrypoints/common/cli_args.py", "entrypoints/cli/serve.py"):
        p = root / "vllm" / rel
        if p.is_file():
            text = p.read_text(errors="replace")
            out |= _literals(text) | _negated_options(text, set())
            for cls in ("BaseFrontendArgs", "FrontendArgs"):
                annotations = _annotations(text, cls)
                out |= {"--" + n.replace("_", "-") for n in annotations}
                if "get_kwargs(" in text:  # 0.10+: every field through get_kwargs
                    out |= {"--no-" + n.replace("_", "-") for n, a in annotations.items() if _is_bool(a)}
    return out
