"""sglang's memory rules, read from the sglang 0.5.9 and 0.5.23 wheels (python/sglang/srt/...).

- Placement (models/deepseek_v2.py, layers/vocab_parallel_embedding.py): attention heads split
  over the attention TP group (tp / dp with --enable-dp-attention); the MLA down-projections
  (fused_qkv_a_proj_with_mqa) and the DSA indexer are ReplicatedLinear; the embedding is split
  over the attention TP group under DP attention, else over tp; the LM head over tp; dense MLP
  layers over tp; shared experts over tp, or whole on every GPU with a DeepEP/Mooncake all-to-all;
  routed experts EP `ep` x TP `tp / ep`.
- KV pool (model_executor/model_runner_kv_cache_mixin.py, profile_max_num_token):
  tokens = (avail_after_load - avail_at_start * (1 - mem_fraction_static)) / cell_size, where
  avail_at_start is the free memory after CUDA and torch.distributed start (model_runner.py),
  and cell_size is (kv_lora_rank + qk_rope_head_dim) x layers x dtype (+ 132 B indexer keys)
  for MLA, kv_heads/attn_tp x (head_dim + v_head_dim) x layers x dtype for GQA. The same rule in
  0.5.23 (mem_cache/kv_cache_configurator.py _profile_available_bytes), which also names the
  smallest viable fraction when the weights leave no pool. The DSA fp8 pool stores 656 B per layer;
  0.5.9 sized it at 576 B, 0.5.23 (model_executor/pool_configurator.py) at the stored 656.
- Defaults (server_args.py _handle_gpu_memory_settings; arg_groups/memory_hook.py from 0.5.19):
  mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3), the reserve (activations,
  tp x pp / 8 GB, decode and prefill CUDA graphs, DP attention, the 10 GB floor on GPUs over
  60 GB, DeepEP, speculative decoding, post-capture KV sizing) as each release 0.5.4-0.5.23 sizes
  it: memory/sglang_reserve.py. The prefill chunk and decode graph batch follow GPU memory;
  0.5.20 raised them for 20-35 GiB GPUs (A10, RTX 4090, RTX 5090) from 2k and 24/80 to 4k and
  48/160 (MID_GPU_RAISED); from 0.5.22 the decode graph batch is capped at
  --max-running-requests. DSA models default to an fp8 KV cache on SM100+ and page size 64;
  max_running_requests defaults to min(max(tokens / context_len * 512, 2048), 4096), capped by
  the pool.
Without --engine-version the rules follow 0.5.23 where releases differ.
"""

from __future__ import annotations

from tilefit.engines.sglang_shared import DEEPEP_CLASS
from tilefit.hw.catalog import GPU
from tilefit.memory.base import (GIB, Figure, KVLayout, MemoryRequest, Parallel, Placement, Pool, Settings,
                                 since, version_tuple)
from tilefit.memory.kv import gqa_bytes, indexer_bytes_per_token, mla_latent_bytes, normalize_kv_dtype
from tilefit.memory.sglang_reserve import PREFILL_PARTS, RUNNING_CAP, reserve
from tilefit.memory.startup import absorbed_mla_copies, cuda_context, dist_init, runtime_needs, usable_total
from tilefit.models.architecture import Architecture

MIB = 2**20
VERSIONS = "0.5.4-0.5.22, 0.5.23"  # the last is the newest read: version None follows it
OLD_DSA_SIZING = (0, 5, 9)  # last version read that sized the DSA fp8 pool at 576 B per layer
# First version whose defaults give 20-35 GiB GPUs (A10, RTX 4090, RTX 5090) a 4k prefill chunk and
# decode graphs up to batch 48 (tp < 4) or 160: arg_groups/memory_hook.py in the 0.5.20-0.5.23
# wheels; 0.5.10-0.5.19 (server_args.py, then memory_hook.py) gave 2k and 24 or 80. The other
# brackets read the same in 0.5.10, 0.5.19, 0.5.20 and 0.5.23.
MID_GPU_RAISED = (0, 5, 20)


def _gpu_mem_mib(req: MemoryRequest) -> float:
    return req.gpu.memory_bytes / MIB  # nvidia-smi memory.total, as server_args reads it


def _graph_max_bs(gpu_mib: float, tp: int, version: str | None = None) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU memory, as _handle_gpu_memory_settings
    (`version`: the sglang release; None follows 0.5.23)."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        if since(version, MID_GPU_RAISED):
            return 4096, 48 if tp < 4 else 160
        return 2048, 24 if tp < 4 else 80
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


class SglangMemory:
    name = "sglang"
    versions = VERSIONS

    def placement(self, arch: Architecture, parallel: Parallel) -> Placement:
        tp, ep = parallel.tp, parallel.ep
        attn_tp = tp // parallel.dp if parallel.dp_attention else tp
        replicated_shared = parallel.a2a_backend in DEEPEP_CLASS
        notes = []
        if parallel.dp_attention:
            notes.append(f"DP attention: {parallel.dp} attention replicas of {attn_tp} GPU(s) each")
        if replicated_shared and arch.moe.shared_expert_width:
            notes.append(f"--moe-a2a-backend {parallel.a2a_backend}: shared experts whole on every GPU")
        return Placement(gpus=tp, attn_tp=attn_tp, vocab_shards=attn_tp if parallel.dp_attention else tp,
                         lm_head_shards=tp, dense_shards=tp, shared_shards=1 if replicated_shared else tp,
                         expert_tp=tp // ep, expert_ep=ep, notes=tuple(notes))

    def _kv_dtype(self, arch: Architecture, req: MemoryRequest, settings: Settings) -> str:
        if settings.kv_dtype == "auto" and arch.attention.has_indexer:
            return "fp8" if req.gpu.arch.cc[0] >= 10 else "bf16"  # _set_default_nsa_kv_cache_dtype
        return normalize_kv_dtype(settings.kv_dtype, arch.moe.weights.name)

    def kv_layout(self, arch: Architecture, placement: Placement, settings: Settings) -> KVLayout:
        dtype = settings.kv_dtype
        layers = arch.num_layers
        page = settings.page_size or (64 if arch.attention.has_indexer else 1)
        if arch.attention.is_mla:
            nsa = arch.attention.has_indexer
            per = mla_latent_bytes(arch, dtype, fp8_scaled_rope=nsa) + indexer_bytes_per_token(arch)
            return KVLayout(per * layers, layers, dtype, f"MLA latent {arch.attention.kv_lora_rank}+"
                            f"{arch.attention.qk_rope_head_dim} {dtype} x {layers} layers, same on every GPU"
                            + (" + indexer keys 132 B" if nsa else ""), page)
        per = gqa_bytes(arch, placement.attn_tp, dtype)
        return KVLayout(per * layers, layers, dtype, f"K+V of {max(1, arch.attention.kv_heads // placement.attn_tp)} "
                        f"KV head(s) x {arch.attention.head_dim} {dtype} x {layers} layers", page)

    def sizing_bytes_per_token(self, arch: Architecture, kv: KVLayout, version: str | None = None) -> int:
        """What the pool sizing divides by: for the DSA fp8 pool sglang 0.5.9 counts the latent as
        576 fp8 bytes while the pool stores 656 (scales, bf16 rope); 0.5.23 counts the 656."""
        a = arch.attention
        v = version_tuple(version)
        if a.is_mla and a.has_indexer and kv.dtype == "fp8" and v is not None and v <= OLD_DSA_SIZING:
            return (a.kv_lora_rank + a.qk_rope_head_dim + indexer_bytes_per_token(arch)) * kv.layers
        return kv.bytes_per_token

    def defaults(self, req: MemoryRequest) -> Settings:
        s, arch = req.settings, req.arch
        gpu_mib = _gpu_mem_mib(req)
        chunk, graph_bs = _graph_max_bs(gpu_mib, req.parallel.tp, req.version)
        chunk = s.chunked_prefill or chunk
        if since(req.version, RUNNING_CAP) and not s.cuda_graph_max_bs and s.max_running_requests:
            graph_bs = min(graph_bs, s.max_running_requests)
        graph_bs = s.cuda_graph_max_bs or graph_bs
        mf = s.mem_fraction
        if mf is None:
            mf = reserve(req, gpu_mib, chunk, graph_bs).fraction(gpu_mib)
        return Settings(mem_fraction=mf, context_length=s.context_length, max_running_requests=s.max_running_requests,
                        kv_dtype=self._kv_dtype(arch, req, s), chunked_prefill=chunk, cuda_graph_max_bs=graph_bs,
                        page_size=s.page_size, launch=s.launch)

    def extra_weights(self, arch: Architecture, placement: Placement, gpu: GPU,
                      settings: Settings) -> tuple[Figure, ...]:
        return absorbed_mla_copies(arch, placement, "sglang 0.5.9 deepseek_v2.py")

    def pool(self, req: MemoryRequest, settings: Settings, weights: int, kv: KVLayout) -> Pool:
        driver, ctx, dist = usable_total(req.gpu), cuda_context(req.gpu), dist_init(req.parallel.tp)
        start = req.gpu.memory_bytes - driver.bytes - ctx.bytes - dist.bytes
        mf = settings.mem_fraction or 0.0
        kv_bytes = int(start * mf) - weights
        headroom = start - int(start * mf)
        runtime = runtime_needs(req, self.placement(req.arch, req.parallel), settings) + \
            self._prefill_graphs(req, settings)
        rule = (f"sglang: {mf:g} x {start / GIB:.2f} GiB free after start-up - {weights / GIB:.2f} GiB weights "
                f"= {kv_bytes / GIB:.2f} GiB for the KV cache")
        return Pool(kv_bytes=kv_bytes, rule=rule, startup=(driver, ctx, dist), runtime=runtime, headroom=headroom)

    @staticmethod
    def _prefill_graphs(req: MemoryRequest, settings: Settings) -> tuple[Figure, ...]:
        """The prefill CUDA graphs' memory outside the pool, whatever the fraction: sglang's own
        estimate of it, the part of its default reserve that it adds for them (sglang_reserve)."""
        gpu_mib = _gpu_mem_mib(req)
        parts = reserve(req, gpu_mib, settings.chunked_prefill or 0,
                        settings.cuda_graph_max_bs or 0).parts
        mb = sum(v for what, v in parts if what.startswith(PREFILL_PARTS))
        if not mb:
            return ()
        return (Figure("prefill_graphs", int(mb * MIB),
                       f"estimate: the {mb:g} MB sglang reserves for its prefill CUDA graphs (1536 MB "
                       f"for MLA models, else 8 MB per captured size; memory_hook.py 0.5.23 l.381-397)"),)

    def kv_tokens(self, arch: Architecture, pool_bytes: int, kv: KVLayout, version: str | None = None) -> int:
        if pool_bytes <= 0:
            return 0
        tokens = pool_bytes // self.sizing_bytes_per_token(arch, kv, version)
        return tokens // kv.page_size * kv.page_size

    def max_requests(self, settings: Settings, kv_tokens: int) -> int:
        """--max-running-requests, else min(the req_to_token pool, tokens / 2) (model_runner.py)."""
        if settings.max_running_requests:
            return settings.max_running_requests
        context = settings.context_length or 0
        pool = min(max(int(kv_tokens / context * 512), 2048), 4096) if context else 4096
        return max(0, min(pool, kv_tokens // 2))


RULES = SglangMemory()
