"""Every real launch command in tests/fixtures/launch (copied from public issues, docs and
recipes; each file names its source) read as its engine reads it: GPU count, MoE layout and
attention split, and no flag dropped silently."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tilefit.launch import parse_launch
from tilefit.layout.plan import plan_layer
from tilefit.models.catalog import load_model

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "launch").glob("*.toml"))
# Where the fixture records an older engine's reading: sglang-10 is sglang 0.4.1's command, in
# which --enable-dp-attention alone set dp = tp; sglang 0.5.10-0.5.23 (server_args.py
# _handle_data_parallelism, arg_groups) turn DP attention off when --dp-size is 1.
READ_AS_0_5 = {"sglang-10": {"tp": 8, "dp": 1}}
# Per-GPU routed-expert GEMMs for commands whose model tilefit has as a preset:
# (local experts, gemm1 N, gemm1 K, gemm2 N, gemm2 K), worked out by hand from the configs
# (DeepSeek-V3/R1: H 7168, I 2048, E 256; Qwen3-235B: H 4096, I 1536, E 128; GLM-4.6: H 5120,
# I 1536, E 160).
SHAPES = {
    "sglang-6": ("deepseek-v3", (256, 512, 7168, 7168, 256)),  # TP8
    "sglang-15": ("deepseek-v3", (32, 4096, 7168, 7168, 2048)),  # --tp 8 --ep 8: EP8 on 8 GPUs
    "sglang-7": ("deepseek-v3", (16, 4096, 7168, 7168, 2048)),  # DeepEP: ep = tp = 16
    "sglang-18": ("qwen3-235b-a22b", (16, 3072, 4096, 4096, 1536)),  # --tp-size 8 --ep-size 8
    "sglang-13": ("glm-4.6", (160, 384, 5120, 5120, 192)),  # TP8
    "trtllm-2": ("deepseek-v3", (64, 2048, 7168, 7168, 1024)),  # tp 8, ep 4: MoE TP2 x EP4
    "trtllm-3": ("deepseek-v3", (32, 4096, 7168, 7168, 2048)),
    "vllm-12": ("deepseek-v3", (32, 4096, 7168, 7168, 2048)),  # -dp 8 --enable-expert-parallel
    "vllm-5": ("deepseek-v3", (8, 4096, 7168, 7168, 2048)),  # tp16 x dp2, EP32
    # gpt-oss-120b (H 2880, I 2880, E 128, MXFP4): TP4/TP8 leave 720/360 per rank, which the
    # engines pad to 768/384 (vLLM 0.33.0 oracle/mxfp4.py, sglang 0.5.23 quantization/mxfp4.py).
    "vllm-7": ("gpt-oss-120b", (128, 1536, 2880, 2880, 768)),
    "vllm-8": ("gpt-oss-120b", (128, 768, 2880, 2880, 384)),
    "trtllm-5": ("gpt-oss-120b", (32, 5760, 2880, 2880, 2880)),  # tp 4, ep 4: EP4, full width
}


def _load(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def test_corpus_is_large_enough():
    engines = {_load(p)["engine"] for p in FIXTURES}
    assert len(FIXTURES) >= 20 and engines == {"sglang", "vllm", "trtllm"}


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_launch_command_layout(path: Path):
    fx = _load(path)
    assert fx["source"]  # every command names where it was copied from
    spec = parse_launch(fx["command"], read_file=lambda _name: fx["yaml"])
    want = {"gpus": fx["gpus"], "tp": fx["tp"], "ep": fx["ep"], "dp": fx["dp"], "moe_tp": fx["moe_tp"]}
    want.update(READ_AS_0_5.get(path.stem, {}))
    lay = spec.layout
    assert spec.engine == fx["engine"]
    assert spec.model.rstrip("/") == fx["model"].rstrip("/")
    got = {"gpus": spec.gpus, "tp": lay.attention_tp, "ep": lay.ep, "dp": lay.dp, "moe_tp": lay.tp}
    assert got == want
    assert spec.headline().startswith(f"{spec.gpus} GPU")
    # No flag is dropped: every word after the entry point is a value, a used flag, or listed.
    listed = set(spec.ignored) | set(spec.unknown)
    for word in spec.argv:
        if word.startswith("--") and "=" not in word:
            assert word in listed or _used(spec, word), word


def _used(spec, word: str) -> bool:
    from tilefit.launch import sglang, trtllm, vllm

    table = {"sglang": sglang.TABLE, "vllm": vllm.TABLE, "trtllm": trtllm.TABLE}[spec.engine]
    names = {n for f in table for n in f.names}
    return word in names or word.replace("_", "-") in names or any(n.startswith(word) for n in names)


@pytest.mark.parametrize("stem", sorted(SHAPES))
def test_per_gpu_gemms(stem: str):
    fx = _load(next(p for p in FIXTURES if p.stem == stem))
    spec = parse_launch(fx["command"], read_file=lambda _name: fx["yaml"])
    preset, (groups, n1, k1, n2, k2) = SHAPES[stem]
    g1, g2 = plan_layer(load_model(preset), spec.layout).routed
    assert (g1.groups, g1.n, g1.k, g2.n, g2.k) == (groups, n1, k1, n2, k2)
