"""vLLM's memory rules, read from the vLLM 0.11.0 and 0.33.0 wheels.

- Placement: `-tp` x `-dp` GPUs; every non-expert weight split over tp (replicated across DP
  ranks); MoE layers EP over tp x dp with --enable-expert-parallel, else TP over tp x dp
  (fused_moe/config.py, flatten_tp_across_dp); the MLA down-projection and the DSA indexer are
  ReplicatedLinear.
- KV pool (v1/worker/gpu_worker.py, determine_available_memory): gpu_memory_utilization x total
  memory (torch.cuda.mem_get_info) - (weights + profiled activation peak + non-torch increase);
  blocks = pool / (block bytes x layers); "GPU KV cache size" = blocks x block_size
  (v1/core/kv_cache_utils.py). Sliding-window layers form their own group that shares the
  blocks, so a half-sliding model (gpt-oss) divides by the larger group, not all layers.
  From 0.21 (read in 0.33.0: gpu_worker.py, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on by
  default) the estimated CUDA-graph memory is subtracted from the pool too; before, graphs were
  captured after sizing, outside gpu_memory_utilization. Without --engine-version: as 0.33.0.
- Defaults (engine/arg_utils.py): gpu_memory_utilization 0.9; max_num_batched_tokens 8192 and
  max_num_seqs 1024 for the API server on GPUs of 70 GiB or more (not A100), else 2048 / 256.
  CUDA graphs (config/vllm.py, read in 0.11.1-0.33.0): captured up to min(2 x max_num_seqs, 512,
  max_num_batched_tokens); from 0.28.0 the 512 is 1024 on compute capability 10.x (B200, B300).
  A max_cudagraph_capture_size given is capped by max_num_batched_tokens too (0.11.1, 0.20.0,
  0.28.0, 0.33.0).
- mxfp4 experts (quantization/mxfp4.py): the Marlin path (SM < 90) rounds the per-rank width up
  to 128 and the hidden size to 256; the SM100 FlashInfer paths to 256/256; SM90 FlashInfer to
  128/128; the Triton path rounds the width to 64.
"""

from __future__ import annotations

from tilefit.hw.catalog import GPU
from tilefit.memory.base import (GIB, Figure, KVLayout, MemoryRequest, Parallel, Placement, Pool, Settings,
                                 since)
from tilefit.memory.kv import gqa_bytes, indexer_bytes_per_token, mla_latent_bytes, normalize_kv_dtype

GRAPHS_TO_1024 = (0, 28, 0)  # first release whose CUDA graphs go to 1024 on compute capability 10.x
from tilefit.memory.startup import (absorbed_mla_copies, activations, cuda_context, cuda_graphs, dist_init,
                                    moe_workspace, usable_total)
from tilefit.memory.weights import mlp_bytes, routed_bytes
from tilefit.models.architecture import Architecture

VERSIONS = "0.11.0, 0.33.0"
GRAPHS_IN_POOL = (0, 21)  # from this version the profiler subtracts estimated CUDA-graph memory
BLOCK = 16
# The profile run samples max_num_seqs dummy rows over the whole vocabulary (gpu_model_runner
# _dummy_sampler_run): fp32 logits, probabilities, the top-k/top-p sort's values and int64
# indices. Bytes per (row, vocab) element, calibrated on public start-up logs (estimates):
# ~36 B from vLLM 0.10 on (gpt-oss-120b on H100: issues #23278 and #27508), ~12 B in 0.8.5
# (Qwen3-30B-A3B on A10: issue #17469).
SAMPLER_BYTES_V010 = 36
SAMPLER_BYTES_V08 = 12


def sampler_bytes(version: str | None) -> int:
    parts = [int(p) for p in (version or "").split(".")[:2] if p.isdigit() and len(p) <= 9]
    return SAMPLER_BYTES_V08 if parts and parts[0] == 0 and len(parts) > 1 and parts[1] < 10 else SAMPLER_BYTES_V010


class VllmMemory:
    name = "vllm"
    versions = VERSIONS

    def placement(self, arch: Architecture, parallel: Parallel) -> Placement:
        tp, dp = parallel.tp, parallel.dp
        world = tp * dp
        ep = world if parallel.expert_parallel else 1
        notes = (f"{dp} data-parallel replicas of the attention and dense weights",) if dp > 1 else ()
        return Placement(gpus=world, attn_tp=tp, vocab_shards=tp, lm_head_shards=tp, dense_shards=tp,
                         shared_shards=tp, expert_tp=world // ep, expert_ep=ep, notes=notes)

    def kv_layout(self, arch: Architecture, placement: Placement, settings: Settings) -> KVLayout:
        a, dtype = arch.attention, settings.kv_dtype
        layers = arch.num_layers
        block = settings.page_size or (64 if a.is_mla else BLOCK)
        if a.is_mla:
            per = mla_latent_bytes(arch, dtype, fp8_scaled_rope=a.has_indexer) + indexer_bytes_per_token(arch)
            return KVLayout(per * layers, layers, dtype, f"MLA latent {dtype} x {layers} layers, same on every GPU",
                            block)
        if a.sliding_layers:
            layers = max(a.sliding_layers, layers - a.sliding_layers)
        per = gqa_bytes(arch, placement.attn_tp, dtype)
        basis = f"K+V {dtype} x {layers} layers" + (" (sliding and full layers share blocks)" if a.sliding_layers else "")
        return KVLayout(per * layers, layers, dtype, basis, block)

    def defaults(self, req: MemoryRequest) -> Settings:
        s = req.settings
        big = req.gpu.memory_bytes >= 70 * GIB and "a100" not in req.gpu.key
        seqs = s.max_running_requests or (1024 if big else 256)
        chunk = s.chunked_prefill or (8192 if big else 2048)
        top = 1024 if since(req.version, GRAPHS_TO_1024) and req.gpu.arch.cc[0] == 10 else 512
        return Settings(mem_fraction=s.mem_fraction or 0.9, context_length=s.context_length,
                        max_running_requests=seqs,
                        kv_dtype=normalize_kv_dtype(s.kv_dtype, req.arch.moe.weights.name),
                        chunked_prefill=chunk,
                        cuda_graph_max_bs=min(s.cuda_graph_max_bs or min(2 * seqs, top), chunk),
                        page_size=s.page_size,
                        moe_backend=s.moe_backend or self.mxfp4_backend(req.gpu.arch.cc))

    @staticmethod
    def mxfp4_backend(cc: tuple[int, int]) -> str:
        """get_mxfp4_backend (0.11.0): FlashInfer on SM100, Triton (triton_kernels) on SM90 and
        newer, Marlin below SM90 or without triton_kernels (vLLM 0.10.x on H100 logs Marlin)."""
        if cc[0] == 10:
            return "flashinfer"
        return "triton" if cc[0] >= 9 else "marlin"

    def extra_weights(self, arch: Architecture, placement: Placement, gpu: GPU,
                      settings: Settings) -> tuple[Figure, ...]:
        out = list(absorbed_mla_copies(arch, placement, "vLLM 0.11.0 MLA attention"))
        if arch.moe.weights.name == "mxfp4":
            pad = self.mxfp4_padding(arch, placement, settings.moe_backend or self.mxfp4_backend(gpu.arch.cc),
                                     gpu.arch.cc)
            if pad:
                out.append(pad)
        return tuple(out)

    def mxfp4_padding(self, arch: Architecture, p: Placement, backend: str, cc: tuple[int, int]) -> Figure | None:
        """Extra expert bytes from the padding of the mxfp4 backend's weight layout."""
        m = arch.moe
        local = -(-m.num_experts // p.expert_ep)
        width = -(-m.expert_width // p.expert_tp)
        if backend == "triton" and cc[0] == 9:
            # triton_kernels' Hopper value layout (swizzled in mxfp4.py _swizzle_mxfp4): the packed
            # values with K rounded up to 256, scales unchanged. An estimate: it reproduces the
            # 64.38 GiB vLLM 0.14.1 printed for gpt-oss-120b on one H100 (issue #33155).
            h_pad, w_pad = -(-m.hidden_size // 256) * 256, -(-width // 256) * 256
            extra = local * m.moe_layers * (2 * width * (h_pad - m.hidden_size) + m.hidden_size * (w_pad - width)) // 2
            return Figure("routed_experts", extra, f"estimate: Hopper mxfp4 value layout pads K to 256 "
                          "(triton_kernels swizzle, matched to vLLM issue #33155)") if extra > 0 else None
        if backend == "marlin":  # n % 256 and k % 128 for both GEMMs: width to 128, hidden to 256
            width_pad, hidden_pad, path = 128, 256, "Marlin"
        elif backend == "flashinfer":  # SM100 FlashInfer mxfp4 x bf16/mxfp8
            width_pad, hidden_pad, path = 256, 256, "FlashInfer SM100"
        else:  # Triton elsewhere: width to 64
            width_pad, hidden_pad, path = 64, 1, "Triton"
        base = routed_bytes(arch, p)
        padded_h = -(-m.hidden_size // hidden_pad) * hidden_pad
        width = -(-width // width_pad) * width_pad
        per = mlp_bytes(m.weights, padded_h, width) + (2 * width + padded_h) * 2
        extra = local * per * m.moe_layers - base
        if extra <= 0:
            return None
        return Figure("routed_experts", extra, f"exact: {path} mxfp4 path pads width to {width}, hidden to "
                      f"{padded_h} (vLLM 0.11.0 quantization/mxfp4.py)")

    def pool(self, req: MemoryRequest, settings: Settings, weights: int, kv: KVLayout) -> Pool:
        p = self.placement(req.arch, req.parallel)
        tokens = settings.chunked_prefill or 8192
        util = settings.mem_fraction or 0.9
        acts = activations(req.arch, p, tokens)
        moe = moe_workspace(req.arch, p, tokens)
        seqs = settings.max_running_requests or 256
        per = sampler_bytes(req.version)
        sampler = Figure("sampler", seqs * req.arch.vocab_size * per,
                         f"estimate: the profile run's dummy sampler over {seqs} sequences x vocab "
                         f"{req.arch.vocab_size}, {per} B each (logits, probabilities, top-k/p sort; "
                         "calibrated on vLLM issues #17469, #23278, #27508)")
        nccl = dist_init(req.parallel.tp * req.parallel.dp)
        reserve = usable_total(req.gpu)
        total = req.gpu.memory_bytes - reserve.bytes  # torch.cuda.mem_get_info's total
        graphs = cuda_graphs(req.arch, settings.cuda_graph_max_bs or 512)
        graphs_in_pool = since(req.version, GRAPHS_IN_POOL)
        startup = (acts, moe, sampler, nccl) + ((graphs,) if graphs_in_pool else ())
        requested = int(total * util)
        kv_bytes = requested - weights - sum(f.bytes for f in startup)
        rule = (f"vLLM: {util:g} x {total / GIB:.2f} GiB - {weights / GIB:.2f} GiB weights - "
                f"{sum(f.bytes for f in startup) / GIB:.2f} GiB profiled peak = {kv_bytes / GIB:.2f} GiB")
        # The CUDA context predates the profile's baseline and vLLM 0.11 captures graphs after
        # sizing the pool: both must fit in the (1 - utilization) share.
        runtime = (cuda_context(req.gpu),) + (() if graphs_in_pool else (graphs,))
        return Pool(kv_bytes=kv_bytes, rule=rule, startup=(reserve, *startup), runtime=runtime,
                    headroom=total - requested)

    def kv_tokens(self, arch: Architecture, pool_bytes: int, kv: KVLayout, version: str | None = None) -> int:
        if pool_bytes <= 0:
            return 0
        blocks = pool_bytes // (kv.bytes_per_token * kv.page_size)
        return blocks * kv.page_size

    def max_requests(self, settings: Settings, kv_tokens: int) -> int:
        return settings.max_running_requests or 256


RULES = VllmMemory()
