"""A serving engine's launch command, read as the engine reads it (sglang, vLLM, TensorRT-LLM).

shell.py finds the engine invocation in the pasted text (environment, wrappers, continuations);
flags.py reads its arguments against the engine module's table of flags that matter; the engine
module (sglang.py, vllm.py, trtllm.py) builds the LaunchSpec: GPUs, MoE layout, settings, env.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tilefit.launch.shell import parse_command
from tilefit.launch.types import MEM_FRACTION_KINDS, LaunchSettings, LaunchSpec

__all__ = ["MEM_FRACTION_KINDS", "LaunchSettings", "LaunchSpec", "parse_launch"]


def parse_launch(command: str | Sequence[str], *,
                 read_file: Callable[[str], str] | None = None) -> LaunchSpec:
    """The LaunchSpec of a launch command (pasted text or argv words). `read_file` reads options
    files the command names (TensorRT-LLM's YAML, vLLM's --config); default: from disk."""
    from tilefit.launch import sglang, trtllm, vllm

    inv = parse_command(command if isinstance(command, str) else list(command))
    if inv.engine == "sglang":
        return sglang.build(inv.args, inv.env)
    if inv.engine == "vllm":
        return vllm.build(inv.args, inv.env, read_file)
    return trtllm.build(inv.args, inv.env, read_file)
