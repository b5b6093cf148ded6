"""A deployment pasted as Python (launch/python_api.py): vLLM's and TensorRT-LLM's offline LLM(...)
and SGLang's Engine(...) read as the server command they stand for. The first two snippets are
verbatim from vllm-project/vllm#40153 and NVIDIA/TensorRT-LLM#6805, where `tilefit check` answered
"no server command found" (benchmarks/RESULTS.md, check on real deployments)."""

from __future__ import annotations

import pytest

from tilefit.errors import UsageError
from tilefit.launch import parse_launch

VLLM_40153 = '''from vllm import LLM

llm = LLM(
    model="./gpt-oss-20b",
    tensor_parallel_size=1,
    max_num_seqs=1,
    max_model_len=8192,
    enable_chunked_prefill=True,
    enable_prefix_caching=False,
    # default path works, but uses TRITON_ATTN + Marlin
    # attention_backend="FLASHINFER",  # forcing this fails
)
'''
TRTLLM_6805 = '''from tensorrt_llm import LLM
m = LLM("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8")
'''


def test_vllm_offline_llm():
    spec = parse_launch(VLLM_40153)
    assert (spec.engine, spec.model, spec.layout.gpus) == ("vllm", "./gpt-oss-20b", 1)
    assert spec.settings.max_running_requests == 1 and spec.settings.context_length == 8192
    assert "Python call LLM(...)" in spec.notes[0] and not spec.unknown


def test_tensorrt_llm_offline_llm():
    spec = parse_launch(TRTLLM_6805)
    assert (spec.engine, spec.model) == ("trtllm", "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8")


def test_layout_environment_and_literal_only():
    spec = parse_launch('import os\nimport vllm\nos.environ["VLLM_USE_FLASHINFER_MOE_FP16"] = "1"\n'
                        'n = 8\nllm = vllm.LLM("zai-org/GLM-5", tensor_parallel_size=8, enable_expert_parallel=True,\n'
                        '              data_parallel_size=n, compilation_config={"cudagraph_capture_sizes": [1, 2, 4]})\n')
    assert spec.layout.ep == 8 and spec.environ == {"VLLM_USE_FLASHINFER_MOE_FP16": "1"}
    assert spec.settings.cuda_graph_batch_sizes == (1, 2, 4)
    assert "left out: data_parallel_size" in spec.notes[0]


def test_sglang_engine():
    spec = parse_launch('import sglang as sgl\nllm = sgl.Engine(model_path="deepseek-ai/DeepSeek-V3", tp_size=8, '
                        'ep_size=8, mem_fraction_static=0.8)\n')
    assert (spec.engine, spec.layout.ep, spec.layout.gpus, spec.settings.mem_fraction) == ("sglang", 8, 8, 0.8)


@pytest.mark.parametrize("text", ["print('hello')\n", "x = (", "(" * 200_000])
def test_python_without_an_engine_call_is_still_no_command(text):
    with pytest.raises(UsageError, match="no sglang, vLLM or TensorRT-LLM server command found"):
        parse_launch(text)


def test_check_reads_a_python_snippet(cli):
    r = cli("check", "--gpu", "rtx-pro-6000", "--model", "qwen3-30b-a3b", "--", TRTLLM_6805)
    assert r.code == 2 and "trtllm + bf16 on sm120" in r.err  # read as TensorRT-LLM: its own answer
    snippet = ('from vllm import LLM\nllm = LLM(model="Qwen/Qwen3-30B-A3B", tensor_parallel_size=2,\n'
               '          enable_expert_parallel=True)\n')
    r = cli("check", "--gpu", "h200", "--model", "qwen3-30b-a3b", "--json", "--", snippet)
    assert r.code in (0, 1), r.err
    assert r.json()["layout"]["ep"] == 2 and r.json()["engine"]["name"] == "vllm"
