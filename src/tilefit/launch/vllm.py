"""vLLM's launch flags -> LaunchSpec (engine/arg_utils.py and entrypoints of the vllm wheels
0.9.0-0.33.0; the MoE layout from fused_moe/config.py FusedMoEParallelConfig.make).

vLLM uses tensor x data x pipeline x prefill-context parallel GPUs (config/parallel.py world_size
= pp x tp x pcp per DP rank, 0.12.0-0.33.0). Its MoE layers flatten TP across DP and PCP: without
--enable-expert-parallel they run TP over all tp x dp x pcp GPUs; with it, EP over all of them
(TP 1; FusedMoEParallelConfig.flatten_tp_across_dp_and_pcp, 0.12.0-0.33.0). PCP ranks each hold
the whole attention and split a prefill's tokens: tilefit counts them as attention replicas (DP).
"""

from __future__ import annotations

from tilefit.errors import UsageError
from tilefit.launch.flags import parse_args, table
from tilefit.launch.options_file import read_options
from tilefit.launch.types import LaunchSettings, LaunchSpec, Parallel
from tilefit.layout.plan import Layout

ENGINE = "vllm"

TABLE = table(ENGINE)  # data/tables.toml: the flags that matter and their spellings


def layout_of(tp: int = 1, dp: int = 1, *, expert_parallel: bool = False, pp: int = 1,
              pcp: int = 1) -> Parallel:
    """vLLM's reading of -tp/-dp/-pp/-pcp and --enable-expert-parallel (FusedMoEParallelConfig.make)."""
    for name, value in (("--tensor-parallel-size", tp), ("--data-parallel-size", dp),
                        ("--pipeline-parallel-size", pp), ("--prefill-context-parallel-size", pcp)):
        if value < 1:
            raise UsageError(f"vLLM {name} must be >= 1, got {value}")
    moe_gpus = tp * dp * pcp
    over = f"tp {tp} x dp {dp}" + (f" x pcp {pcp}" if pcp > 1 else "")
    notes: tuple[str, ...] = (f"--prefill-context-parallel-size {pcp}: {pcp} ranks per DP rank each "
                              f"hold the whole attention and split a prefill's tokens (counted as "
                              f"attention replicas)",) if pcp > 1 else ()
    if expert_parallel and moe_gpus > 1:
        return Parallel(Layout(tp=1, ep=moe_gpus, dp=dp * pcp), moe_gpus * pp, 1, notes + (
            f"--enable-expert-parallel: MoE runs EP{moe_gpus} over all {over} GPUs",))
    if dp * pcp > 1:
        notes += (f"without --enable-expert-parallel vLLM flattens MoE TP over {over}: TP{moe_gpus}",)
    return Parallel(Layout(tp=moe_gpus, ep=1, dp=dp * pcp), moe_gpus * pp, 1, notes)


def build(args: tuple[str, ...], env: tuple[tuple[str, str], ...], read_file=None) -> LaunchSpec:
    p = parse_args(args, TABLE, ENGINE, underscores=True)
    v = p.values
    notes = list(p.notes)
    if "config" in v:
        # vLLM's --config YAML holds the same options; the command line wins over it.
        from_file = read_options(str(v["config"]), read_file)
        words: list[str] = []
        for key, value in from_file.items():
            flag = "--" + str(key).replace("_", "-")
            if isinstance(value, bool):
                words += [flag] if value else []
            elif isinstance(value, list):
                words += [flag] + [str(x) for x in value]
            else:
                words += [flag, str(value)]
        file_p = parse_args(words, TABLE, ENGINE, underscores=True)
        v = {**file_p.values, **v}
        p.ignored += file_p.ignored
        p.unknown += [f"{u} (in {v['config']})" for u in file_p.unknown]
        notes.append(f"options read from --config {v['config']}")
    model = v.get("model") or (p.positionals[0] if p.positionals else None)
    if not model:
        raise UsageError("the vLLM command names no model: `vllm serve MODEL` or --model MODEL")
    pp = int(v.get("pp", 1))
    par = layout_of(int(v.get("tp", 1)), int(v.get("dp", 1)), expert_parallel=bool(v.get("ep")), pp=pp,
                    pcp=int(v.get("pcp", 1)))
    notes += par.notes
    layout = par.layout
    # What engine rules read beyond the layout, by vLLM's own names (engines/a2a.py: the all2all
    # backend runs only with data or prefill-context parallel ranks).
    extra = tuple((name, str(v[key])) for key, name in (
        ("all2all", "all2all_backend"), ("dp", "data_parallel_size"),
        ("pcp", "prefill_context_parallel_size")) if v.get(key) not in (None, "", 1, "1"))
    settings = LaunchSettings.from_values(v, "utilization", extra=extra,
                                          **_compilation(v.get("compilation")))
    extra_pos = p.positionals[1:] if not v.get("model") else p.positionals
    return LaunchSpec(ENGINE, str(model), layout, par.gpus, settings, env, tuple(p.ignored),
                      tuple(p.unknown) + tuple(extra_pos), tuple(args), pipeline=pp,
                      notes=tuple(notes))


def _compilation(text: object) -> dict[str, object]:
    """CUDA-graph settings from --compilation-config JSON (an -O level like '3' has none)."""
    if not isinstance(text, str) or not text.strip().startswith("{"):
        return {}
    import json

    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--compilation-config is not valid JSON ({e.msg})") from None
    out: dict[str, object] = {}
    sizes = cfg.get("cudagraph_capture_sizes")
    if isinstance(sizes, list) and all(isinstance(x, int) for x in sizes):
        out["cuda_graph_batch_sizes"] = tuple(sizes)
    if isinstance(cfg.get("max_cudagraph_capture_size"), int):
        out["cuda_graph_max_bs"] = cfg["max_cudagraph_capture_size"]
    if str(cfg.get("cudagraph_mode", "")).upper() == "NONE":
        out["disable_cuda_graph"] = True
    return out
