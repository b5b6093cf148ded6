"""Model catalog and config.json loader: presets match the public config.json files, the loader follows the
documented field-name rules across families, and bad files fail with one clear message."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from tilefit.errors import UsageError
from tilefit.models import load_model
from tilefit.models.catalog import all_presets
from tilefit.models.loader import from_config

CONFIGS = FIXTURES / "configs"

# (preset, H, I, E, top-k, MoE layers, layers, shared width, dtype) as the public config.json files give them
PRESETS = [
    ("glm-5", 6144, 2048, 256, 8, 75, 78, 2048, "bf16"),
    ("glm-5-fp8", 6144, 2048, 256, 8, 75, 78, 2048, "fp8-block"),
    ("glm-5-nvfp4", 6144, 2048, 256, 8, 75, 78, 2048, "nvfp4"),
    ("glm-4.6", 5120, 1536, 160, 8, 89, 92, 1536, "bf16"),
    ("glm-4.5-air", 4096, 1408, 128, 8, 45, 46, 1408, "bf16"),
    ("deepseek-r1", 7168, 2048, 256, 8, 58, 61, 2048, "fp8-block"),
    ("kimi-k2", 7168, 2048, 384, 8, 60, 61, 2048, "fp8-block"),
    ("qwen3-235b-a22b", 4096, 1536, 128, 8, 94, 94, 0, "bf16"),
    ("qwen3-30b-a3b", 2048, 768, 128, 8, 48, 48, 0, "bf16"),
    ("qwen3-next-80b", 2048, 512, 512, 10, 48, 48, 512, "bf16"),
    ("mixtral-8x7b", 4096, 14336, 8, 2, 32, 32, 0, "bf16"),
    ("mixtral-8x22b", 6144, 16384, 8, 2, 56, 56, 0, "bf16"),
    ("gpt-oss-120b", 2880, 2880, 128, 4, 36, 36, 0, "mxfp4"),
    ("gpt-oss-20b", 2880, 2880, 32, 4, 24, 24, 0, "mxfp4"),
    ("llama-4-scout", 5120, 8192, 16, 1, 48, 48, 8192, "bf16"),
    ("llama-4-maverick", 5120, 8192, 128, 1, 24, 48, 8192, "bf16"),
    ("minimax-m2", 3072, 1536, 256, 8, 62, 62, 0, "fp8-block"),
]


@pytest.mark.parametrize("row", PRESETS, ids=[r[0] for r in PRESETS])
def test_presets_match_facts(row):
    name, h, i, e, k, moe, layers, shared, dtype = row
    m = load_model(name)
    assert (m.hidden_size, m.expert_width, m.num_experts, m.top_k) == (h, i, e, k)
    assert (m.moe_layers, m.num_layers, m.shared_expert_width, m.weight_dtype) == (moe, layers, shared, dtype)


def test_every_preset_loads_and_names_its_source():
    models = all_presets()
    assert len(models) >= 17
    assert all(m.source.startswith("preset ") for m in models)


@pytest.mark.parametrize("folder, expect", [
    ("dbrx", dict(hidden_size=6144, expert_width=10752, num_experts=16, top_k=4, moe_layers=40,
                  shared_expert_width=0, weight_dtype="bf16")),
    ("llama4", dict(hidden_size=5120, expert_width=8192, num_experts=128, top_k=1, moe_layers=24,
                    shared_expert_width=8192, weight_dtype="bf16")),
    ("kimi-nvfp4", dict(hidden_size=7168, expert_width=2048, num_experts=384, top_k=8, moe_layers=60,
                        shared_expert_width=2048, weight_dtype="nvfp4")),
    ("qwen3moe", dict(hidden_size=2048, expert_width=768, num_experts=128, top_k=8, moe_layers=23,
                      shared_expert_width=0, weight_dtype="bf16")),
    ("gptoss", dict(hidden_size=2880, expert_width=2880, num_experts=32, top_k=4, moe_layers=24,
                    weight_dtype="mxfp4")),
    ("mixtral", dict(hidden_size=4096, expert_width=14336, num_experts=8, top_k=2, moe_layers=32,
                     weight_dtype="fp16")),
    ("deepseek", dict(hidden_size=7168, expert_width=2048, num_experts=256, top_k=8, moe_layers=58,
                      weight_dtype="fp8-block")),
])
def test_loader_families(folder, expect):
    m = load_model(str(CONFIGS / folder))
    for field, value in expect.items():
        assert getattr(m, field) == value, field


def test_loader_accepts_file_path_and_reads_quant_file_beside_it():
    m = load_model(str(CONFIGS / "kimi-nvfp4" / "config.json"))
    assert m.weight_dtype == "nvfp4" and m.name == "kimi-k2-nvfp4"


def test_preset_and_config_file_agree():
    from_file = load_model(str(CONFIGS / "glm5-fp8"))
    preset = load_model("glm-5-fp8")
    fields = ("hidden_size", "expert_width", "num_experts", "top_k", "moe_layers", "shared_expert_width",
              "weights")
    assert all(getattr(from_file, f) == getattr(preset, f) for f in fields)


@pytest.mark.parametrize("cfg, message", [
    ({"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32}, "not an MoE model"),
    ({"num_local_experts": 8, "hidden_size": 4096, "intermediate_size": 1, "num_hidden_layers": 2},
     "top-k"),
    ({"num_local_experts": -8, "num_experts_per_tok": 2, "hidden_size": 4096, "intermediate_size": 1,
      "num_hidden_layers": 2}, "out of range"),
    ({"num_local_experts": 2_000_000, "num_experts_per_tok": 2, "hidden_size": 4096,
      "intermediate_size": 1, "num_hidden_layers": 2}, "out of range"),
    ({"num_local_experts": 8, "num_experts_per_tok": 9, "hidden_size": 4096, "intermediate_size": 1,
      "num_hidden_layers": 2}, "out of range"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": "4096", "intermediate_size": 1,
      "num_hidden_layers": 2}, "not an integer"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 1, "num_hidden_layers": 2},
     "missing field"),
    ([1, 2, 3], "expected a JSON object"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": 8, "intermediate_size": 8,
      "num_hidden_layers": 2, "quantization_config": {"quant_method": "gguf"}}, "not supported"),
])
def test_loader_rejects_bad_configs(cfg, message):
    with pytest.raises(UsageError, match=message):
        from_config(cfg, name="x", source="x.json")


def test_not_json_and_missing_paths(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{'python': 'dict'}")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_model(str(bad))
    binary = tmp_path / "weights.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UsageError, match="not"):
        load_model(str(binary))
    with pytest.raises(UsageError, match="no config.json"):
        load_model(str(tmp_path / ".."))
    with pytest.raises(UsageError, match="no such file"):
        load_model(str(tmp_path / "absent" / "config.json"))


def test_unknown_preset_suggests_and_names_listing():
    with pytest.raises(UsageError) as e:
        load_model("glm5")
    assert "glm-5" in str(e.value) and "tilefit models" in str(e.value)


def test_config_is_never_executed(tmp_path):
    # A config is parsed as JSON only: a Python payload is just an invalid file.
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": 8,
                             "intermediate_size": 8, "num_hidden_layers": 2,
                             "auto_map": {"AutoConfig": "evil.Config"}, "trust_remote_code": True}))
    m = load_model(str(p))
    assert m.num_experts == 8


def test_deeply_nested_json_is_a_usage_error(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match="nests too deeply"):
        load_model(str(p))


def test_a_named_json_file_gives_its_stem_as_the_model_name(tmp_path):
    p = tmp_path / "dbrx.json"
    p.write_text((CONFIGS / "dbrx" / "config.json").read_text())
    assert load_model(str(p)).name == "dbrx"
