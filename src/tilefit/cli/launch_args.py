"""The launch-command form shared by check, plan and compare: `tilefit check --gpu G -- <command>`
reads the engine, model, layout, settings and environment from the engine's own command line, and
`--engine E` makes tilefit's --tp/--ep/--dp mean what engine E means by them."""

from __future__ import annotations

import argparse

from tilefit.errors import UsageError
from tilefit.launch import LaunchSpec, Parallel, parallel_of, parse_launch

# One 8-GPU HGX/DGX host: a command that needs more spans nodes (say so; tilefit plans per GPU).
NODE_GPUS = 8


def add_launch_args(p: argparse.ArgumentParser, *, layout_flags: bool = True) -> None:
    """`-- <launch command>` plus the engine-meaning switches for tilefit's own flags."""
    if layout_flags:
        p.add_argument("--enable-expert-parallel", action="store_true",
                       help="with --engine vllm: MoE runs EP over all --tp x --dp GPUs (vLLM's flag)")
        p.add_argument("--enable-dp-attention", action="store_true",
                       help="with --engine sglang|trtllm: --dp splits attention inside the GPUs "
                            "(without it sglang's --dp starts replicas)")
    p.add_argument("launch", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="the engine's launch command after `--`, e.g. `-- python -m sglang.launch_server "
                        "--model-path zai-org/GLM-5 --tp 8 --ep 8` or `-- vllm serve MODEL -tp 8 "
                        "--enable-expert-parallel`; leading VAR=value settings are read too")


def launch_spec(args: argparse.Namespace) -> LaunchSpec | None:
    """The parsed launch command, or None when none was given."""
    words = list(getattr(args, "launch", None) or [])
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        return None
    if words[0].startswith("-"):
        raise UsageError(f"unknown option {words[0]!r}; a launch command goes after `--`")
    spec = parse_launch(words)
    engine = getattr(args, "engine", None)
    if engine and engine != spec.engine:
        raise UsageError(f"--engine {engine} but the launch command starts {spec.engine}; drop --engine")
    return spec


def engine_parallel(args: argparse.Namespace, engine: str) -> Parallel:
    """tilefit's --tp/--ep/--dp as `engine` reads them."""
    return parallel_of(engine, tp=args.tp, ep=args.ep, dp=args.dp,
                       enable_expert_parallel=getattr(args, "enable_expert_parallel", False),
                       enable_dp_attention=getattr(args, "enable_dp_attention", False))


def gpu_line(gpus: int, limit: int | None, engine: str, layout_label: str, notes: tuple[str, ...]) -> str:
    """The first line: how many GPUs and the layout as the engine builds it, and whether that is
    more than --gpus (or one 8-GPU node)."""
    line = f"{gpus} GPU{'s' if gpus != 1 else ''}: {engine} builds {layout_label}"
    if limit is not None and gpus > limit:
        line += f"; that is more than the {limit} GPUs of --gpus"
    elif limit is None and gpus > NODE_GPUS:
        line += f"; that spans more than one {NODE_GPUS}-GPU node"
    return line + "".join(f"\n  {n}" for n in notes)
