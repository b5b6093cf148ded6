"""The import graph of src/tilefit, read with ast (nothing is imported): no package cycle, no file
cycle, and no import upward in the layering

    cli -> check / diagnose / tune / compare / report -> engines / launch / memory
        -> kernels / perf / layout / oracles -> hw / models -> errors, versions, settings, text, ...

Imports inside functions count: a lazy import is still a dependency. A package missing from
LAYERS fails the test until someone places it."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "tilefit"

# Higher imports lower; equal ranks may import each other as long as no cycle forms.
LAYERS: dict[str, int] = {
    "__main__": 6,
    "cli": 5,
    "check": 4, "diagnose": 4, "tune": 4, "compare": 4, "report": 4,
    "engines": 3, "launch": 3, "memory": 3,
    "kernels": 2, "perf": 2, "layout": 2, "oracles": 2,
    "hw": 1, "models": 1,
    "__init__": 0, "errors": 0, "versions": 0, "settings": 0, "text": 0, "numeric": 0, "_io": 0, "_toml": 0,
    "dtypes": 0,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the tilefit modules it imports (`from pkg import sub` points at pkg.sub)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != mod:
                    edges[mod].add(target)
    return edges


def _package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _cycles(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


MODS = _modules()
EDGES = _edges(MODS)


def test_every_package_has_a_layer():
    missing = sorted({_package(m) for m in MODS} - set(LAYERS))
    assert not missing, f"place these packages in LAYERS: {missing}"


def test_no_upward_import():
    upward = sorted(f"{a} -> {b}" for a, targets in EDGES.items() for b in targets
                    if LAYERS.get(_package(b), 0) > LAYERS.get(_package(a), 0))
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_no_package_cycle():
    packages: dict[str, set[str]] = defaultdict(set)
    for a, targets in EDGES.items():
        packages[_package(a)] |= {_package(b) for b in targets
                                  if _package(b) != _package(a)}
    assert _cycles(sorted(packages), packages) == []


def test_no_file_cycle():
    assert _cycles(sorted(MODS), EDGES) == []


def test_the_checker_sees_cycles_and_upward_imports():
    # The checks above would pass on an empty graph: show that they see what they look for.
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(["a", "b", "c", "d"], edges) == [["a", "b", "c"]]
    assert "tilefit.engines" in EDGES["tilefit.check.report"] or any(
        _package(b) == "engines" for b in EDGES["tilefit.check.report"])
    assert "tilefit.engines.table" in EDGES["tilefit.engines.sglang"]
