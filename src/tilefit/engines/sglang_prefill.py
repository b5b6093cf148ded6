"""SGLang's prefill CUDA graphs: up to how many tokens a prefill (extend) batch runs the MoE layers
inside a captured CUDA graph, for a release, a model and the launch flags. Read from the sglang
wheels 0.5.10-0.5.23 (every release, .post1 builds included); paths below are inside the package.

- Default on CUDA in every release read: 0.5.10-0.5.13 the torch.compile "piecewise" graph
  (srt/server_args.py 0.5.10 `disable_piecewise_cuda_graph: bool = False`, l.637); 0.5.14 the same
  as backend `tc_piecewise` (srt/model_executor/cuda_graph_config.py l.91); from 0.5.15 the
  "breakable" graph (default_prefill_backend, 0.5.15 l.95-101; 0.5.23 l.119-123).
- The fused-MoE Triton kernel runs inside the captured pieces: the graph is split (piecewise) or
  broken (breakable) at attention, not at the MoE layer (piecewise: SPLIT_OPS in
  compilation/compilation_config.py, the MoE a custom op `moe_forward_piecewise_cuda_graph_impl`,
  layers/moe/fused_moe_triton/layer.py 0.5.10 l.1148; breakable: `eager_on_graph` wraps attention
  only, radix_attention.py 0.5.23 l.187). DeepEP all-to-all runs the MoE eagerly (not followed:
  with it a prefill batch is timed as eager, see `_AUTO_OFF`).
- A batch of N tokens replays the smallest captured size >= N (zero-padded, so the MoE runs the
  padded count); larger than the largest captured size runs eagerly (piecewise_cuda_graph_runner.py
  0.5.10 l.428; 0.5.23 l.1414).
- Captured sizes: 4-32 step 4, 48-256 step 16, 288-512 step 32, 576-1024 step 64, 1280-4096 step
  256, then step 512, up to the maximum (0.5.10 `_generate_piecewise_cuda_graph_tokens` l.1397;
  0.5.23 arg_groups/cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes l.480-497).
- Maximum: explicit (--piecewise-cuda-graph-tokens / -max-tokens to 0.5.19; --cuda-graph-bs-prefill /
  --cuda-graph-max-bs-prefill from 0.5.14), else chunked_prefill_size; MLA models 2048
  (0.5.10 server_args.py l.1258-1261 ... 0.5.19 memory_hook.py l.190-192, through 0.5.22), from
  0.5.23 min(8192, chunked_prefill_size) (memory_hook.py l.236-238).
- Off by flag: --disable-piecewise-cuda-graph (0.5.10-0.5.19), --disable-prefill-cuda-graph and
  --cuda-graph-backend-prefill disabled (0.5.14+), --disable-cuda-graph from 0.5.14 only (before,
  it left the piecewise graph on: model_runner.py 0.5.10 l.673). An explicit
  --cuda-graph-backend-prefill skips the automatic rules (server_args.py 0.5.14 l.2990).
- Off automatically (`_AUTO_OFF`): piecewise (0.5.10 _handle_piecewise_cuda_graph l.1078-1139):
  DSA models (DeepseekV32, GlmMoeDsa) to 0.5.12 and linear-attention hybrids (Qwen3Next) by
  architecture, DP attention, torch.compile, pipeline parallelism, an MoE all-to-all backend,
  speculative decoding (0.5.10), EPLB; breakable (0.5.15 server_args.py l.3341, 0.5.17 l.4452,
  0.5.18 l.4666, from 0.5.19 arg_groups/cuda_graph_hook.py): MLA (0.5.15-0.5.16; 0.5.17 MLA
  without DSA; allowed from 0.5.18), DP attention (0.5.15-0.5.16), an all-to-all backend (0.5.15-
  0.5.16 any; from 0.5.17 other than deepep/megamoe/flashinfer), two-batch overlap (0.5.17+),
  decode context parallelism (0.5.16+), pipeline parallelism (0.5.19+), the PD roles (see
  `_AUTO_OFF`); --deepep-mode normal turns both decode and prefill graphs off (0.5.14+;
  moe_hook.py l.383 in 0.5.23), after the memory settings are sized.
- `configured_sizes` gives the sizes the memory settings count (memory/sglang_reserve.py).
Not followed: LoRA, multimodal models, --cuda-graph-config JSON, DeepSeek-V4, and in
`prefill_graphs` the context-length cap of 0.5.13-0.5.16 and DP attention from 0.5.17 (graphs per
DP rank, the MoE on the gathered tokens): those give no prefill maximum there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tilefit.engines.types import flag_on, parse_version

V = tuple[int, int, int]
FIRST_READ, NEWEST_READ = (0, 5, 10), (0, 5, 23)
BREAKABLE_SINCE = (0, 5, 15)
EXPLICIT_BACKEND_SINCE = (0, 5, 14)  # --cuda-graph-backend-prefill, --disable-prefill-cuda-graph
LEGACY_FLAGS_UNTIL = (0, 5, 19)  # --disable-piecewise-cuda-graph, --piecewise-cuda-graph-*
MLA_CAP_OLD, MLA_CAP_NEW, MLA_CAP_NEW_SINCE = 2048, 8192, (0, 5, 23)
ALLOWED_A2A = ("none", "deepep", "megamoe", "flashinfer")  # breakable, from 0.5.17
DEEPEP_ALIGN_SINCE, DEEPEP_DEFAULT_MAX = (0, 5, 17), 2048  # DeepEP's multiple-of-8 breakable grid
CONTEXT_CLAMP = ((0, 5, 13), (0, 5, 16))  # maxima clamped to --context-length at resolution


def capture_sizes(max_tokens: int) -> list[int]:
    """The token counts SGLang captures for a prefill maximum, ascending."""
    grid = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
            *range(1280, 4097, 256), *range(4608, max(max_tokens, 4608) + 1, 512)]
    return [s for s in grid if s <= max_tokens]


@dataclass(frozen=True, slots=True)
class Model:
    """What the rules read of the model: MLA attention, a DSA indexer, linear-attention layers."""

    mla: bool
    dsa: bool
    linear_attention: bool


@dataclass(frozen=True, slots=True)
class PrefillGraphs:
    """Prefill batches of up to `max_tokens` tokens run inside a CUDA graph (0: none); `why`."""

    max_tokens: int
    why: str


def _v(lo: V | None = None, hi: V | None = None) -> Callable[[V], bool]:
    return lambda v: (lo is None or v >= lo) and (hi is None or v <= hi)


def _a2a(flags: Mapping[str, str]) -> str:
    return str(flags.get("moe_a2a_backend") or "none").lower()


def pd_role(flags: Mapping[str, str]) -> str:
    """The PD disaggregation role a launch gives ("prefill", "decode"; "null" without one)."""
    return str(flags.get("disaggregation_mode") or "null").lower()


def prefill_backend(flags: Mapping[str, str]) -> str:
    """The prefill graph backend the flags name: --cuda-graph-backend-prefill, else
    --enforce-piecewise-cuda-graph's tc_piecewise, else the default breakable (0.5.15+)."""
    return str(flags.get("cuda_graph_backend_prefill") or "").lower() or (
        "tc_piecewise" if flag_on(flags, "enforce_piecewise_cuda_graph") else "breakable")


# (versions, predicate(model, flags, pp), what sglang names): the automatic rules, first hit wins.
_AUTO_OFF: tuple[tuple[Callable[[V], bool], Callable[[Model, Mapping[str, str], int], bool], str], ...] = (
    (_v(FIRST_READ, (0, 5, 12)), lambda m, f, pp: m.dsa, "a DSA model (architecture blacklist)"),
    (_v(FIRST_READ, (0, 5, 14)), lambda m, f, pp: m.linear_attention,
     "a linear-attention hybrid (architecture blacklist)"),
    (_v(FIRST_READ, (0, 5, 14)), lambda m, f, pp: flag_on(f, "enable_dp_attention"), "DP attention"),
    (_v(FIRST_READ, (0, 5, 14)), lambda m, f, pp: flag_on(f, "enable_torch_compile"), "torch.compile"),
    (_v(FIRST_READ, (0, 5, 14)), lambda m, f, pp: pp > 1, "pipeline parallelism"),
    (_v(FIRST_READ, (0, 5, 14)), lambda m, f, pp: _a2a(f) != "none", "an MoE all-to-all backend"),
    (_v(FIRST_READ, FIRST_READ), lambda m, f, pp: bool(f.get("speculative_algorithm")),
     "speculative decoding"),
    (_v(FIRST_READ, (0, 5, 14)), lambda m, f, pp: flag_on(f, "enable_eplb"), "EPLB"),
    (_v(BREAKABLE_SINCE, (0, 5, 16)), lambda m, f, pp: m.mla, "MLA attention"),
    (_v((0, 5, 17), (0, 5, 17)), lambda m, f, pp: m.mla and not m.dsa, "MLA attention (non-DSA)"),
    (_v(BREAKABLE_SINCE, (0, 5, 16)), lambda m, f, pp: flag_on(f, "enable_dp_attention"), "DP attention"),
    (_v(BREAKABLE_SINCE, (0, 5, 16)), lambda m, f, pp: _a2a(f) != "none", "MoE A2A backend"),
    (_v((0, 5, 17)), lambda m, f, pp: _a2a(f) not in ALLOWED_A2A, "unvalidated a2a backend"),
    (_v((0, 5, 17)), lambda m, f, pp: flag_on(f, "enable_two_batch_overlap"), "two-batch overlap"),
    (_v((0, 5, 16)), lambda m, f, pp: int(f.get("dcp_size") or 1) > 1,
     "decode context parallel (dcp_size > 1)"),
    (_v((0, 5, 19)), lambda m, f, pp: pp > 1, "pipeline parallelism"),
    # PD roles: piecewise off for either role (0.5.10 server_args.py l.1129, 0.5.14 l.3041); the
    # prefill role sets --disable-cuda-graph (arg_groups/pd_disaggregation_hook.py 0.5.14 l.77,
    # before the graph config; through 0.5.18); from 0.5.16 the decode role turns prefill graphs
    # off (_apply_cuda_graph_disaggregation_roles, 0.5.16 l.3680; 0.5.23 cuda_graph_hook.py l.557).
    (_v(FIRST_READ, (0, 5, 14)), lambda m, f, pp: pd_role(f) != "null", "PD disaggregation"),
    (_v((0, 5, 15), (0, 5, 18)), lambda m, f, pp: pd_role(f) == "prefill",
     "the PD prefill role (sglang sets --disable-cuda-graph)"),
    (_v((0, 5, 16)), lambda m, f, pp: pd_role(f) == "decode", "the PD decode role"),
)


def off_reason(version: str | None, model: Model, flags: Mapping[str, str], *, pp: int,
               disable_cuda_graph: bool, at_memory_sizing: bool = False) -> str | None:
    """Why SGLang's prefill CUDA-graph backend is off once a release resolves these launch flags
    (None: it is on); `at_memory_sizing`: as it stands when sglang sizes its memory reserve,
    before --deepep-mode normal turns the graphs off. DP attention from 0.5.17 leaves the backend
    on (see `prefill_graphs` for what that captures)."""
    v = parse_version(version) if version else NEWEST_READ
    name = _name(version)
    if v < FIRST_READ:
        return f"{name}'s prefill graphs were not read (0.5.10-0.5.23 were)"
    backend = str(flags.get("cuda_graph_backend_prefill") or "").lower()
    normal = str(flags.get("deepep_mode") or "").lower() == "normal"
    if normal and v >= EXPLICIT_BACKEND_SINCE and not at_memory_sizing:
        return f"{name} turns CUDA graphs off with --deepep-mode normal"
    off_flags = [f for f, since_v in (("disable_prefill_cuda_graph", EXPLICIT_BACKEND_SINCE),
                                      ("disable_piecewise_cuda_graph", FIRST_READ))
                 if flag_on(flags, f) and v >= since_v]
    if disable_cuda_graph and v >= EXPLICIT_BACKEND_SINCE:
        off_flags.append("disable_cuda_graph")
    if off_flags or backend == "disabled":
        given = off_flags[0] if off_flags else "cuda_graph_backend_prefill disabled"
        return f"--{given.replace('_', '-')} turns {name}'s prefill graphs off"
    # An explicit backend skips the rules, as --enforce-piecewise-cuda-graph did (0.5.10 l.1080;
    # from 0.5.14 an alias of --cuda-graph-backend-prefill tc_piecewise, server_args.py l.6398).
    explicit = (backend and v >= EXPLICIT_BACKEND_SINCE) or (
        flag_on(flags, "enforce_piecewise_cuda_graph") and v <= LEGACY_FLAGS_UNTIL)
    if not explicit:
        for versions, applies, what in _AUTO_OFF:
            if versions(v) and applies(model, flags, pp):
                return f"{name} runs prefill without CUDA graphs with {what}"
    return None


def prefill_graphs(version: str | None, model: Model, flags: Mapping[str, str], *, pp: int,
                   chunked_prefill: int | None, disable_cuda_graph: bool) -> PrefillGraphs:
    """SGLang's prefill CUDA-graph maximum for a release (None: the newest read), a model and the
    launch flags by sglang's own names (LaunchSpec.flags(); {} for the defaults)."""
    v = parse_version(version) if version else NEWEST_READ
    name = _name(version)
    why_off = off_reason(version, model, flags, pp=pp, disable_cuda_graph=disable_cuda_graph)
    if why_off:
        return PrefillGraphs(0, why_off)
    if flag_on(flags, "enable_dp_attention"):
        # sglang splits the prefill chunk over the DP ranks and re-clamps the graphs to it
        # (arg_groups/parallel_hook.py l.326-345, 0.5.23), but the MoE then runs on the tokens
        # gathered from every rank: which MoE batch a graph holds is not modelled here.
        return PrefillGraphs(0, f"{name} captures prefill graphs per DP-attention rank; the MoE "
                                f"batch they hold is not followed (decode graphs only)")
    sizes = _explicit_sizes(flags, v)
    top_how = None if sizes else _maximum(v, model, flags, chunked_prefill)
    if not sizes and top_how is None:
        return PrefillGraphs(0, f"{name}: chunked prefill is off, so no prefill graph maximum is known")
    how = "the launch command's prefill graph sizes" if sizes else top_how[1]  # type: ignore[index]
    captured = sizes or capture_sizes(top_how[0])  # type: ignore[index]
    largest = max(captured, default=0)
    kind = "breakable" if v >= BREAKABLE_SINCE else "piecewise"
    return PrefillGraphs(largest, f"{name} captures prefill in {kind} CUDA graphs up to {largest} "
                                  f"tokens ({how})")


def configured_sizes(version: str | None, model: Model, flags: Mapping[str, str], *,
                     chunked_prefill: int | None, context_length: int | None = None) -> tuple[int, ...]:
    """The prefill capture sizes a release holds when it sizes its memory reserve (its graph
    backend on): `prefill_graphs`'s maximum, clamped to an explicit --context-length in 0.5.13-
    0.5.16 (0.5.13 server_args.py l.1582 for the default maximum only; 0.5.14 l.3264 for any), and
    with DeepEP's breakable graphs from 0.5.17 the 2048-token grid rounded up to multiples of 8
    (_apply_deepep_adjustments, 0.5.17 l.4251; 0.5.23 cuda_graph_hook.py l.315), set before the
    maximum follows the chunk. Sizes are not re-clamped for DP attention: that comes later."""
    v = parse_version(version) if version else NEWEST_READ
    sizes = _explicit_sizes(flags, v)
    explicit_max = _explicit_maximum(flags, v)
    deepep = v >= DEEPEP_ALIGN_SINCE and _a2a(flags) == "deepep" and prefill_backend(flags) == "breakable"
    if deepep:
        grid = sizes or capture_sizes(explicit_max or DEEPEP_DEFAULT_MAX)
        aligned = sorted({(s + 7) // 8 * 8 for s in grid})
        return tuple(aligned if aligned != sorted(grid) else grid)
    if sizes:
        return tuple(sizes)
    top_how = _maximum(v, model, flags, chunked_prefill)
    if top_how is None:
        return ()
    top = top_how[0]
    clamps = CONTEXT_CLAMP[0] <= v <= CONTEXT_CLAMP[1] and (explicit_max is None or v > CONTEXT_CLAMP[0])
    if context_length and clamps:
        top = min(top, context_length)
    return tuple(capture_sizes(top))


def _name(version: str | None) -> str:
    return f"sglang {version}" if version else "sglang (as read in 0.5.23)"


def _explicit_maximum(flags: Mapping[str, str], v: V) -> int | None:
    if flags.get("cuda_graph_max_bs_prefill"):
        return int(flags["cuda_graph_max_bs_prefill"])
    if flags.get("piecewise_cuda_graph_max_tokens") and v <= LEGACY_FLAGS_UNTIL:
        return int(flags["piecewise_cuda_graph_max_tokens"])
    return None


def _maximum(v: V, model: Model, flags: Mapping[str, str], chunked_prefill: int | None
             ) -> tuple[int, str] | None:
    """(the prefill graphs' largest size, how it was chosen); None when chunked prefill is off."""
    explicit = _explicit_maximum(flags, v)
    if explicit is not None:
        return explicit, "the launch command's prefill maximum"
    if model.mla:
        if v >= MLA_CAP_NEW_SINCE:
            return min(MLA_CAP_NEW, chunked_prefill or 0), f"MLA: min(8192, chunked_prefill_size {chunked_prefill})"
        return MLA_CAP_OLD, "MLA: 2048"
    if chunked_prefill and chunked_prefill > 0:
        return chunked_prefill, f"chunked_prefill_size {chunked_prefill}"
    return None


def _explicit_sizes(flags: Mapping[str, str], v: V) -> list[int]:
    text = flags.get("cuda_graph_bs_prefill") or (
        flags.get("piecewise_cuda_graph_tokens") if v <= LEGACY_FLAGS_UNTIL else None) or ""
    return [int(t) for t in re.findall(r"\d+", str(text))]
