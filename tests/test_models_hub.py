"""Models by Hugging Face id from the local cache (huggingface_hub's layout: models--org--name/,
refs/main, snapshots/<rev>/config.json + hf_quant_config.json); no network, ever."""

import json
import shutil
from pathlib import Path

import pytest

from tilefit.errors import UsageError
from tilefit.models import hub
from tilefit.models.catalog import load_model

CONFIGS = Path(__file__).parent / "fixtures" / "configs"


def _cache(root: Path, repo_id: str, config: Path, quant: dict | None = None, ref: bool = True) -> Path:
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    shutil.copy(config, snap / "config.json")
    if quant is not None:
        (snap / "hf_quant_config.json").write_text(json.dumps(quant))
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("abc123\n")
    return snap


def _a_config() -> Path:
    return CONFIGS / "glm5-fp8" / "config.json"  # zai-org/GLM-5-FP8's config.json


def test_cached_repo_is_read_from_hf_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    _cache(tmp_path, "someone/GLM-5-NVFP4", _a_config(), {"quantization": {"quant_algo": "NVFP4", "group_size": 16}})
    m = load_model("someone/GLM-5-NVFP4")
    assert m.weight_dtype == "nvfp4" and "abc123" in m.source


def test_hf_home_and_single_snapshot_without_ref(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    _cache(tmp_path / "hub", "someone/model-x", _a_config(), ref=False)
    assert hub.snapshot_dir("someone/model-x") is not None
    assert load_model("someone/model-x").num_experts > 1


def test_uncached_id_says_which_two_files_and_how(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UsageError, match="huggingface-cli download someone/absent config.json hf_quant_config.json"):
        load_model("someone/absent")


def test_uncached_id_of_a_preset_uses_the_preset(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert load_model("zai-org/GLM-5").name == "glm-5"
    assert load_model("deepseek-ai/DeepSeek-R1").name == "deepseek-v3"  # alias deepseek-r1


@pytest.mark.parametrize("text,ok", [("zai-org/GLM-5", True), ("/models/x", False), ("./a/b", False),
                                     ("a/b/c", False), ("cfg.json", False), ("glm-5", False)])
def test_repo_id_shape(text, ok):
    assert hub.looks_like_repo_id(text) is ok
