"""A serving engine's launch command, read as the engine reads it (sglang, vLLM, TensorRT-LLM).

shell.py finds the engine invocation in the pasted text (environment, wrappers, continuations);
flags.py reads its arguments against the engine module's table of flags that matter; the engine
module (sglang.py, vllm.py, trtllm.py) builds the LaunchSpec: GPUs, MoE layout, settings, env.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tilefit.launch.python_api import python_invocation
from tilefit.launch.shell import parse_command
from tilefit.errors import UsageError
from tilefit.launch.types import MEM_FRACTION_KINDS, LaunchSettings, LaunchSpec, Parallel

__all__ = ["MEM_FRACTION_KINDS", "LaunchSettings", "LaunchSpec", "Parallel", "parallel_of",
           "parse_launch"]


def parse_launch(command: str | Sequence[str], *,
                 read_file: Callable[[str], str] | None = None) -> LaunchSpec:
    """The LaunchSpec of a launch command (pasted text or argv words). `read_file` reads options
    files the command names (TensorRT-LLM's YAML, vLLM's --config); default: from disk."""
    from tilefit.launch import sglang, trtllm, vllm

    inv = python_invocation(command) if isinstance(command, str) and "(" in command else None
    if inv is None:
        inv = parse_command(command if isinstance(command, str) else list(command))
    if inv.engine == "sglang":
        spec = sglang.build(inv.args, inv.env)
    elif inv.engine == "vllm":
        spec = vllm.build(inv.args, inv.env, read_file)
    else:
        spec = trtllm.build(inv.args, inv.env, read_file)
    return replace(spec, notes=inv.notes + spec.notes) if inv.notes else spec


def parallel_of(engine: str, *, tp: int = 1, ep: int = 1, dp: int = 1,
                enable_expert_parallel: bool = False, enable_dp_attention: bool = False) -> Parallel:
    """tilefit's own --tp/--ep/--dp read with `engine`'s meaning (sglang: --ep carved out of --tp,
    --dp replicas unless DP attention; vLLM: tp x dp GPUs, EP over all of them with
    --enable-expert-parallel; TensorRT-LLM: ep x moe tp = tp, DP attention over the tp ranks)."""
    from tilefit.launch import sglang, trtllm, vllm
    from tilefit.layout.plan import MAX_PARALLEL

    for name, value in (("tp", tp), ("ep", ep), ("dp", dp)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_PARALLEL:
            raise UsageError(f"--{name} must be an integer in 1..{MAX_PARALLEL}, got {value!r}")
    if engine == "sglang":
        return sglang.layout_of(tp, ep, dp, dp_attention=enable_dp_attention, lenient=True)
    if engine == "vllm":
        if ep > 1 and tp not in (1, ep):
            raise UsageError(f"vLLM has no EP size: its MoE runs EP over all -tp x -dp GPUs with "
                             f"--enable-expert-parallel, or TP over them; --tp {tp} --ep {ep} is neither")
        if ep > 1:
            par = vllm.layout_of(ep, dp, expert_parallel=True)
            return replace(par, notes=(f"vLLM has no EP size: --ep {ep} is read as -tp {ep} "
                                       f"--enable-expert-parallel",) + par.notes)
        return vllm.layout_of(tp, dp, expert_parallel=enable_expert_parallel)
    if engine == "trtllm":
        if tp == 1 and ep > 1:
            par = trtllm.layout_of(ep, ep, attention_dp=enable_dp_attention)
            return replace(par, notes=(f"TensorRT-LLM's ep_size divides tp_size: --ep {ep} alone is read "
                                       f"as --tp_size {ep} --ep_size {ep}",) + par.notes)
        return trtllm.layout_of(tp, ep, attention_dp=enable_dp_attention)
    raise UsageError(f"unknown engine {engine!r}; use sglang, vllm or trtllm")
