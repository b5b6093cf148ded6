"""sglang's default --mem-fraction-static: round((GPU MB - reserve) / GPU MB, 3), the reserve (MB =
MiB) held back for activations, parallel slack and CUDA graphs, as each release sizes it.
Flow: SglangMemory.defaults -> reserve(req, chunk, graph_bs) -> Reserve -> .fraction(gpu MB).

Read from the wheels (server_args.py _handle_gpu_memory_settings to 0.5.18; from 0.5.19
arg_groups/memory_hook.py handle_gpu_memory_settings with reserve_for_graph_mb and
reserve_for_deepep_a2a_mb, post_capture_kv_sizing_planned in arg_groups/overrides.py):
- every release: 512 + 1.5 x max(chunked_prefill_size, 2048) (max_prefill_tokens when chunked
  prefill is off) + tp x pp / 8 x 1024; at least 10 GiB on GPUs over 60 GiB.
- decode graphs: 2 x their largest batch; with DP attention 3 x batch x dp more, 4.5 x over a batch
  of 300. To 0.5.14 always (--disable-cuda-graph too: 0.5.10 server_args.py l.1290-1302, 0.5.14
  l.3285-3297); from 0.5.15 the 2 x batch only with decode graphs on, and neither on a PD prefill
  server (0.5.15 l.3639-3658; 0.5.23 memory_hook.py l.364-379), where the activation term counts
  max(running requests (else the graph batch) x draft tokens, 2048) on a PD decode server.
- prefill graphs, when the backend is on as the launch settings resolve (engines/sglang_prefill.py
  off_reason): 8 MB per captured size (configured_sizes), 1536 MB flat for MLA models, before the
  floor. Opt-in (--enable-piecewise-cuda-graph) before 0.5.10: + max_tokens // 4 after the floor in
  0.5.5.post3-0.5.6 (max_tokens default 4096; 0.5.6 l.856), // 8 in 0.5.7 (default the chunk;
  l.944), 8 MB per size before the floor in 0.5.8-0.5.9 (MLA 2048 tokens; 0.5.9 l.1044). Default
  on from 0.5.10 (0.5.10 l.1305-1311; 0.5.14 l.3300-3306; 0.5.15 l.3661-3670, not on a PD decode
  server; 0.5.23 memory_hook.py l.381-389). From 0.5.17 + 1 GiB for breakable graphs with DeepEP
  (0.5.17 l.4914-4920; 0.5.23 l.391-397).
- after the floor: speculative decoding 2 GiB (EAGLE-like; 0.5.4-0.5.9), 4 GiB (0.5.10-0.5.13),
  6 GiB STANDALONE, none for NGRAM (0.5.10 l.1316-1322; gone in 0.5.14); DeepEP 2 GiB with decode
  graphs on, not on a PD prefill server (0.5.15 l.3678-3684; 0.5.23 memory_hook.py l.402-414).
- post-capture KV sizing (0.5.16+, off unless SGLANG_ENABLE_POST_CAPTURE_KV_SIZING is set; 0.5.23
  sets it only for Muse Spark): the reserve is 512 (0.5.16-0.5.17) or 1536 (0.5.18+) + tp x pp /
  8 x 1024, no floor (0.5.16 server_args.py l.4055-4059 and l.4105; 0.5.18 l.4949-4953;
  0.5.23 memory_hook.py l.289-295, overrides.py l.1791-1862). It needs a non-MLA model, dcp 1, no
  memory saver, no fp4 KV cache (0.5.16-0.5.21), graphs on for the server's role and (0.5.17+) the
  prefill chunk captured whole; in 0.5.16 no DP attention.
- the decode graph batch is capped at --max-running-requests from 0.5.22 (memory_hook.py l.182-188).
Not followed: multimodal models (sglang lowers the fraction for the vision tower), LoRA,
--max-total-tokens and Llama-2 prefill caps, hierarchical cache, XPU/NPU/ROCm, DeepSeek-V4.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilefit.engines.sglang_prefill import (
    Model, capture_sizes, configured_sizes, off_reason, pd_role, prefill_backend)
from tilefit.memory.base import MemoryRequest, since

BASE_MB, PER_TOKEN_MB, MIN_ACTIVATION_TOKENS = 512, 1.5, 2048
DEFAULT_MAX_PREFILL_TOKENS = 16384  # --max-prefill-tokens, counted when chunked prefill is off
FLOOR_MB, FLOOR_ABOVE_MB = 10 * 1024, 60 * 1024
GRAPH_MB_PER_BS, DP_MB_PER_BS, DP_EXTRA_MB_PER_BS, DP_EXTRA_ABOVE_BS = 2, 3, 1.5, 300
PREFILL_MB_PER_SIZE, PREFILL_MLA_MB, BREAKABLE_DEEPEP_MB, DEEPEP_MB = 8, 1536, 1024, 2048
SPECULATIVE_MB = {"STANDALONE": 6144, "NGRAM": 0}  # others: EAGLE-like
# The reserve's parts for the prefill graphs: sglang's own estimate of what capturing them takes
# (SglangMemory counts it outside the pool whatever the fraction).
PREFILL_GRAPHS, PREFILL_BREAKABLE_DEEPEP = "prefill graphs", "breakable graphs with DeepEP"
PREFILL_PARTS = (PREFILL_GRAPHS, PREFILL_BREAKABLE_DEEPEP)
OPT_IN_DEFAULT_MAX_TOKENS = 4096  # --piecewise-cuda-graph-max-tokens default, 0.5.5.post3-0.5.6

# First release of each rule (tilefit's version parser drops .post suffixes, so 0.5.5.post3's
# opt-in reserve is placed at 0.5.6).
OPT_IN_QUARTER, OPT_IN_EIGHTH, OPT_IN_PER_SIZE = (0, 5, 6), (0, 5, 7), (0, 5, 8)
GRID_WITH_576 = (0, 5, 9)  # 0.5.8's piecewise grid started its 64-step run at 640
DEFAULT_ON = (0, 5, 10)
SPECULATIVE_4GB, SPECULATIVE_GONE = (0, 5, 10), (0, 5, 14)
ROLE_AWARE = (0, 5, 15)  # decode-graph and DP terms follow the PD role; DeepEP 2 GiB
POST_CAPTURE, POST_CAPTURE_1536 = (0, 5, 16), (0, 5, 18)
BREAKABLE_DEEPEP, POST_CAPTURE_WHOLE_CHUNK = (0, 5, 17), (0, 5, 17)
POST_CAPTURE_FP4_GONE = (0, 5, 22)
RUNNING_CAP = (0, 5, 22)  # decode graph batch capped at --max-running-requests


@dataclass(frozen=True, slots=True)
class Reserve:
    """The MB sglang holds back from --mem-fraction-static, part by part in the order it adds them."""

    parts: tuple[tuple[str, float], ...]
    rule: str  # which of the release's rules applied

    @property
    def mb(self) -> float:
        return sum(mb for _, mb in self.parts)

    def fraction(self, gpu_mb: float) -> float:
        return round((gpu_mb - self.mb) / gpu_mb, 3)


def reserve(req: MemoryRequest, gpu_mb: float, chunk: int, graph_bs: int) -> Reserve:
    """The reserve the request's release (None: the newest read, 0.5.23) computes for a GPU of
    `gpu_mb` MB, the prefill chunk and decode graph batch it resolved (before DP attention splits
    the chunk)."""
    v, s, p = req.version, req.settings, req.parallel
    launch, flags = s.launch, s.launch.mapping()
    role = pd_role(flags)
    att = req.arch.attention
    model = Model(att.is_mla, att.is_mla and att.has_indexer, req.arch.linear_attention)
    decode_on = not (launch.disable_cuda_graph or launch.on("disable_decode_cuda_graph")
                     or str(flags.get("cuda_graph_backend_decode") or "").lower() == "disabled")
    sizes, prefill_on = _prefill(req, model, chunk)
    parallel = ("tp x pp / 8 GB", p.tp * launch.pipeline / 8 * 1024)
    if since(v, POST_CAPTURE) and _post_capture(req, model, role, decode_on, prefill_on, sizes, chunk):
        base = 1536 if since(v, POST_CAPTURE_1536) else BASE_MB
        return Reserve((("post-capture base", base), parallel),
                       "post-capture KV sizing (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING)")
    parts = [("base + activations", BASE_MB + PER_TOKEN_MB * _activation_tokens(req, role, chunk, graph_bs)),
             parallel]
    role_aware = since(v, ROLE_AWARE)
    if not role_aware or (role != "prefill" and decode_on):
        parts.append(("decode graphs", GRAPH_MB_PER_BS * graph_bs))
    if p.dp_attention and (not role_aware or role != "prefill"):
        extra = DP_EXTRA_MB_PER_BS if graph_bs > DP_EXTRA_ABOVE_BS else 0
        parts.append(("DP attention", graph_bs * p.dp * (DP_MB_PER_BS + extra)))
    opt_in_after = 0.0
    if prefill_on and (not role_aware or role != "decode"):
        if not since(v, OPT_IN_PER_SIZE):  # 0.5.5.post3-0.5.7: a share of the maximum, after the floor
            top = int(flags.get("piecewise_cuda_graph_max_tokens") or
                      (chunk if since(v, OPT_IN_EIGHTH) else OPT_IN_DEFAULT_MAX_TOKENS))
            opt_in_after = top // 8 if since(v, OPT_IN_EIGHTH) else top // 4
        else:
            parts.append((PREFILL_GRAPHS, PREFILL_MLA_MB if model.mla and since(v, DEFAULT_ON)
                          else PREFILL_MB_PER_SIZE * len(sizes)))
            if (since(v, BREAKABLE_DEEPEP) and p.a2a_backend == "deepep"
                    and prefill_backend(flags) == "breakable"):
                parts.append((PREFILL_BREAKABLE_DEEPEP, BREAKABLE_DEEPEP_MB))
    subtotal = sum(mb for _, mb in parts)
    if gpu_mb > FLOOR_ABOVE_MB and subtotal < FLOOR_MB:
        parts.append(("raised to the 10 GiB floor", FLOOR_MB - subtotal))
    algo = str(flags.get("speculative_algorithm") or "").upper()
    if algo and not since(v, SPECULATIVE_GONE):
        spec = SPECULATIVE_MB.get(algo, 4096 if since(v, SPECULATIVE_4GB) else 2048)
        parts.append((f"speculative decoding ({algo})", spec))
    if opt_in_after:
        parts.append((f"{PREFILL_GRAPHS} (opt-in piecewise)", opt_in_after))
    if role_aware and role != "prefill" and decode_on and p.a2a_backend == "deepep":
        parts.append(("DeepEP buffers", DEEPEP_MB))
    return Reserve(tuple((what, mb) for what, mb in parts if mb), "graph and activation reserve")


def _activation_tokens(req: MemoryRequest, role: str, chunk: int, graph_bs: int) -> int:
    s = req.settings
    flags = s.launch.mapping()
    if role == "decode" and since(req.version, ROLE_AWARE):
        draft = int(flags.get("speculative_num_draft_tokens") or 1)
        return max((s.max_running_requests or graph_bs or 1) * draft, MIN_ACTIVATION_TOKENS)
    if chunk > 0:
        return max(chunk, MIN_ACTIVATION_TOKENS)
    return max(int(flags.get("max_prefill_tokens") or DEFAULT_MAX_PREFILL_TOKENS), MIN_ACTIVATION_TOKENS)


def _prefill(req: MemoryRequest, model: Model, chunk: int) -> tuple[tuple[int, ...], bool]:
    """(the capture sizes the reserve counts, whether the prefill graph backend is on) when the
    release sizes its memory: opt-in before 0.5.10, else sglang_prefill's rules (which read the
    layout by sglang's flag names: the request's Parallel stands for them)."""
    v, s, p = req.version, req.settings, req.parallel
    launch = s.launch
    flags = {k: val for k, val in launch.mapping().items() if k != "enable_dp_attention"}
    flags["moe_a2a_backend"] = p.a2a_backend
    if p.dp_attention:
        flags["enable_dp_attention"] = "true"
    if not since(v, DEFAULT_ON):
        if not launch.on("enable_piecewise_cuda_graph") or not since(v, OPT_IN_QUARTER):
            return (), False
        top = int(flags.get("piecewise_cuda_graph_max_tokens") or (2048 if model.mla else chunk))
        sizes = [t for t in capture_sizes(top) if since(v, GRID_WITH_576) or t != 576]
        return tuple(sizes), True
    why = off_reason(v, model, flags, pp=launch.pipeline, disable_cuda_graph=launch.disable_cuda_graph,
                     at_memory_sizing=True)
    if why:
        return (), False
    return configured_sizes(v, model, flags, chunked_prefill=chunk, context_length=s.context_length), True


def _post_capture(req: MemoryRequest, model: Model, role: str, decode_on: bool, prefill_on: bool,
                  sizes: tuple[int, ...], chunk: int) -> bool:
    """post_capture_kv_sizing_planned, as far as tilefit knows the launch."""
    v, s, flags = req.version, req.settings, req.settings.launch.mapping()
    if not s.launch.on("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING") or model.mla:
        return False
    if int(flags.get("dcp_size") or 1) != 1 or s.launch.on("enable_memory_saver"):
        return False
    if not since(v, POST_CAPTURE_FP4_GONE) and s.kv_dtype in ("fp4", "fp4_e2m1"):
        return False
    if role != "prefill" and not decode_on:
        return False
    if role != "decode":
        if not prefill_on:
            return False
        if since(v, POST_CAPTURE_WHOLE_CHUNK) and (chunk <= 0 or chunk > max(sizes, default=0)):
            return False
    return since(v, POST_CAPTURE_WHOLE_CHUNK) or not req.parallel.dp_attention
