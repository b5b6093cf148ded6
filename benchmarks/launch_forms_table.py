#!/usr/bin/env python3
"""Tables from bench_launch_forms.py's and bench_sglang_paths.py's JSON lines (no GPU).

  python3 benchmarks/launch_forms_table.py forms FORMS.jsonl   # does an engine's launch form change the pick?
  python3 benchmarks/launch_forms_table.py paths SGPATHS.jsonl # the best tile of each SGLang path per row

forms: per (batch, dtype, layout, gemm), the fastest tile in tilefit's launch and in the engine's
(SGLang's EP/grid form against SGLang's kernel on tilefit's alignment, so only the launch differs;
vLLM's naive assignment against tilefit's kernel), what the engine's form costs on that tile, and,
where the picks differ, how much slower the first pick runs in the engine's form than its best.
paths: per row, each variant's fastest tile and its time over `base`'s fastest tile.
"""
import json
import sys
from collections import defaultdict


def _load(path):
    rows = [json.loads(line) for line in open(path)]
    return [r for r in rows if "us" in r and "variant" in r]


def forms(path):
    g = defaultdict(lambda: defaultdict(dict))
    for r in _load(path):
        g[(r["batch"], r["dtype"], r["shape"], r["gemm"])][r["variant"]][r["config"]] = r["us"]
    print("| batch | dtype | layout | gemm | pick, own launch | pick, engine's | engine form / own, own pick | own pick in engine form / engine's pick |")
    print("|---|---|---|---|---|---|---|---|")
    same = total = 0
    for (batch, dtype, shape, gemm), v in sorted(g.items()):
        own, eng = ("sg", "sg_form") if "sg_form" in v else ("base", "naive")
        if own not in v or eng not in v:
            continue
        a = min(v[own], key=v[own].get)
        b = min(v[eng], key=v[eng].get)
        total += 1
        same += a == b
        loss = "same" if a == b else f"{v[eng][a] / v[eng][b]:.3f}"
        print(f"| {batch} | {dtype} | {shape} | {gemm} | {a} | {b} | {v[eng][a] / v[own][a]:.3f} | {loss} |")
    print(f"\nsame pick in {same} of {total}")


def paths(path):
    g = defaultdict(lambda: defaultdict(dict))
    for r in _load(path):
        g[(r["batch"], r["dtype"], r["shape"], r["gemm"])][r["variant"]][r["config"]] = r["us"]
    names = ["sg_mask", "sg", "sg_btma", "sg_tma", "sg_pdl", "sg_tma_pdl"]
    print("| batch | dtype | layout | gemm | base best (us) | " + " | ".join(names) + " |")
    print("|---|---|---|---|---|" + "---|" * len(names))
    for (batch, dtype, shape, gemm), v in sorted(g.items()):
        base = min(v["base"].values())
        cells = []
        for n in names:
            cells.append(f"{min(v[n].values()) / base:.3f}" if v.get(n) else "-")
        cfg = min(v["base"], key=v["base"].get)
        print(f"| {batch} | {dtype} | {shape} | {gemm} | {cfg} ({base:.1f}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    steps = {"forms": forms, "paths": paths}
    if len(sys.argv) != 3 or sys.argv[1] not in steps:
        print("usage: launch_forms_table.py forms|paths FILE.jsonl", file=sys.stderr)
        sys.exit(2)
    try:
        steps[sys.argv[1]](sys.argv[2])
    except OSError as exc:
        print(f"launch_forms_table.py: {exc}", file=sys.stderr)
        sys.exit(2)
