"""How well `parse_launch` reads real launch commands it was not written against.

Reads tests/fixtures/launch/held_out/*.toml, or held_out2/ or held_out3/ with --set 2 or 3 (commands copied from
public issues and docs; the expected GPU count and layout were written by hand from the engines' rules
before tilefit was run),
parses each one and prints, per command and in total: parsed without error, GPU count right, layout
(attention TP, EP, DP, MoE TP) right, model right, and every flag reported unknown that the sidecar
does not list as really unknown (a wrong report: the engine has that flag).

    python benchmarks/launch_heldout.py          # table + totals
    python benchmarks/launch_heldout.py --json   # the same as JSON
    python benchmarks/launch_heldout.py --set 2  # the second held-out set, tests/fixtures/launch/held_out2/
    python benchmarks/launch_heldout.py --set 3  # the third held-out set, tests/fixtures/launch/held_out3/
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

HELD_OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "launch" / "held_out"
SETS = {1: HELD_OUT, 2: HELD_OUT.with_name("held_out2"), 3: HELD_OUT.with_name("held_out3")}  # --set N reads SETS[N]


def measure(path: Path) -> dict[str, object]:
    """One command's outcome: error text or the comparison with its sidecar."""
    from tilefit.errors import UsageError
    from tilefit.launch import parse_launch

    fx = tomllib.loads(path.read_text(encoding="utf-8"))
    row: dict[str, object] = {"name": path.stem, "engine": fx["engine"], "source": fx["source"]}
    want = (fx["tp"], fx["ep"], fx["dp"], fx["moe_tp"])
    try:
        spec = parse_launch(fx["command"], read_file=lambda _name: fx["yaml"])
    except UsageError as e:
        row.update(parsed=False, error=str(e), gpus_ok=False, layout_ok=False, model_ok=False,
                   wrong_unknown=[])
        return row
    lay = spec.layout
    got = (lay.attention_tp, lay.ep, lay.dp, lay.tp)
    really_unknown = set(fx.get("unknown", []))
    row.update(parsed=True, error="", gpus=spec.gpus, want_gpus=fx["gpus"], layout=got, want_layout=want,
               gpus_ok=spec.gpus == fx["gpus"] and spec.engine == fx["engine"], layout_ok=got == want,
               model_ok=spec.model.rstrip("/") == fx["model"].rstrip("/"), model=spec.model,
               wrong_unknown=[u for u in spec.unknown if u not in really_unknown])
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows and totals as JSON")
    ap.add_argument("--set", type=int, choices=sorted(SETS), default=1,
                    help="which held-out set: 1 = held_out/ (default), 2 = held_out2/, 3 = held_out3/")
    args = ap.parse_args(argv)
    rows = [measure(p) for p in sorted(SETS[args.set].glob("*.toml"))]
    totals = {k: sum(1 for r in rows if r[k]) for k in ("parsed", "gpus_ok", "layout_ok", "model_ok")}
    totals["commands"] = len(rows)
    totals["both_ok"] = sum(1 for r in rows if r["gpus_ok"] and r["layout_ok"])
    totals["wrong_unknown"] = sum(len(r["wrong_unknown"]) for r in rows)  # type: ignore[arg-type]
    if args.json:
        print(json.dumps({"rows": rows, "totals": totals}, indent=1, default=list))
        return 0
    for r in rows:
        mark = "ok " if r["gpus_ok"] and r["layout_ok"] else "MISS"
        detail = (f"error: {r['error']}" if not r["parsed"] else
                  f"gpus {r['gpus']} (want {r['want_gpus']}) layout tp/ep/dp/moe_tp {r['layout']} "
                  f"(want {r['want_layout']})" + ("" if r["model_ok"] else f" model {r['model']!r}"))
        print(f"{mark} {r['name']:<10} {detail}")
        for u in r["wrong_unknown"]:  # type: ignore[union-attr]
            print(f"     wrongly unknown: {u}")
    print("totals: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
