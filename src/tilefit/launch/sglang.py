"""sglang's launch flags -> LaunchSpec (server_args.py and arg_groups/ of the sglang wheels
0.5.10-0.5.23; the legacy --enable-*-moe switches from 0.4.10.post2).

sglang's --tp N is the GPU count of one model replica; --ep M carves expert parallelism out of
that group (MoE runs EP M x TP N/M on the same N GPUs); --dp D with --enable-dp-attention splits
attention inside those GPUs, without it --dp D starts D replicas of N GPUs each.
"""

from __future__ import annotations

from tilefit.errors import UsageError
from tilefit.launch.flags import parse_args, table
from tilefit.launch.types import LaunchSettings, LaunchSpec, Parallel
from tilefit.layout.plan import Layout

ENGINE = "sglang"
# All-to-all backends that set ep_size = tp_size (arg_groups/overrides.py _A2A_EP_SPANNING_BACKENDS
# in 0.5.23; server_args.py _handle_a2a_moe for deepep/mooncake/nixl in 0.5.10).
EP_SPANNING_A2A = frozenset({"deepep", "deepep_v2", "megamoe", "mooncake", "nixl", "ascend_fuseep",
                             "flashinfer", "flashinfer_megamoe", "mori", "pplx"})

TABLE = table(ENGINE)  # data/tables.toml: the flags that matter and their spellings
# Flags the prefill CUDA-graph rules read (engines/sglang_prefill.py), named as sglang names them.
PREFILL_FLAGS = ("disable_prefill_cuda_graph", "disable_piecewise_cuda_graph",
                 "cuda_graph_backend_prefill", "cuda_graph_max_bs_prefill",
                 "piecewise_cuda_graph_max_tokens", "cuda_graph_bs_prefill",
                 "piecewise_cuda_graph_tokens", "enable_two_batch_overlap", "enable_torch_compile",
                 "enable_eplb", "speculative_algorithm", "dcp_size", "deepep_mode",
                 "enforce_piecewise_cuda_graph")
# Flags sglang's default --mem-fraction-static reads besides those (memory/sglang_reserve.py).
MEMORY_FLAGS = ("disaggregation_mode", "max_prefill_tokens", "speculative_num_draft_tokens",
                "disable_decode_cuda_graph", "cuda_graph_backend_decode", "enable_memory_saver",
                "enable_piecewise_cuda_graph")
# Flags sglang's shared-expert fusion reads (engines/sglang_shared.py).
FUSION_FLAGS = ("disable_shared_experts_fusion", "enforce_shared_experts_fusion",
                "enable_single_batch_overlap")
# Flags the EP zero rows read (engines/sglang.py ep_zero_rows).
ZERO_ROW_FLAGS = ("enable_fused_moe_sum_all_reduce",)


def layout_of(tp: int = 1, ep: int = 1, dp: int = 1, *, dp_attention: bool = False,
              a2a: str | None = None, ep_spans_tp: bool = False, pp: int = 1, moe_dp: int = 1,
              lenient: bool = False) -> Parallel:
    """sglang's reading of --tp-size/--ep-size/--dp-size (+ --enable-dp-attention, the a2a backend).
    `lenient` (tilefit's own flags, not a launch command): --ep M with --tp 1 is read as --tp M --ep M,
    since sglang carves EP out of the TP group and rejects the literal reading."""
    notes: list[str] = []
    if ep_spans_tp or a2a in EP_SPANNING_A2A:
        why = f"--moe-a2a-backend {a2a}" if a2a in EP_SPANNING_A2A else "the legacy EP switch"
        if ep != tp:
            notes.append(f"{why} sets the EP size to the TP size ({tp})")
        ep = tp
    for name, value in (("--tp-size", tp), ("--ep-size", ep), ("--dp-size", dp), ("--pp-size", pp)):
        if value < 1:
            raise UsageError(f"sglang {name} must be >= 1, got {value}")
    if lenient and tp == 1 and ep > 1:
        notes.append(f"sglang carves --ep out of --tp: --ep {ep} alone is read as --tp {ep} --ep {ep} "
                     f"({ep} GPUs)")
        tp = ep
    if tp % ep:
        raise UsageError(f"sglang carves --ep-size out of --tp-size: {ep} does not divide {tp}")
    if moe_dp > 1:
        # model_runner_components/moe_ep_setup.py (0.5.23): moe_tp_size = tp_size // ep_size // moe_dp_size.
        if tp % (ep * moe_dp) or dp > 1:
            raise UsageError(f"sglang --moe-dp-size {moe_dp}: tilefit models it with --ep-size x --moe-dp-size "
                             f"dividing --tp-size and no --dp-size; got tp {tp}, ep {ep}, dp {dp}")
        notes.append(f"--moe-dp-size {moe_dp}: the MoE layers run in {moe_dp} data-parallel groups of "
                     f"{tp // moe_dp} GPUs (MoE TP{tp // ep // moe_dp} x EP{ep} each)")
        return Parallel(Layout(tp=tp // ep // moe_dp, ep=ep), tp * pp, 1, tuple(notes))
    if dp_attention and dp == 1:
        # server_args.py _handle_data_parallelism (0.5.10): dp_size 1 turns DP attention off.
        notes.append("--enable-dp-attention with --dp-size 1: sglang 0.5.x turns DP attention off "
                     "(sglang 0.4.1 set the DP size to the TP size by itself)")
        dp_attention = False
    if dp_attention and tp % dp:
        raise UsageError(f"sglang --enable-dp-attention splits the {tp} GPUs of --tp-size into "
                         f"--dp-size groups: {dp} does not divide {tp}")
    replicas = 1 if dp_attention else dp
    if ep > 1:
        notes.append(f"--ep-size {ep} is carved out of --tp-size {tp}: MoE runs EP{ep} x TP{tp // ep} "
                     f"on the same {tp} GPUs")
    if dp > 1:
        notes.append(f"--dp-size {dp} with --enable-dp-attention: attention TP{tp // dp} x DP{dp} inside "
                     f"the {tp} GPUs" if dp_attention else
                     f"--dp-size {dp} without --enable-dp-attention: {dp} replicas of {tp} GPUs each")
    layout = Layout(tp=tp // ep, ep=ep, dp=dp if dp_attention else 1)
    return Parallel(layout, tp * pp * replicas, replicas, tuple(notes))


def build(args: tuple[str, ...], env: tuple[tuple[str, str], ...]) -> LaunchSpec:
    p = parse_args(args, TABLE, ENGINE)
    v = p.values
    model = v.get("model") or (p.positionals[0] if p.positionals else None)
    if not model:
        raise UsageError("the sglang command names no model: add --model-path MODEL")
    pp, nodes = int(v.get("pp", 1)), int(v.get("nnodes", 1))
    a2a = v.get("a2a")
    # --attn-dp-size (0.5.22+) is the attention DP group count inside the TP group, as --dp-size is
    # with --enable-dp-attention (arg_groups/fields/parallel.py).
    attn_dp = int(v.get("attn_dp", 1))
    par = layout_of(int(v.get("tp", 1)), int(v.get("ep", 1)), attn_dp if attn_dp > 1 else int(v.get("dp", 1)),
                    dp_attention=bool(v.get("dp_attention")) or attn_dp > 1, a2a=str(a2a) if a2a else None,
                    ep_spans_tp=bool(v.get("legacy_ep") or v.get("legacy_deepep")), pp=pp,
                    moe_dp=int(v.get("moe_dp", 1)))
    notes = list(p.notes) + list(par.notes)
    layout, replicas = par.layout, par.replicas
    backend = v.get("moe_backend") or ("flashinfer_cutlass" if v.get("legacy_fi_cutlass") else None)
    # Other flags engine rules read, by sglang's own names (the prefill-graph rules among them).
    own = {"a2a": "moe_a2a_backend", "moe_dense_tp": "moe_dense_tp_size",
           **{k: k for k in PREFILL_FLAGS + MEMORY_FLAGS + FUSION_FLAGS + ZERO_ROW_FLAGS}}
    extra = tuple((own[k], _text(v[k])) for k in own if k in v and v[k] not in (None, False))
    if v.get("legacy_deepep") and not a2a:
        # --enable-deepep-moe selected DeepEPMoE (0.4.x), and from 0.4.10.post2 set
        # moe_a2a_backend = "deepep" itself (server_args.py l.292; 0.5.1 l.316).
        extra += (("moe_a2a_backend", "deepep"),)
    if v.get("dp_attention") or attn_dp > 1:
        extra += (("enable_dp_attention", "true"),)
    settings = LaunchSettings.from_values(
        v, "static", moe_backend=backend, flashinfer_autotune=False if v.get("no_autotune") else None,
        extra=extra)
    extra_pos = p.positionals[1:] if not v.get("model") else p.positionals
    return LaunchSpec(ENGINE, str(model), layout, par.gpus, settings, env,
                      tuple(p.ignored), tuple(p.unknown) + tuple(extra_pos), tuple(args),
                      replicas=replicas, pipeline=pp, nodes=nodes, notes=tuple(notes))


def _text(value: object) -> str:
    """A flag's value as LaunchSettings.extra holds it: ints lists space-separated, true for a switch."""
    if value is True:
        return "true"
    if isinstance(value, (tuple, list)):
        return " ".join(str(x) for x in value)
    return str(value)
