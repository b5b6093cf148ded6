"""fp8-block weight scales per column (vLLM's fused-MoE kernel) or per row where a tile's columns
share one scale block (SGLang's, from 0.5.4.post2): the engines' fact, and how check, fit and tune
follow it. The shared memory of each form is held against the compiler in test_triton_smem.py."""

from __future__ import annotations

import pytest

from tilefit.cli import tune_cmd, tune_engines
from tilefit.cli.main import build_parser
from tilefit.engines import get_engine
from tilefit.errors import UsageError


@pytest.mark.parametrize("engine, version, want", [
    ("sglang", None, "row"),  # the newest read
    ("sglang", "0.5.23", "row"), ("sglang", "0.5.10", "row"), ("sglang", "0.5.5", "row"),
    ("sglang", "0.5.4", "column"),  # 0.5.4 and 0.5.4.post1 wheels: offs_bsn = offs_bn // group_n
    ("sglang", "0.4.10", "column"),
    ("vllm", None, "column"), ("vllm", "0.11.1", "column"), ("vllm", "0.33.0", "column"),
])
def test_each_engine_applies_the_scales_as_its_wheels_do(engine, version, want):
    assert get_engine(engine).block_scales(version) == want


def test_an_engine_without_the_triton_kernel_says_so():
    with pytest.raises(UsageError, match="TensorRT-LLM"):
        get_engine("trtllm").block_scales()


@pytest.mark.parametrize("dtype, emit, want", [
    ("fp8-block", ("sglang",), "row"),
    ("fp8-block", ("vllm",), "column"),
    ("fp8-block", ("vllm", "sglang"), "column"),  # one tuning for both: vLLM's form, sidecar says so
    ("fp8-block", (), "column"),  # tilefit's own file: its kernel's default
    ("bf16", ("sglang",), "column"),  # no scales to apply
])
def test_tune_times_the_form_of_the_engines_it_writes_for(dtype, emit, want):
    assert tune_engines.block_scales(dtype, emit, None) == want


def test_an_older_sglang_release_is_tuned_per_column():
    assert tune_engines.block_scales("fp8-block", ("sglang",), "0.5.4") == "column"


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.setattr(tune_cmd, "_local_gpus", lambda: ([0], "NVIDIA H200"))


def _request(tmp_path, *argv):
    return tune_cmd.build_request(build_parser().parse_args(["tune", "--out", str(tmp_path), *argv]))


def test_an_sglang_launch_command_tunes_the_row_form(h200, tmp_path):
    req = _request(tmp_path, "--", "python3", "-m", "sglang.launch_server", "--model-path",
                   "zai-org/GLM-5-FP8", "--tp", "8", "--ep", "8")
    assert req.shapes[0].dtype == "fp8-block"
    assert dict(req.target.kwargs)["scales"] == "row" and req.provenance["block_scales"] == "row"
    vllm = _request(tmp_path, "--", "vllm", "serve", "zai-org/GLM-5-FP8", "-tp", "8")
    assert dict(vllm.target.kwargs)["scales"] == "column"
    bf16 = _request(tmp_path, "--model", "glm-5", "--ep", "8", "--emit", "sglang")
    assert "block_scales" not in bf16.provenance


def test_the_row_form_keeps_journal_lines_of_its_own():
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    assert TilefitMoETarget(gpu="h200").journal_name == "tilefit"
    assert TilefitMoETarget(gpu="h200", scales="row").journal_name == "tilefit+row-scale"
    with pytest.raises(ValueError, match="scales must be one of column, row"):
        TilefitMoETarget(gpu="h200", scales="rows")


def test_the_row_form_is_judged_by_its_own_table():
    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.tune.targets.base import TuneShape
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    shape = TuneShape("gemm1", 32, 6144, 2048, 8, "fp8-block", 256)
    cfg = MoEConfig(64, 128, 128, 1, 4, 4)
    column = TilefitMoETarget(gpu="h200").smem_bytes(cfg, shape)
    row = TilefitMoETarget(gpu="h200", scales="row").smem_bytes(cfg, shape)
    assert (column, row) == (98816, 98304)  # Triton 3.6.0 on sm90, the recorded oracle figures


def test_the_emitted_file_of_an_engine_timed_in_the_other_form_says_so():
    from tilefit.tune.emit import _scales_caveat

    sglang, vllm = get_engine("sglang"), get_engine("vllm")
    line = _scales_caveat(sglang, "fp8-block", "column", None)
    assert "SGLang applies fp8 block weight scales per row" in line and "--emit sglang alone" in line
    assert _scales_caveat(sglang, "fp8-block", "row", None) == ""
    assert _scales_caveat(vllm, "fp8-block", "column", None) == ""
    assert _scales_caveat(sglang, "bf16", "column", None) == ""
    assert _scales_caveat(sglang, "fp8-block", "column", "0.5.4") == ""  # that release: per column


def test_fit_takes_the_form_for_triton_moe_only(cli):
    row = cli("fit", "--family", "triton-moe", "--arch", "sm90", "--dtype", "fp8-block", "--config",
              "64,128,128,1,4,4", "--scales", "row", "--json")
    column = cli("fit", "--family", "triton-moe", "--arch", "sm90", "--dtype", "fp8-block",
                 "--config", "64,128,128,1,4,4", "--json")
    assert row.code == column.code == 0, (row.err, column.err)
    assert [r["smem_bytes"] for r in row.json()] == [98304]
    assert [r["smem_bytes"] for r in column.json()] == [98816]
    bad = cli("fit", "--family", "flashinfer-cutlass", "--arch", "sm90", "--scales", "row")
    assert bad.code == 2 and "--scales applies to --family triton-moe only" in bad.err


# ------------------------------------------------------------------ what the engines run as tuned
# Neither engine runs an fp8-block BLOCK_SIZE_K wider than the 128-wide scale block as tilefit's
# kernel does (vLLM clamps it, SGLang would scale two groups by one: Engine.runs_as_tuned). A run
# that writes their files searches only the rest: on the H200 (session 11) a search of the whole
# grid left SGLang's file at batch 1 with a finalist 1.9x slower than a 128-wide config it had timed.

def test_a_run_for_the_engines_searches_only_what_they_run_as_tuned():
    from tilefit.tune.targets.base import TuneShape
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    fp8 = TuneShape("gemm1", 32, 6144, 2048, 8, "fp8-block", 256)
    everything = TilefitMoETarget(gpu="h200").space(fp8)
    for engines in (("sglang",), ("vllm",), ("vllm", "sglang")):
        kept = TilefitMoETarget(gpu="h200", engines=engines).space(fp8)
        assert kept == [c for c in everything if c.block_k <= 128] and len(kept) < len(everything)
    bf16 = fp8.__class__("gemm1", 32, 6144, 2048, 8, "bf16", 256)
    assert TilefitMoETarget(gpu="h200", engines=("sglang",)).space(bf16) == \
        TilefitMoETarget(gpu="h200").space(bf16)


def test_the_summary_says_what_was_searched(h200, tmp_path):
    req = _request(tmp_path, "--", "python3", "-m", "sglang.launch_server", "--model-path",
                   "zai-org/GLM-5-FP8", "--tp", "8", "--ep", "8")
    assert dict(req.target.kwargs)["engines"] == ("sglang",)
    # BLOCK_SIZE_K 64 and 128 of the grid's three (64, 128, 256)
    assert req.provenance["searched"].startswith("searched 1,280 of the 1,920 configs: the ones SGLang runs")
    own = _request(tmp_path, "--model", "glm-5-fp8", "--ep", "8")
    assert "searched" not in own.provenance


def test_two_engines_are_named_together(h200, tmp_path):
    req = _request(tmp_path, "--model", "glm-5-fp8", "--ep", "8", "--emit", "vllm,sglang")
    assert req.provenance["searched"].endswith("the ones vLLM and SGLang run as tuned")
    assert dict(req.target.kwargs)["scales"] == "column"  # one tuning for both: vLLM's form
