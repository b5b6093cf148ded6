"""The config loader never crashes: any JSON value gives a MoEModel or a UsageError."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tilefit.errors import UsageError
from tilefit.models.loader import EXPERT_FIELDS, HIDDEN_FIELDS, LAYER_FIELDS, TOPK_FIELDS, WIDTH_FIELDS, from_config

FIELDS = [f for f in EXPERT_FIELDS + TOPK_FIELDS + WIDTH_FIELDS + HIDDEN_FIELDS + LAYER_FIELDS if "." not in f] + [
    "first_k_dense_replace", "moe_layer_freq", "interleave_moe_layer_step", "decoder_sparse_step",
    "mlp_only_layers", "moe_layers", "n_shared_experts", "shared_expert_intermediate_size", "model_type",
    "torch_dtype", "quantization_config", "text_config", "ffn_config"]

json_scalars = st.none() | st.booleans() | st.integers(-10**7, 10**7) | st.floats(allow_nan=True) | st.text(max_size=8)
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(
    st.sampled_from(FIELDS + ["quant_method", "weight_block_size", "quant_algo"]), c, max_size=5), max_leaves=12)
configs = st.dictionaries(st.sampled_from(FIELDS), json_values | st.integers(0, 300), max_size=14)


@settings(max_examples=400, deadline=None)
@given(configs)
def test_loader_total(cfg):
    try:
        m = from_config(cfg, name="fuzz", source="fuzz.json")
    except UsageError:
        return
    assert m.num_experts >= 2 and 1 <= m.top_k <= m.num_experts
    assert 1 <= m.moe_layers <= m.num_layers and m.hidden_size >= 1 and m.expert_width >= 1


VALID = {"num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": 64, "intermediate_size": 32,
         "num_hidden_layers": 4}


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS[10:] + ["quantization_config"]), json_values, max_size=4))
def test_loader_total_around_a_valid_config(extra):
    try:
        m = from_config({**VALID, **extra}, name="fuzz", source="fuzz.json")
    except UsageError:
        return
    assert 0 <= m.moe_layers <= m.num_layers
