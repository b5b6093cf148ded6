"""The launch-command form shared by check, plan and compare: `tilefit check --gpu G -- <command>`
reads the engine, model, layout, settings and environment from the engine's own command line, and
`--engine E` makes tilefit's --tp/--ep/--dp mean what engine E means by them."""

from __future__ import annotations

import argparse

from tilefit.errors import UsageError
from tilefit.launch import LaunchSettings, LaunchSpec, Parallel, parallel_of, parse_launch
from tilefit.launch.flags import versions_read

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
                        "--enable-expert-parallel`; leading VAR=value settings are read too, and "
                        "one quoted argument is read as a whole script (`-- \"$(cat serve.sh)\"`)")


def launch_spec(args: argparse.Namespace) -> LaunchSpec | None:
    """The parsed launch command, or None when none was given."""
    words = list(getattr(args, "launch", None) or [])
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        return None
    if words[0].startswith("-"):
        raise UsageError(f"unknown option {words[0]!r}; a launch command goes after `--`")
    # One quoted word holding a whole command or script (`-- "$(cat serve.sh)"`, a pasted
    # multi-line command): read it as the shell text it is.
    spec = parse_launch(words[0] if len(words) == 1 and any(c.isspace() for c in words[0]) else words)
    engine = getattr(args, "engine", None)
    if engine and engine != spec.engine:
        raise UsageError(f"--engine {engine} but the launch command starts {spec.engine}; drop --engine")
    return spec


def model_of(args: argparse.Namespace, spec: LaunchSpec | None) -> str | None:
    """--model, else the launch command's model; a model left as a shell variable (`$MODEL`,
    `${MODEL_PATH}`: a script pasted without its shell) is a UsageError asking for --model."""
    given = getattr(args, "model", None)
    if given or spec is None:
        return given
    if "$" in spec.model:
        raise UsageError(f"the launch command's model is {spec.model.strip()!r}, a shell variable tilefit "
                         f"cannot expand: pass --model (a preset, config.json or Hugging Face id)")
    return spec.model or None


def deployment(args: argparse.Namespace, *, model_required: bool = True) -> LaunchSpec:
    """The deployment a command describes: the launch command after `--`, else tilefit's own
    --engine/--model/--tp/--ep/--dp read with that engine's meaning."""
    spec = launch_spec(args)
    if spec is not None:
        return spec
    engine = getattr(args, "engine", None)
    if not engine:
        raise UsageError("give --engine (sglang, vllm or trtllm) or the launch command after `--`, e.g. "
                         "`tilefit check --gpu rtx-pro-6000 -- vllm serve MODEL -tp 8`")
    if model_required and not getattr(args, "model", None):
        raise UsageError("give --model (a preset, config.json or Hugging Face id) or a launch command after `--`")
    par = engine_parallel(args, engine)
    return LaunchSpec(engine, getattr(args, "model", None) or "", par.layout, par.gpus, LaunchSettings(),
                      replicas=par.replicas, notes=par.notes)


def launch_lines(spec: LaunchSpec, limit: int | None, *, headline: bool = True) -> list[str]:
    """GPUs and layout as the engine builds them (the headline, unless the caller's own first line
    says them), more than --gpus or one node, how the flags were read, and what was not used."""
    head = spec.headline() if headline else ""
    if limit is not None and spec.gpus > limit:
        head += f"{'; t' if head else 'T'}his needs {spec.gpus} GPUs, more than the {limit} of --gpus"
    elif limit is None and spec.gpus > NODE_GPUS:
        head += f"{'; t' if head else 'T'}his needs {spec.gpus} GPUs: more than one {NODE_GPUS}-GPU node"
    # How the flags were read is said for launch commands; tilefit's own flags show their reading in
    # the layout on the first line.
    out = ([head] if head else []) + ([f"  {n}" for n in spec.notes] if spec.argv else [])
    if spec.unknown:
        out.append(f"  not understood (not in {versions_read(spec.engine)}: check the spelling, or it "
                   f"belongs to another release; tilefit did not use them): {', '.join(spec.unknown)}")
    if spec.ignored:
        out.append(f"  read and not needed here: {', '.join(spec.ignored)}")
    return out


def engine_parallel(args: argparse.Namespace, engine: str) -> Parallel:
    """tilefit's --tp/--ep/--dp as `engine` reads them."""
    return parallel_of(engine, tp=args.tp, ep=args.ep, dp=args.dp,
                       enable_expert_parallel=getattr(args, "enable_expert_parallel", False),
                       enable_dp_attention=getattr(args, "enable_dp_attention", False))
