"""Search strategies, one module each, all with one entry point:
`search(space, evaluate, budget, options) -> SearchResult` (types in base.py).

`get_strategy(name)` returns the module; `make_options(module, {...})` builds its frozen Options,
rejecting unknown keys with the list of known ones.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from types import ModuleType
from typing import Any

from tilefit.errors import UsageError, unknown_name

STRATEGIES: dict[str, str] = {
    "fast": "tilefit.tune.strategies.fast",
    "exhaustive": "tilefit.tune.strategies.exhaustive",
}


def get_strategy(name: str) -> ModuleType:
    if name not in STRATEGIES:
        raise unknown_name("strategy", name, STRATEGIES, "tilefit tune --help")
    return importlib.import_module(STRATEGIES[name])


_BOOLS = {"1": True, "true": True, "yes": True, "on": True,
          "0": False, "false": False, "no": False, "off": False}


def make_options(module: ModuleType, values: dict[str, Any] | None = None) -> Any:
    """The module's Options from `values`; unknown keys are a UsageError naming the known ones."""
    cls = module.Options
    known = {f.name: f for f in dataclasses.fields(cls)}
    values = dict(values or {})
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise UsageError(f"unknown option(s) {', '.join(unknown)} for strategy "
                         f"{module.__name__.rsplit('.', 1)[-1]!r}; known: {', '.join(known) or 'none'}")
    typed = {}
    for k, v in values.items():
        default = known[k].default
        try:
            if isinstance(default, bool) and isinstance(v, str):
                if v.lower() not in _BOOLS:
                    raise ValueError(v)
                typed[k] = _BOOLS[v.lower()]
            else:
                typed[k] = type(default)(v) if default is not dataclasses.MISSING else v
        except (TypeError, ValueError):
            raise UsageError(f"strategy option {k}={v!r}: expected a {type(default).__name__}") from None
        # Every numeric option is a count, a fraction or a margin: a negative one would silently
        # read as another setting (seeds=-1 as "every seed", patience=-2 as "stop at once").
        if isinstance(typed[k], (int, float)) and not isinstance(typed[k], bool) \
                and not 0 <= typed[k] < math.inf:
            raise UsageError(f"strategy option {k}={v!r}: expected a number >= 0 (default "
                             f"{default}; see `tilefit tune --help`)")
    return cls(**typed)


def parse_option_text(items: list[str] | None) -> dict[str, str]:
    """['top=8', 'beam=2'] -> {'top': '8', 'beam': '2'}."""
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"strategy option {item!r} must look like NAME=VALUE")
        out[key.strip()] = value.strip()
    return out
