"""The parts of a model outside its routed experts: attention, dense MLP layers, vocabulary.

`MoEModel` describes the expert GEMMs; `Architecture` adds what a device-memory plan needs
(embeddings, attention projections, the sparse-attention indexer, dense layers, norms, the KV
cache's shape). Both are read from the same config.json fields, so existing callers of
`load_model` are unaffected. Field names follow the public Hugging Face config.json files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilefit.errors import UsageError
from tilefit.models.loader import _is_integral, language_config
from tilefit.models.types import MoEModel


@dataclass(frozen=True, slots=True)
class Attention:
    """One attention layer's shape. MLA (DeepSeek-style) has kv_lora_rank > 0.

    GQA: q [heads * head_dim, H], k/v [kv_heads * head_dim, H], o [H, heads * v_head_dim].
    MLA: q_a [q_lora, H] (or q [heads * (nope + rope), H] without q_lora), kv_a [kv_lora + rope, H],
    q_b [heads * (nope + rope), q_lora], kv_b [heads * (nope + v), kv_lora], o [H, heads * v].
    The indexer (DeepSeek-V3.2 / GLM-5 sparse attention) adds wq_b [idx_heads * idx_dim, q_lora],
    wk [idx_dim, H] and weights_proj [idx_heads, H].
    """

    heads: int
    kv_heads: int
    head_dim: int  # q/k head dim (GQA); nope + rope (MLA)
    v_head_dim: int
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    index_heads: int = 0
    index_head_dim: int = 0
    bias: bool = False  # q/k/v biases (GLM-4.5, gpt-oss)
    sinks: bool = False  # per-head attention sinks (gpt-oss)
    sliding_layers: int = 0  # layers with a sliding window (gpt-oss: every other layer)
    sliding_window: int = 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def has_indexer(self) -> bool:
        return self.index_heads > 0 and self.index_head_dim > 0


@dataclass(frozen=True, slots=True)
class Architecture:
    """A MoE model's non-expert shape. H = hidden size, V = vocabulary."""

    moe: MoEModel
    vocab_size: int
    tie_word_embeddings: bool
    attention: Attention
    dense_layers: int  # decoder layers with a dense MLP instead of experts
    dense_width: int  # that MLP's intermediate size (0 when there is none)
    router_bias: bool  # DeepSeek's e_score_correction_bias / gpt-oss's router bias
    expert_bias: bool  # gpt-oss: biases on the expert projections
    dense_quantized: bool  # attention / dense / shared linears use the checkpoint's format
    source: str
    linear_attention: bool = False  # hybrid models (Qwen3-Next): part of the cache is a fixed state

    @property
    def hidden_size(self) -> int:
        return self.moe.hidden_size

    @property
    def num_layers(self) -> int:
        return self.moe.num_layers


def _int(lm: dict[str, Any], field: str, where: str, default: int | None = None) -> int:
    v = lm.get(field)
    if v is None:
        if default is None:
            raise UsageError(f"{where}: missing field {field} (needed for the memory plan)")
        return default
    if not _is_integral(v) or not 0 <= v <= 10_000_000:
        raise UsageError(f"{where}: {field} = {v!r} is not a non-negative integer")
    return int(v)


def _attention(lm: dict[str, Any], hidden: int, layers: int, where: str) -> Attention:
    heads = _int(lm, "num_attention_heads", where)
    if heads == 0:
        raise UsageError(f"{where}: num_attention_heads is 0")
    kv_heads = _int(lm, "num_key_value_heads", where, heads) or heads
    kv_lora = _int(lm, "kv_lora_rank", where, 0)
    layer_types = lm.get("layer_types") if isinstance(lm.get("layer_types"), list) else []
    sliding = sum(1 for t in layer_types if t == "sliding_attention")
    window = _int(lm, "sliding_window", where, 0) if sliding else 0
    if kv_lora:
        rope = _int(lm, "qk_rope_head_dim", where)
        nope = _int(lm, "qk_nope_head_dim", where)
        return Attention(
            heads=heads, kv_heads=kv_heads, head_dim=nope + rope,
            v_head_dim=_int(lm, "v_head_dim", where), q_lora_rank=_int(lm, "q_lora_rank", where, 0),
            kv_lora_rank=kv_lora, qk_rope_head_dim=rope, qk_nope_head_dim=nope,
            index_heads=_int(lm, "index_n_heads", where, 0), index_head_dim=_int(lm, "index_head_dim", where, 0))
    head_dim = _int(lm, "head_dim", where, 0) or hidden // heads
    return Attention(heads=heads, kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim,
                     bias=bool(lm.get("attention_bias", lm.get("qkv_bias", False))),
                     sinks=str(lm.get("model_type", "")) == "gpt_oss", sliding_layers=sliding,
                     sliding_window=window)


def _dense_quantized(cfg: dict[str, Any], quant: dict[str, Any] | None, moe: MoEModel) -> bool:
    """Whether attention and dense linears share the checkpoint's quantized format.

    fp8 checkpoints (DeepSeek, GLM, Qwen3-FP8) quantize every linear layer but the router and
    the LM head. NVIDIA's NVFP4 checkpoints and gpt-oss's mxfp4 quantize the routed experts
    only; an `exclude_modules` / `modules_to_not_convert` entry naming self_attn confirms it.
    """
    if moe.weights.name in ("bf16", "fp16", "fp32"):
        return False
    if moe.weights.name in ("nvfp4", "mxfp4"):
        return False
    qc = cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), dict) else {}
    q = (quant or {}).get("quantization", quant or {}) if quant else {}
    skipped = [str(m) for src in (qc, q) for key in ("modules_to_not_convert", "exclude_modules",
                                                      "ignored_layers", "ignore")
               for m in (src.get(key) or []) if isinstance(src, dict)]
    return not any("self_attn" in m for m in skipped)


def architecture_from_config(cfg: Any, moe: MoEModel, quant: dict[str, Any] | None = None) -> Architecture:
    """The non-expert shape from a parsed config.json (and hf_quant_config.json) dict."""
    where = moe.source
    if not isinstance(cfg, dict):
        raise UsageError(f"{where}: expected a JSON object (a Hugging Face config.json)")
    lm = language_config(cfg)
    vocab = _int(lm, "vocab_size", where, _int(cfg, "vocab_size", where, 0))
    if vocab == 0:
        raise UsageError(f"{where}: missing field vocab_size (needed for the memory plan)")
    dense_layers = moe.num_layers - moe.moe_layers
    dense_width = _int(lm, "intermediate_size", where, 0) if dense_layers else 0
    if lm.get("intermediate_size_mlp"):  # Llama-4 names its dense MLP width apart
        dense_width = _int(lm, "intermediate_size_mlp", where) if dense_layers else 0
    model_type = str(lm.get("model_type", ""))
    tie = lm.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))
    return Architecture(
        moe=moe, vocab_size=vocab, tie_word_embeddings=bool(tie),
        attention=_attention(lm, moe.hidden_size, moe.num_layers, where),
        dense_layers=dense_layers, dense_width=dense_width,
        router_bias=lm.get("topk_method") == "noaux_tc" or model_type == "gpt_oss",
        expert_bias=model_type == "gpt_oss",
        dense_quantized=_dense_quantized(cfg if "quantization_config" in cfg else lm, quant, moe),
        source=where,
        linear_attention=model_type in ("qwen3_next",) or "linear_attention" in (lm.get("layer_types") or []))


def load_architecture(name_or_path: str) -> Architecture:
    """The architecture of a model as `load_model` finds it (catalog.resolve): a preset (by name,
    alias or Hugging Face id), a config.json file or folder, or a cached Hugging Face snapshot."""
    from tilefit.models.catalog import _preset_config, preset, resolve
    from tilefit.models.loader import _read_json, load_config_path

    key, path = resolve(name_or_path)
    if key is not None:
        cfg, quant = _preset_config(key)
        return architecture_from_config(cfg, preset(key), quant)
    moe = load_config_path(path)
    config_file = path / "config.json" if path.is_dir() else path
    quant_file = config_file.parent / "hf_quant_config.json"
    quant = _read_json(quant_file) if quant_file.is_file() else None
    return architecture_from_config(_read_json(config_file), moe, quant if isinstance(quant, dict) else None)
