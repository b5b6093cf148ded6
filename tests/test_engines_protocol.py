"""Every engine answers the Engine protocol by itself: found by name, never borrowing another
engine's rows, and an unknown name is an error listing the known ones."""

import pytest

from tilefit.engines import Engine, engine_names, get_engine
from tilefit.engines.table import facts
from tilefit.errors import UsageError


def test_every_engine_answers_the_protocol():
    assert engine_names() == ("sglang", "vllm", "trtllm")
    for name in engine_names():
        engine = get_engine(name)
        assert isinstance(engine, Engine) and engine.name == name
        assert engine.ready_lines and engine.fatal_lines and engine.title and engine.newest
        # Each engine's data rows are its own; every fatality row names a family it runs.
        rows = facts(name)
        assert rows.rules and rows.fatalities and rows.remedies
        assert {r["engine"] for r in rows.rules + rows.fatalities + rows.remedies} == {name}


@pytest.mark.parametrize("name", ["tgi", "", "sglang2", "lmdeploy"])
def test_unknown_engine_lists_the_known_ones(name):
    with pytest.raises(UsageError, match="unknown engine .*use one of sglang, vllm, trtllm"):
        get_engine(name)


def test_spellings():
    assert get_engine("TensorRT-LLM") is get_engine("trtllm") is get_engine(" trt-llm ")
    assert get_engine("SGLang").name == "sglang"


def test_engines_without_triton_files_say_so():
    # TensorRT-LLM's MoE runs CUTLASS tactics its autotuner picks: no Triton files or defaults,
    # and no vLLM/SGLang answer in their place.
    trt = get_engine("trtllm")
    assert trt.tuned_config_env is None
    with pytest.raises(UsageError, match="TensorRT-LLM"):
        trt.find_tuned_config(E=8, N=128, device_name="NVIDIA H200", weight_dtype="bf16")
    with pytest.raises(UsageError, match="TensorRT-LLM"):
        trt.default_configs([1], E=8, weight_dtype="bf16", arch="sm90")


@pytest.mark.parametrize("name,flags,want", [
    ("sglang", dict(tp=8, ep=8), (1, 8, 1, 8)),  # EP carved out of the TP group: 8 GPUs, not 64
    ("sglang", dict(tp=8, ep=4, dp=2, enable_dp_attention=True), (2, 4, 2, 8)),
    ("vllm", dict(tp=4, dp=2, enable_expert_parallel=True), (1, 8, 2, 8)),  # EP over tp x dp
    ("vllm", dict(tp=4, dp=2), (8, 1, 2, 8)),  # MoE TP flattened over tp x dp
    ("trtllm", dict(tp=8, ep=4), (2, 4, 1, 8)),  # ep_size x moe tp = tp_size
])
def test_layout_reads_the_flags_with_the_engines_meaning(name, flags, want):
    lay = get_engine(name).layout(**flags)
    assert (lay.tp, lay.ep, lay.dp, lay.gpus) == want
