"""The memory plan against the engines' own start-up figures, and the seed deployment.

Prints (1) for each real log of tests/fixtures/memory/: what the engine printed (weights, KV pool,
KV tokens) next to tilefit's prediction for the same deployment, with the relative error; (2) the
seed deployment (GLM-5-NVFP4, 8 x RTX PRO 6000, sglang, memory fraction 0.75) under EP8, TP8 and
EP8 with DP attention, side by side. Both go into benchmarks/RESULTS.md.

    PYTHONPATH=src python benchmarks/bench_memory.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from memory_fixtures import NAMES, load  # noqa: E402

from tilefit.cli.memory_view import render_comparison  # noqa: E402
from tilefit.cli.output import table  # noqa: E402
from tilefit.hw.catalog import get_gpu  # noqa: E402
from tilefit.memory import MemoryRequest, Parallel, Settings, plan_memory  # noqa: E402
from tilefit.models.architecture import load_architecture  # noqa: E402

GIB = 2**30


def _err(pred: float, printed: float | None) -> str:
    if printed is None:
        return "-"
    if printed == 0:
        return "-"
    return f"{(pred - printed) / abs(printed):+.1%}"


def log_table() -> str:
    rows = []
    for name in NAMES:
        side, printed, plan = load(name)
        w = plan.weight_bytes / GIB
        kv_tokens = plan.kv_tokens
        rows.append((
            "{}#{}".format(side["url"].split("/")[4], side["url"].rstrip("/").split("/")[-1]),
            f"{side['model']} {side['gpu']} {side['engine']}",
            f"{printed.weights_gib:.2f}" if printed.weights_gib is not None else "-",
            f"{w:.2f}", _err(w, printed.weights_gib),
            f"{printed.kv_tokens:,}" if printed.kv_tokens else "-",
            f"{kv_tokens:,}" if side.get("pool") != "layout" else f"layout {plan.kv.bytes_per_token:,} B/token",
            _err(kv_tokens, printed.kv_tokens) if side.get("pool") != "layout" and printed.kv_tokens else "-",
            f"{printed.kv_gib:.2f}" if printed.kv_gib is not None else "-",
            f"{plan.pool.kv_bytes / GIB:.2f}" if side.get("pool") != "layout" else "-",
            plan.verdict if side.get("pool") != "layout" else "-",
        ))
    return table(["source", "deployment", "weights printed GiB", "predicted", "err", "KV tokens printed",
                  "predicted", "err", "KV pool printed GiB", "predicted", "verdict"], rows,
                 align="llrrrrrrrrl")


def seed_table() -> str:
    arch, gpu = load_architecture("glm-5-nvfp4"), get_gpu("rtx-pro-6000")
    s = Settings(mem_fraction=0.75, context_length=202752, max_running_requests=512)
    plans = {label: plan_memory(MemoryRequest(arch, gpu, "sglang", par, s)) for label, par in (
        ("EP8 (--tp 8 --ep 8)", Parallel(tp=8, ep=8)),
        ("TP8 (--tp 8)", Parallel(tp=8)),
        ("EP8 + DP-attention 8", Parallel(tp=8, ep=8, dp=8, dp_attention=True)))}
    return render_comparison(plans)


if __name__ == "__main__":
    print(log_table())
    print()
    print(seed_table())
