"""KV-cache bytes per token on one GPU, by attention type and cache dtype.

MLA caches one latent of kv_lora_rank + qk_rope_head_dim per token and layer, the same on every
attention-TP rank (the latent is not split by head). GQA caches K and V of the rank's KV heads
(at least one: ranks beyond the KV-head count hold a replica). The sparse-attention indexer adds
its own fp8 key cache per layer. Scale bytes of quantized caches follow each engine's pool.
"""

from __future__ import annotations

from tilefit.errors import UsageError
from tilefit.models.architecture import Architecture

DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}
KV_DTYPES = tuple(DTYPE_BYTES)

# DeepSeek-V3.2 indexer key cache: fp8 keys plus one fp32 scale per 128 (NSATokenToKVPool
# quant_block_size in sglang 0.5.9; vLLM 0.11.0's indexer cache holds the same 132 bytes).
INDEX_SCALE_BLOCK = 128


def normalize_kv_dtype(name: str, checkpoint_dtype: str = "bf16") -> str:
    """'auto' -> the model's dtype; engine spellings (fp8_e4m3, fp8_e5m2, fp4_e2m1, bfloat16)
    -> bf16 | fp16 | fp8 | fp4."""
    n = name.strip().lower()
    if n in ("auto", ""):
        return "fp16" if checkpoint_dtype == "fp16" else "bf16"
    aliases = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8_e4m3": "fp8",
               "fp8_e5m2": "fp8", "fp8_ds_mla": "fp8", "fp4_e2m1": "fp4", "nvfp4": "fp4"}
    n = aliases.get(n, n)
    if n not in DTYPE_BYTES:
        raise UsageError(f"KV-cache dtype {name!r} is not known (known: auto, {', '.join(KV_DTYPES)})")
    return n


def kv_heads_per_rank(arch: Architecture, attn_tp: int) -> int:
    kv = arch.attention.kv_heads
    return max(1, kv // attn_tp)


def indexer_bytes_per_token(arch: Architecture) -> int:
    a = arch.attention
    if not a.has_indexer:
        return 0
    return a.index_head_dim + a.index_head_dim // INDEX_SCALE_BLOCK * 4


def mla_latent_bytes(arch: Architecture, dtype: str, *, fp8_scaled_rope: bool = False) -> int:
    """One token's MLA latent in one layer.

    `fp8_scaled_rope`: the sparse-MLA fp8 layout (FlashMLA / sglang's NSA pool): the latent in
    fp8 with one fp32 scale per 128, the rope part kept in bf16 (512 + 16 + 128 = 656 bytes).
    """
    a = arch.attention
    dim = a.kv_lora_rank + a.qk_rope_head_dim
    if dtype == "fp8" and fp8_scaled_rope:
        return a.kv_lora_rank + a.kv_lora_rank // 128 * 4 + a.qk_rope_head_dim * 2
    if dtype == "fp4":  # packed fp4 plus one fp8 scale per 16
        return dim // 2 + dim // 16
    return int(dim * DTYPE_BYTES[dtype])


def gqa_bytes(arch: Architecture, attn_tp: int, dtype: str) -> int:
    """One token's K and V in one layer on one rank."""
    a = arch.attention
    n = kv_heads_per_rank(arch, attn_tp)
    elems = n * (a.head_dim + a.v_head_dim)
    if dtype == "fp4":  # packed fp4 plus one fp8 scale per 16 (sglang's fp4_e2m1 pool)
        return elems // 2 + elems // 16
    return int(elems * DTYPE_BYTES[dtype])
