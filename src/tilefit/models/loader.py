"""Hugging Face config.json -> MoEModel, following the field names the public config.json files use.

A config is only ever parsed as JSON (no code, no network). Multimodal wrappers keep the language
model under `text_config`; DBRX keeps its MoE fields under `ffn_config`. Quantization comes from
`quantization_config` in config.json and/or `hf_quant_config.json` beside it.
"""

from __future__ import annotations

import math
import stat
from pathlib import Path
from typing import Any

from tilefit._io import loads_json, read_small_file
from tilefit.errors import UsageError
from tilefit.models.types import (BF16, FP8, FP8_BLOCK, FP16, MAX_EXPERTS, MAX_TOP_K, MXFP4, NVFP4, MoEModel,
                                  WeightFormat)

EXPERT_FIELDS = ("num_local_experts", "n_routed_experts", "moe_num_experts", "num_experts",
                 "ffn_config.moe_num_experts")
TOPK_FIELDS = ("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_top_k",
               "ffn_config.moe_top_k")
WIDTH_FIELDS = ("moe_intermediate_size", "intermediate_size", "ffn_config.ffn_hidden_size")
HIDDEN_FIELDS = ("hidden_size", "d_model", "n_embd")
LAYER_FIELDS = ("num_hidden_layers", "n_layers", "num_layers", "n_layer")

MAX_DIM = 1_000_000  # no real model comes near; larger values are a typo or a hostile file


def _get(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _first(cfg: dict[str, Any], fields: tuple[str, ...]) -> tuple[str, Any] | tuple[None, None]:
    for f in fields:
        v = _get(cfg, f)
        if v is not None:
            return f, v
    return None, None


def _is_integral(v: Any) -> bool:
    """An int, or a finite float with no fraction (JSON writers emit 8.0); never a bool."""
    return (not isinstance(v, bool) and isinstance(v, (int, float))
            and not (isinstance(v, float) and not math.isfinite(v)) and v == int(v))


def _positive_int(where: str, field: str, value: Any, *, maximum: int = MAX_DIM, why: str = "") -> int:
    if not _is_integral(value):
        raise UsageError(f"{where}: {field} = {value!r} is not an integer")
    if not 0 < value <= maximum:
        raise UsageError(f"{where}: {field} = {value:,} is out of range (expected 1..{maximum:,}{why})")
    return int(value)


def language_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The dict that holds the language model's fields (top level, or `text_config`)."""
    text = cfg.get("text_config")
    if isinstance(text, dict) and _first(cfg, EXPERT_FIELDS)[0] is None:
        return text
    return cfg


def weight_format(cfg: dict[str, Any], quant: dict[str, Any] | None, where: str) -> WeightFormat:
    """Weight format from config.json's quantization_config and an hf_quant_config.json's contents."""
    if quant:
        q = quant.get("quantization", quant)
        if not isinstance(q, dict):
            raise UsageError(f"{where}: hf_quant_config.json 'quantization' must be an object")
        algo = str(q.get("quant_algo", "")).upper()
        if algo == "NVFP4":
            return NVFP4
        if algo == "FP8":
            return FP8
        if algo == "MXFP4":
            return MXFP4
        if algo:
            raise UsageError(f"{where}: hf_quant_config quant_algo {algo!r} is not supported "
                             f"(known: NVFP4, FP8, MXFP4)")
    qc = cfg.get("quantization_config")
    if isinstance(qc, dict):
        method = str(qc.get("quant_method", "")).lower()
        algo = str(qc.get("quant_algo", "")).upper()
        if method == "fp8":
            block = qc.get("weight_block_size")
            if block is None:
                return FP8
            if not isinstance(block, list) or block != [128, 128]:
                raise UsageError(f"{where}: fp8 weight_block_size {block} is not supported (only [128, 128])")
            return FP8_BLOCK
        if method == "mxfp4":
            return MXFP4
        if method == "modelopt" or algo:
            if algo == "NVFP4":
                return NVFP4
            if algo == "FP8":
                return FP8
        if method == "compressed-tensors":
            fmt = str(qc.get("format", "")).lower()
            if "nvfp4" in fmt:
                return NVFP4
            if "float" in fmt or "fp8" in fmt:
                return FP8
        raise UsageError(f"{where}: quantization_config quant_method {method!r} is not supported "
                         f"(known: fp8, mxfp4, modelopt NVFP4/FP8, compressed-tensors)")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").lower()
    return {"float16": FP16, "half": FP16, "fp16": FP16}.get(dtype, BF16)


def _count_field(lm: dict[str, Any], field: str, where: str, *, minimum: int = 0) -> int | None:
    """An optional small non-negative integer field (layer counts, steps)."""
    v = lm.get(field)
    if v is None:
        return None
    if not _is_integral(v) or not minimum <= v <= 100_000:
        raise UsageError(f"{where}: {field} = {v!r} is not an integer in {minimum}..100000")
    return int(v)


def moe_layer_count(lm: dict[str, Any], num_layers: int, where: str) -> int:
    """Which decoder layers are MoE, by each family's rule."""
    if isinstance(lm.get("moe_layers"), list):  # explicit list (Llama-4 in newer transformers)
        return len({i for i in lm["moe_layers"] if type(i) is int and 0 <= i < num_layers})
    first_dense = _count_field(lm, "first_k_dense_replace", where)
    if first_dense is not None:  # DeepSeek / GLM / Kimi
        freq = _count_field(lm, "moe_layer_freq", where, minimum=1) or 1
        return len([i for i in range(first_dense, num_layers) if i % freq == 0])
    step = _count_field(lm, "interleave_moe_layer_step", where, minimum=1)
    if step is not None:  # Llama-4: every step-th layer
        return len(range(step - 1, num_layers, step))
    if "decoder_sparse_step" in lm or "mlp_only_layers" in lm:  # Qwen MoE
        step = _count_field(lm, "decoder_sparse_step", where, minimum=1) or 1
        dense_raw = lm.get("mlp_only_layers") or []
        if not isinstance(dense_raw, list):
            raise UsageError(f"{where}: mlp_only_layers must be a list of layer indices")
        dense = {i for i in dense_raw if type(i) is int}
        return len([i for i in range(num_layers) if i not in dense and (i + 1) % step == 0])
    return num_layers  # Mixtral, gpt-oss, MiniMax, DBRX: every layer is MoE


def shared_expert_width(lm: dict[str, Any], width: int, where: str) -> tuple[int, int]:
    """(number of shared experts, total shared MLP width)."""
    n = _count_field(lm, "n_shared_experts", where)
    if n:
        return n, n * width
    s = lm.get("shared_expert_intermediate_size")
    if s:
        return 1, _positive_int(where, "shared_expert_intermediate_size", s)
    if str(lm.get("model_type", "")).startswith("llama4"):
        return 1, width  # Llama-4: one implicit shared expert of the routed experts' width
    return 0, 0


def from_config(cfg: Any, *, name: str, source: str, quant: dict[str, Any] | None = None) -> MoEModel:
    """Build a MoEModel from a parsed config.json dict; UsageError names the field at fault."""
    where = source
    if not isinstance(cfg, dict):
        raise UsageError(f"{where}: expected a JSON object (a Hugging Face config.json)")
    lm = language_config(cfg)
    e_field, experts = _first(lm, EXPERT_FIELDS)
    if e_field is None or experts in (0, 1):
        raise UsageError(f"{where}: not an MoE model (none of {', '.join(EXPERT_FIELDS)} is set above 1)")
    num_experts = _positive_int(where, e_field, experts, maximum=MAX_EXPERTS,
                                why="; the most of any public MoE is 2,048, served ones have up to 512")
    k_field, top_k = _first(lm, TOPK_FIELDS)
    if k_field is None:
        raise UsageError(f"{where}: MoE model without a top-k field (one of {', '.join(TOPK_FIELDS)})")
    top_k = _positive_int(where, k_field, top_k, maximum=min(num_experts, MAX_TOP_K),
                          why="; served MoEs route a token to at most 10 experts")
    w_field, width = _first(lm, WIDTH_FIELDS)
    h_field, hidden = _first(lm, HIDDEN_FIELDS)
    l_field, layers = _first(lm, LAYER_FIELDS)
    for field, value, fields in ((w_field, width, WIDTH_FIELDS), (h_field, hidden, HIDDEN_FIELDS),
                                 (l_field, layers, LAYER_FIELDS)):
        if field is None:
            raise UsageError(f"{where}: missing field (one of {', '.join(fields)})")
    width = _positive_int(where, w_field, width)
    hidden = _positive_int(where, h_field, hidden)
    layers = _positive_int(where, l_field, layers, maximum=100_000)
    moe_layers = moe_layer_count(lm, layers, where)
    if moe_layers == 0:
        raise UsageError(f"{where}: the layer fields leave no MoE layer out of {layers}")
    n_shared, shared_width = shared_expert_width(lm, width, where)
    # quantization_config may sit at the top level of a multimodal wrapper
    fmt_source = cfg if "quantization_config" in cfg else lm
    return MoEModel(
        name=name,
        hidden_size=hidden,
        expert_width=width,
        num_experts=num_experts,
        top_k=top_k,
        num_layers=layers,
        moe_layers=moe_layers,
        shared_experts=n_shared,
        shared_expert_width=shared_width,
        weights=weight_format(fmt_source, quant, where),
        source=source,
        hf_architecture=_architecture(cfg),
    )


def _architecture(cfg: dict[str, Any]) -> str:
    """The model class the config names (`architectures[0]`): engines decide some kernels by it
    (sglang's shared-expert fusion, engines/sglang_shared.py); "" when the config names none."""
    names = cfg.get("architectures")
    return str(names[0]) if isinstance(names, list) and names and isinstance(names[0], str) else ""


# A config.json is a few KiB (DeepSeek-V3's is 1.7 KiB; with long per-layer lists, tens of KiB),
# hf_quant_config.json smaller still; a file past this bound is the wrong file or a hostile one.
MAX_CONFIG_BYTES = 4 * 2**20
_WHAT = "a Hugging Face config.json"


def _read_json(path: Path) -> Any:
    data = read_small_file(path, limit=MAX_CONFIG_BYTES, what=_WHAT)
    return loads_json(data, source=str(path), what=_WHAT)


def _is_dir(path: Path) -> bool:
    """Path.is_dir, with a permission or name-length error as a UsageError instead of a traceback."""
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None


def path_exists(path: Path) -> bool:
    """Path.exists, with a permission or name-length error as a UsageError."""
    try:
        path.stat()
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None


def load_config_path(path: Path) -> MoEModel:
    """Load a config.json file, or a directory holding one (and maybe hf_quant_config.json)."""
    if _is_dir(path):
        directory, config_file = path, path / "config.json"
        if not path_exists(config_file):
            raise UsageError(f"{path} has no config.json")
    else:
        directory, config_file = path.parent, path
    cfg = _read_json(config_file)
    quant_file = directory / "hf_quant_config.json"
    quant = _read_json(quant_file) if path_exists(quant_file) else None
    if quant is not None and not isinstance(quant, dict):
        raise UsageError(f"{quant_file}: expected a JSON object")
    # A file named config.json takes its folder's name; any other file its own stem.
    fallback = directory.name if config_file.name == "config.json" else config_file.stem
    name = (cfg.get("_name_or_path") if isinstance(cfg, dict) else None) or fallback or config_file.stem
    return from_config(cfg, name=str(name), source=str(config_file), quant=quant)
