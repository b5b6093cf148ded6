"""Every weight of a MoE model on one GPU, by kind, for an engine's `Placement`.

H = hidden, V = vocabulary, I = expert width, S = shared-expert width, D = dense MLP width,
E = experts; per-rank shapes are [out, in] with the split dimension divided by its shard count.
Linear layers use the checkpoint's format where it quantizes them (`Architecture.dense_quantized`),
bf16 otherwise; embeddings, the LM head, norms and the router stay bf16 (fp32 where noted).
"""

from __future__ import annotations

import math

from tilefit.memory.base import Figure, Placement
from tilefit.models.architecture import Architecture
from tilefit.models.types import BF16, WeightFormat

VOCAB_PAD = 64  # both engines pad the vocabulary to a multiple of 64 per shard (vocab_parallel_embedding.py)

KINDS = ("embedding", "lm_head", "attention", "indexer", "dense_mlp", "shared_experts",
         "routed_experts", "router", "norms")


def _split(n: int, shards: int) -> int:
    return math.ceil(n / shards)


def _vocab_rows(vocab: int, shards: int) -> int:
    padded = math.ceil(vocab / VOCAB_PAD) * VOCAB_PAD
    return _split(padded, shards)


def dense_format(arch: Architecture) -> WeightFormat:
    return arch.moe.weights if arch.dense_quantized else BF16


def attention_bytes(arch: Architecture, p: Placement) -> int:
    """All attention projections of all layers on one GPU (MLA: the latent down-projections are
    replicated on every rank, the up-projections and o_proj split over the attention TP group)."""
    a, h, fmt = arch.attention, arch.hidden_size, dense_format(arch)
    heads = _split(a.heads, p.attn_tp)
    if a.is_mla:
        rope_nope = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            per = fmt.matrix_bytes(a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim, h)
            per += fmt.matrix_bytes(heads * rope_nope, a.q_lora_rank)
        else:
            per = fmt.matrix_bytes(a.kv_lora_rank + a.qk_rope_head_dim, h)
            per += fmt.matrix_bytes(heads * rope_nope, h)
        per += fmt.matrix_bytes(heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank)
        per += fmt.matrix_bytes(h, heads * a.v_head_dim)
        return per * arch.num_layers
    # GQA: with more ranks than KV heads every rank keeps one (replicated) KV head
    kv = max(1, a.kv_heads // p.attn_tp) if a.kv_heads < p.attn_tp else _split(a.kv_heads, p.attn_tp)
    out = (heads + 2 * kv) * a.head_dim
    per = fmt.matrix_bytes(out, h) + fmt.matrix_bytes(h, heads * a.v_head_dim)
    if a.bias:
        per += out * 2
    if a.sinks:
        per += heads * 4  # fp32 per head
    return per * arch.num_layers


def indexer_bytes(arch: Architecture) -> int:
    """The sparse-attention indexer: replicated on every rank in sglang 0.5.9 and vLLM 0.11.0
    (ReplicatedLinear wq_b, wk, weights_proj; LayerNorm k_norm in fp32)."""
    a, h = arch.attention, arch.hidden_size
    if not a.has_indexer:
        return 0
    fmt = dense_format(arch)
    q_in = a.q_lora_rank or h
    per = (fmt.matrix_bytes(a.index_heads * a.index_head_dim, q_in) + fmt.matrix_bytes(a.index_head_dim, h)
           + BF16.matrix_bytes(a.index_heads, h) + 2 * a.index_head_dim * 4)
    return per * arch.num_layers


def mlp_bytes(fmt: WeightFormat, h: int, width: int) -> int:
    """gate+up [2 * width, H] and down [H, width]."""
    return fmt.matrix_bytes(2 * width, h) + fmt.matrix_bytes(h, width)


def routed_bytes(arch: Architecture, p: Placement, width_pad: int = 0) -> int:
    """Routed experts of all MoE layers on one GPU, scales included. `width_pad` rounds the
    per-rank expert width up (engines pad mxfp4 widths for their kernels)."""
    m = arch.moe
    fmt = m.weights
    width = _split(m.expert_width, p.expert_tp)
    if width_pad:
        width = math.ceil(width / width_pad) * width_pad
    local = _split(m.num_experts, p.expert_ep)
    per_expert = mlp_bytes(fmt, m.hidden_size, width)
    if fmt.name == "nvfp4":
        per_expert += 3 * 2 * 4  # per projection: fp32 global weight scale and input scale
    if arch.expert_bias:
        per_expert += (2 * width + m.hidden_size) * 2
    return local * per_expert * m.moe_layers


def weights_per_gpu(arch: Architecture, p: Placement) -> tuple[Figure, ...]:
    """One figure per kind of weight on one GPU (bytes exact for the checkpoint's shapes)."""
    m, h = arch.moe, arch.hidden_size
    emb = _vocab_rows(arch.vocab_size, p.vocab_shards) * h * 2
    tied = arch.tie_word_embeddings and p.lm_head_shards == p.vocab_shards
    head = 0 if tied else _vocab_rows(arch.vocab_size, p.lm_head_shards) * h * 2
    dense = arch.dense_layers * mlp_bytes(dense_format(arch), h, _split(arch.dense_width, p.dense_shards)) \
        if arch.dense_layers else 0
    shared = m.moe_layers * mlp_bytes(dense_format(arch), h, _split(m.shared_expert_width, p.shared_shards)) \
        if m.shared_expert_width else 0
    router = m.moe_layers * (m.num_experts * h * 2 + (m.num_experts * 4 if arch.router_bias else 0))
    a = arch.attention
    norm_elems = arch.num_layers * (2 * h + (a.q_lora_rank + a.kv_lora_rank if a.is_mla else 2 * a.head_dim)) + h
    split = f"split {p.attn_tp} ways" if p.attn_tp > 1 else "whole on every GPU"
    return (
        Figure("embedding", emb, f"exact: vocab {arch.vocab_size} padded to {VOCAB_PAD}, split {p.vocab_shards} ways, bf16"),
        Figure("lm_head", head, "exact: tied to the embedding" if tied else
               f"exact: vocab split {p.lm_head_shards} ways, bf16"),
        Figure("attention", attention_bytes(arch, p), f"exact: {arch.num_layers} layers, heads {split}, "
               f"{dense_format(arch).name}" + ("; MLA down-projections on every GPU" if a.is_mla else "")),
        Figure("indexer", indexer_bytes(arch), "exact: whole on every GPU"),
        Figure("dense_mlp", dense, f"exact: {arch.dense_layers} dense layers, split {p.dense_shards} ways"),
        Figure("shared_experts", shared, f"exact: {m.moe_layers} layers, split {p.shared_shards} ways"),
        Figure("routed_experts", routed_bytes(arch, p), f"exact: {_split(m.num_experts, p.expert_ep)} "
               f"experts x width {_split(m.expert_width, p.expert_tp)} x {m.moe_layers} layers, {m.weights.name} "
               "with its scales"),
        Figure("router", router, "exact: bf16 gate on every GPU"),
        Figure("norms", norm_elems * 2, "exact: bf16 RMSNorm weights on every GPU"),
    )
