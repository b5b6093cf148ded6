"""Up to which batch `tilefit tune` times its kernel as CUDA-graph replays: --graph-max-batch, the
launch command's engine on the local GPU, the --emit engines' defaults, else tilefit's default.
Real launch commands from tests/fixtures/launch (each names its public source); the engines'
rules are the memory plan's (memory/vllm.py, memory/sglang.py name the wheels read), and sglang's
prefill graphs engines/sglang_prefill.py's (test_sglang_prefill_graphs.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tilefit.cli import tune_cmd
from tilefit.cli.main import build_parser
from tilefit.errors import UsageError
from tilefit.hw.catalog import get_gpu
from tilefit.launch import parse_launch
from tilefit.models.architecture import load_architecture
from tilefit.tune import graph_limit

LAUNCH = Path(__file__).parent / "fixtures" / "launch"
H200 = get_gpu("h200")


def _real(name: str):
    """A real launch command of the corpus, its options file (if any) read from the fixture."""
    case = tomllib.loads((LAUNCH / f"{name}.toml").read_text(encoding="utf-8"))
    return parse_launch(case["command"], read_file=lambda path: case["yaml"])


@pytest.mark.parametrize("name, model, batch, says", [
    # sgl-project repo script: --max-running-requests 160 --cuda-graph-max-bs 160; its prefill
    # graphs (GQA, chunked_prefill_size 8192) go further, and the decode graphs' 160 is named
    ("sglang-18", "qwen3-235b-a22b-fp8", 8192, "captures up to 160 (as the launch command sets it)"),
    # vllm-project/vllm#20087: --enforce-eager
    ("vllm-12", "deepseek-v3", 0, "turns CUDA graphs off"),
    # sgl-project/sglang#6017: --cuda-graph-bs 256
    ("sglang-7", "deepseek-v3", 256, "largest CUDA-graph batch size"),
    # vLLM recipes, gpt-oss: max-cudagraph-capture-size 2048 under max-num-batched-tokens 8192
    ("vllm-9", "glm-5", 2048, "as the launch command sets it"),
    # ROCm/vllm#832: --max-num-seqs 1024, cudagraph_mode FULL, no size: min(2 x 1024, 512, 131072)
    ("vllm-15", "glm-5", 512, "vllm as read in 0.33.0 captures up to 512"),
])
def test_real_launch_commands_give_the_engines_graph_limit_on_an_h200(name, model, batch, says):
    limit = graph_limit.from_launch(_real(name), load_architecture(model), H200, None)
    assert limit.batch == batch and says in limit.source


def test_vllm_drops_capture_sizes_over_its_batched_tokens():
    spec = parse_launch("vllm serve m -tp 8 --cudagraph-capture-sizes 1 2 4 8 4096 "
                        "--max-num-batched-tokens 2048")
    assert graph_limit.from_launch(spec, load_architecture("glm-5"), H200, None).batch == 8


def test_a_given_capture_size_is_capped_by_the_batched_tokens():
    spec = parse_launch("vllm serve m -tp 8 --max-cudagraph-capture-size 1024 --max-num-batched-tokens 256")
    assert graph_limit.from_launch(spec, load_architecture("glm-5"), H200, None).batch == 256


def test_emit_engines_take_the_largest_default_and_name_the_smaller():
    arch = load_architecture("glm-5")
    # sglang's prefill graphs reach 8192 tokens (0.5.23, MLA: min(8192, chunked_prefill_size));
    # vLLM: min(2 x 1024, 512, 8192)
    both = graph_limit.from_engines(("vllm", "sglang"), arch, H200, 8, 8, None)
    assert both.batch == 8192 and "batches 513-8192 run without graphs" in both.source
    # sglang's decode graphs below tp 4 on a 141 GB GPU: 256, named beside its prefill graphs
    one = graph_limit.from_engines(("sglang",), arch, H200, 2, 1, None)
    assert one.batch == 8192 and "captures up to 256" in one.source
    # with prefill graphs off (0.5.16 refuses MLA in breakable graphs) the decode graphs decide
    two = graph_limit.from_engines(("vllm", "sglang"), arch, H200, 2, 1, "0.5.16")
    assert graph_limit.from_engines(("sglang",), arch, H200, 2, 1, "0.5.16").batch == 256
    assert "sglang" in two.source and "vllm" in two.source


def test_engine_version_changes_the_limit_where_the_release_did():
    arch = load_architecture("qwen3-30b-a3b")
    rtx = get_gpu("rtx-5090")  # sglang's 20-35 GiB bracket: 0.5.20 raised tp < 4 from 24 to 48
    # decode graphs 24 -> 48; prefill graphs follow the prefill chunk, 2048 -> 4096
    old = graph_limit.from_engines(("sglang",), arch, rtx, 1, 1, "0.5.19")
    new = graph_limit.from_engines(("sglang",), arch, rtx, 1, 1, "0.5.20")
    assert (old.batch, new.batch) == (2048, 4096)
    assert "captures up to 24 " in old.source and "captures up to 48 " in new.source


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.setattr(tune_cmd, "_local_gpus", lambda: ([0], "NVIDIA H200"))


def _request(tmp_path, *argv):
    args = build_parser().parse_args(["tune", "--out", str(tmp_path), *argv])
    return tune_cmd.build_request(args)


def test_cli_reads_model_layout_engine_and_graph_limit_from_the_launch_command(h200, tmp_path):
    req = _request(tmp_path, "--", "python3", "-m", "sglang.launch_server", "--model-path",
                   "zai-org/GLM-5", "--tp", "8", "--ep", "8")
    assert req.emit == ("sglang",) and req.provenance["layout"] == "EP8"
    # GLM-5 (MLA with DSA) on sglang 0.5.23: prefill graphs up to min(8192, chunk 8192)
    assert req.shapes[0].experts == 32 and dict(req.target.kwargs)["graph_max_batch"] == 8192
    assert req.provenance["graph_limit"]["batch"] == 8192


def test_cli_limit_precedence(h200, tmp_path):
    def limit(*argv):
        return dict(_request(tmp_path, *argv).target.kwargs)["graph_max_batch"]

    assert limit("--model", "glm-5", "--ep", "8") == graph_limit.DEFAULT
    assert limit("--model", "glm-5", "--tp", "2", "--emit", "sglang") == 8192
    assert limit("--model", "glm-5", "--tp", "2", "--emit", "sglang", "--engine-version", "0.5.16") == 256
    assert limit("--model", "glm-5", "--ep", "8", "--emit", "vllm", "--graph-max-batch", "64") == 64
    assert limit("--graph-max-batch", "0", "--", "vllm", "serve", "zai-org/GLM-5", "-tp", "8") == 0
    assert limit("--", "vllm", "serve", "zai-org/GLM-5", "-tp", "8", "--enforce-eager") == 0


@pytest.mark.parametrize("argv, message", [
    (("--ep", "8", "--", "vllm", "serve", "zai-org/GLM-5", "-tp", "8"), "drop --ep"),
    (("--", "trtllm-serve", "zai-org/GLM-5", "--tp_size", "8"), "give --model, --tp and --ep"),
    ((), "give --model"),
    # sgl-project repo script (tests/fixtures/launch/sglang-18.toml) pasted without its shell
    (("--", "python", "-m", "sglang.launch_server", "--model-path", "${MODEL_PATH}", "--tp-size", "8"),
     "shell variable"),
    (("--", "vllm", "serve", "Qwen/Qwen3-30B-A3B", "--quantization", "fp8"), "quantizes qwen3-30b-a3b"),
    (("--target", "sglang", "--", "vllm", "serve", "zai-org/GLM-5"), "launch command starts vllm"),
])
def test_cli_refuses_a_launch_command_it_cannot_follow(h200, tmp_path, argv, message, monkeypatch):
    from tilefit.tune.targets import engines

    monkeypatch.setattr(engines, "require_engine", lambda *a: None)
    with pytest.raises(UsageError, match=message):
        _request(tmp_path, *argv)


def test_architecture_of_a_hugging_face_id_not_cached_is_its_presets(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # nothing cached
    assert load_architecture("zai-org/GLM-5") == load_architecture("glm-5")
    with pytest.raises(UsageError, match="not"):
        load_architecture("nobody/no-such-model")


def test_a_quantized_checkpoint_in_the_launch_command_is_tuned_as_stored(h200, tmp_path):
    req = _request(tmp_path, "--", "vllm", "serve", "zai-org/GLM-5-FP8", "-tp", "8", "--quantization", "fp8")
    assert req.shapes[0].dtype == "fp8-block" and req.emit == ("vllm",)
    forced = _request(tmp_path, "--dtype", "bf16", "--", "vllm", "serve", "Qwen/Qwen3-30B-A3B",
                      "--quantization", "fp8")
    assert forced.shapes[0].dtype == "bf16"
