"""TensorRT-LLM's trtllm-serve flags and its LLM API options YAML -> LaunchSpec.

Flags: tensorrt_llm/commands/serve.py (click options; NVIDIA/TensorRT-LLM at 00209af1); the YAML
overrides them (update_llm_args_with_extra_dict). GPUs = tp_size x pp_size; MoE runs
EP moe_expert_parallel_size x TP moe_tensor_parallel_size = tp_size (mapping.py: with neither
given, MoE TP = tp_size); enable_attention_dp makes attention data-parallel over the tp ranks.
"""

from __future__ import annotations

from typing import Any

from tilefit.errors import UsageError
from tilefit.launch.flags import parse_args, table
from tilefit.launch.options_file import flatten, read_options
from tilefit.launch.types import LaunchSettings, LaunchSpec, Parallel
from tilefit.layout.plan import Layout

ENGINE = "trtllm"

TABLE = table(ENGINE)  # data/tables.toml: the flags that matter and their spellings
# LLM API option keys (flattened) that tilefit reads; other keys are listed as ignored.
_READ = {"tensor_parallel_size", "pipeline_parallel_size", "moe_expert_parallel_size",
         "moe_tensor_parallel_size", "enable_attention_dp", "max_batch_size", "max_num_tokens",
         "max_seq_len", "kv_cache_config.free_gpu_memory_fraction", "kv_cache_config.dtype",
         "cuda_graph_config.batch_sizes", "cuda_graph_config.max_batch_size", "moe_config.backend",
         "moe_config.disable_finalize_fusion", "pytorch_backend_config.moe_backend",
         "cuda_graph_batch_sizes", "use_cuda_graph", "pytorch_backend_config.use_cuda_graph"}


def _int(options: dict[str, Any], key: str, default: int | None) -> int | None:
    value = options.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            return int(str(value))
        except ValueError:
            raise UsageError(f"TensorRT-LLM option {key}: expected an integer, got {value!r}") from None
    return value


def layout_of(tp: int = 1, ep: int | None = None, moe_tp: int | None = None, *,
              attention_dp: bool = False, pp: int = 1) -> Parallel:
    """TensorRT-LLM's mapping: moe_expert_parallel_size x moe_tensor_parallel_size = tp_size (with
    neither given MoE runs TP tp_size); enable_attention_dp makes attention DP over the tp ranks."""
    if tp < 1 or pp < 1:
        raise UsageError(f"TensorRT-LLM tp_size and pp_size must be >= 1, got {tp} and {pp}")
    if ep is None and moe_tp is None:
        ep, moe_tp = 1, tp
    elif ep is None:
        ep = tp // moe_tp if moe_tp and tp % moe_tp == 0 else 0
    elif moe_tp is None:
        moe_tp = tp // ep if ep and tp % ep == 0 else 0
    if not ep or not moe_tp or ep * moe_tp != tp:
        raise UsageError(f"TensorRT-LLM needs moe_expert_parallel_size x moe_tensor_parallel_size = "
                         f"tensor_parallel_size ({tp}); got ep {ep}, moe tp {moe_tp}")
    notes = (f"enable_attention_dp: attention runs DP{tp} (TP1) over the {tp} ranks",) if attention_dp else ()
    return Parallel(Layout(tp=moe_tp, ep=ep, dp=tp if attention_dp else 1), tp * pp, 1, notes)


def build(args: tuple[str, ...], env: tuple[tuple[str, str], ...], read_file=None) -> LaunchSpec:
    p = parse_args(args, TABLE, ENGINE, abbrev=False)
    if not p.positionals:
        raise UsageError("the trtllm-serve command names no model: `trtllm-serve MODEL ...`")
    options: dict[str, Any] = {k: v for k, v in p.values.items() if k not in ("options", "backend")}
    notes = list(p.notes)
    ignored = list(p.ignored)
    if "options" in p.values:
        path = str(p.values["options"])
        from_file = flatten(read_options(path, read_file))
        options.update(from_file)  # the YAML overrides the command line
        ignored += [f"{k} (in {path})" for k in from_file if k not in _READ]
        notes.append(f"LLM API options read from {path}")
    pp = _int(options, "pipeline_parallel_size", 1) or 1
    par = layout_of(_int(options, "tensor_parallel_size", 1) or 1,
                    _int(options, "moe_expert_parallel_size", None),
                    _int(options, "moe_tensor_parallel_size", None),
                    attention_dp=bool(options.get("enable_attention_dp", False)), pp=pp)
    notes += par.notes
    layout = par.layout
    backend = options.get("moe_config.backend", options.get("pytorch_backend_config.moe_backend"))
    graph_sizes = options.get("cuda_graph_config.batch_sizes", options.get("cuda_graph_batch_sizes"))
    extra = tuple((k, str(options[k])) for k in ("moe_config.disable_finalize_fusion",) if k in options)
    fraction = options.get("kv_cache_config.free_gpu_memory_fraction")
    settings = LaunchSettings(
        moe_backend=str(backend) if backend is not None else None,
        kv_cache_dtype=options.get("kv_cache_config.dtype"),
        mem_fraction=float(fraction) if fraction is not None else None,
        mem_fraction_kind="free" if fraction is not None else None,
        max_running_requests=_int(options, "max_batch_size", None),
        context_length=_int(options, "max_seq_len", None),
        chunked_prefill_size=_int(options, "max_num_tokens", None),
        cuda_graph_batch_sizes=tuple(int(x) for x in graph_sizes) if graph_sizes else None,
        cuda_graph_max_bs=_int(options, "cuda_graph_config.max_batch_size", None),
        extra=extra)
    return LaunchSpec(ENGINE, p.positionals[0], layout, par.gpus, settings, env, tuple(ignored),
                      tuple(p.unknown) + tuple(p.positionals[1:]), tuple(args), pipeline=pp,
                      notes=tuple(notes))
