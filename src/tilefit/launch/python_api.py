"""A deployment written as Python, read without running it: vLLM's and TensorRT-LLM's offline
`LLM(...)` and SGLang's `Engine(...)` take the server's options as keyword arguments named as the
server's flags are (vLLM's EngineArgs fields behind `--tensor-parallel-size`; SGLang's ServerArgs
fields behind `--tp-size`; TensorRT-LLM's LLM arguments behind trtllm-serve's `--tp_size`), so the
call is read as the server command it stands for and handed to the engine's flag reader.

Only literal values are read (`ast.literal_eval`); a keyword given as a variable or an expression is
named in a note and left out. `os.environ["VAR"] = "value"` assignments in the snippet are its
environment. Which engine: the module the name `LLM`/`Engine` was imported from (or is an attribute
of); a bare `LLM(...)` with no import is vLLM's.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from tilefit.launch.shell import Invocation

# (module, class) -> engine and the server entry the call stands for
CLASSES = {("vllm", "LLM"): "vllm", ("tensorrt_llm", "LLM"): "trtllm", ("sglang", "Engine"): "sglang"}
ENTRY = {"vllm": "vllm serve", "trtllm": "trtllm-serve", "sglang": "python -m sglang.launch_server"}
MODEL_KEYWORD = {"vllm": "model", "trtllm": "model", "sglang": "model_path"}


def _imported(tree: ast.AST) -> dict[str, str]:
    """Local name -> the engine module it came from (`from vllm import LLM`, `import sglang as sgl`)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            for alias in node.names:
                names[alias.asname or alias.name] = root
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0]
    return names


def _engine_of(call: ast.Call, imported: dict[str, str]) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        module = imported.get(func.id, "vllm" if func.id == "LLM" else "")
        return CLASSES.get((module, func.id))
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return CLASSES.get((imported.get(func.value.id, func.value.id), func.attr))
    return None


def _flag(engine: str, key: str, value: Any) -> list[str]:
    name = "--" + (key if engine == "trtllm" else key.replace("_", "-"))
    if isinstance(value, bool):  # vLLM's switches take --no-X (BooleanOptionalAction); elsewhere off is the default
        return [name] if value else ([f"--no-{name[2:]}"] if engine == "vllm" else [])
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return [name, *map(str, value)]  # a list flag: cudagraph_capture_sizes=[1, 2, 4]
    if isinstance(value, (dict, list)):
        return [name, json.dumps(value)]  # a JSON flag: compilation_config={...}
    return [name, str(value)]


def _environ(tree: ast.AST) -> dict[str, str]:
    env: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute)
                    and target.value.attr == "environ" and isinstance(target.slice, ast.Constant)
                    and isinstance(node.value, ast.Constant)):
                env[str(target.slice.value)] = str(node.value.value)
    return env


def python_invocation(text: str) -> Invocation | None:
    """The server invocation a Python snippet's engine call stands for; None when `text` is not
    Python or calls no engine class."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    imported = _imported(tree)
    calls = [(n, e) for n in ast.walk(tree) if isinstance(n, ast.Call) for e in [_engine_of(n, imported)] if e]
    if not calls:
        return None
    call, engine = calls[0]
    args: list[str] = []
    skipped: list[str] = []
    model = None
    if call.args:
        try:
            model = ast.literal_eval(call.args[0])
        except ValueError:
            skipped.append("the model (first argument)")
    for kw in call.keywords:
        if kw.arg is None:
            skipped.append("**" + ast.unparse(kw.value))
            continue
        try:
            value = ast.literal_eval(kw.value)
        except ValueError:
            skipped.append(kw.arg)
            continue
        if kw.arg == MODEL_KEYWORD[engine]:
            model = value
        else:
            args += _flag(engine, kw.arg, value)
    lead = ([str(model)] if engine != "sglang" else ["--model-path", str(model)]) if model is not None else []
    notes = (f"read from the Python call {ast.unparse(call.func)}(...) as `{ENTRY[engine]}` with its "
             f"keyword arguments as flags" + (f"; not literal values, left out: {', '.join(skipped)}"
                                              if skipped else ""),)
    return Invocation(engine, ENTRY[engine], tuple(lead + args), tuple(sorted(_environ(tree).items())), notes)
