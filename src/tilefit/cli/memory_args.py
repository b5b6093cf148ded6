"""The memory-plan flags shared by `plan --memory` and `check`, and the request they build.

tilefit's own --tp/--ep mean tp x ep GPUs with experts split ep ways (see `layout/plan.py`); the
request translates that into each engine's flags (`memory.Parallel.for_engine`).
"""

from __future__ import annotations

import argparse
from typing import Any

from tilefit.memory.kv import KV_DTYPES

ENGINES = ("sglang", "vllm")


def fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {v}")
    return v


def engine_version(text: str) -> str:
    """Checked like every other version (bounded digits); kept as the string the rules read."""
    from tilefit.errors import UsageError
    from tilefit.versions import parse_version

    try:
        parse_version(text, "engine version", "0.5.9")
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_memory_args(p: argparse.ArgumentParser, *, engine: bool) -> None:
    from tilefit.cli.args import positive_int

    g = p.add_argument_group("device memory (the engine's defaults when not given)")
    if engine:
        # No default: an explicit --engine also makes --tp/--ep/--dp mean what that engine means.
        g.add_argument("--engine", choices=ENGINES,
                       help="engine whose flag meanings and memory rules to apply (default: sglang's "
                            "memory rules, tilefit's TP x EP layout)")
        g.add_argument("--engine-version", metavar="V", type=engine_version,
                       help="engine version whose memory rules to apply (default: the newest read)")
    g.add_argument("--mem-fraction", type=fraction, metavar="F",
                   help="sglang --mem-fraction-static / vLLM --gpu-memory-utilization")
    g.add_argument("--context-length", type=positive_int, metavar="N",
                   help="sglang --context-length / vLLM --max-model-len: concurrency is counted at it")
    g.add_argument("--max-running-requests", type=positive_int, metavar="N",
                   help="sglang --max-running-requests / vLLM --max-num-seqs")
    g.add_argument("--kv-dtype", default="auto", choices=("auto", *KV_DTYPES),
                   help="KV-cache dtype (default: auto, the engine's rule)")
    g.add_argument("--chunked-prefill", type=positive_int, metavar="N",
                   help="sglang --chunked-prefill-size / vLLM --max-num-batched-tokens")
    g.add_argument("--a2a-backend", choices=("none", "deepep"), default="none",
                   help="sglang --moe-a2a-backend (DeepEP keeps shared experts whole on every GPU)")


def memory_settings(args: argparse.Namespace, spec: Any = None):
    """The memory flags, over the launch command's settings (`spec`, a LaunchSpec) where given."""
    import dataclasses

    from tilefit.memory import Settings
    from tilefit.memory.base import from_launch

    base = from_launch(spec)[1] if spec is not None and getattr(spec, "layout", None) is not None else Settings()
    given = {k: v for k, v in (("mem_fraction", args.mem_fraction), ("context_length", args.context_length),
                               ("max_running_requests", args.max_running_requests),
                               ("chunked_prefill", args.chunked_prefill)) if v is not None}
    if args.kv_dtype != "auto":
        given["kv_dtype"] = args.kv_dtype
    return dataclasses.replace(base, **given)


def memory_request(args: argparse.Namespace, model: str, gpu_name: str, engine: str,
                   tp: int, ep: int, dp: int):
    """A MemoryRequest from tilefit's layout flags and the memory flags."""
    from tilefit.memory import Settings, request_for

    settings = Settings(mem_fraction=args.mem_fraction, context_length=args.context_length,
                        max_running_requests=args.max_running_requests, kv_dtype=args.kv_dtype,
                        chunked_prefill=args.chunked_prefill)
    return request_for(model, gpu_name, engine, tp * ep, ep, dp, settings,
                       getattr(args, "engine_version", None), args.a2a_backend)
