"""fp8 tiles with BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64, which vLLM (>= 0.25) and SGLang compute
as B^T A^T on sm90 (vllm fused_moe/utils.py enable_swap_ab, 0.25.0-0.33.0; sglang
fused_moe_triton_kernels.py should_enable_swap_ab, 0.5.10-0.5.23): the engines' fact, the shared
memory of the swapped kernel (its own recorded table, sm90), and how check, fit and tune follow it."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from tilefit.engines import get_engine
from tilefit.hw.catalog import get_arch
from tilefit.kernels.triton_moe import FAMILY, smem
from tilefit.kernels.triton_moe.config import MoEConfig, swap_ab_tile

from test_triton_smem import TABLE, _recorded

SM90 = get_arch("sm90")


@pytest.mark.parametrize("engine, version, dtype, arch, want", [
    ("vllm", None, "fp8-block", "sm90", True), ("vllm", "0.25.0", "fp8", "sm90", True),
    ("vllm", "0.24.0", "fp8-block", "sm90", False),  # no swap-AB path before 0.25.0
    ("sglang", None, "fp8-block", "sm90", True), ("sglang", "0.5.10", "fp8", "sm90", True),
    ("sglang", None, "fp8-block", "sm120", False), ("sglang", None, "bf16", "sm90", False),
])
def test_which_engines_swap(engine, version, dtype, arch, want):
    assert get_engine(engine).swap_ab_path(dtype, arch, version) is want


def test_the_swapped_tiles():
    assert swap_ab_tile(MoEConfig(16, 64, 128, 1, 4, 3)) and swap_ab_tile(MoEConfig(32, 256, 128, 1, 4, 3))
    assert not swap_ab_tile(MoEConfig(64, 128, 128, 1, 4, 3)) and not swap_ab_tile(MoEConfig(16, 32, 128, 1, 4, 3))
    assert get_engine("vllm").swaps_ab(MoEConfig(16, 64, 128, 1, 4, 3).as_dict(), "fp8-block", "sm90")
    assert not get_engine("vllm").swaps_ab(MoEConfig(16, 64, 128, 1, 4, 3).as_dict(), "fp8-block", "sm90",
                                           "0.24.0")


@pytest.mark.parametrize("dtype, scales", [("fp8", "column"), ("fp8-block", "column"), ("fp8-block", "row")])
def test_swapped_model_equals_oracle_and_never_needs_less(dtype, scales):
    """Every swapped tile of the grid on sm90, model == recorded oracle; the swapped kernel keeps
    num_stages buffers where the narrow unswapped one keeps num_stages - 1."""
    table = smem.table_dtype(dtype, scales, True)
    more = 0
    for c in FAMILY.configs(SM90, dtype):
        plain = smem.total_bytes(c, SM90, dtype, scales)
        got = smem.total_bytes(c, SM90, dtype, scales, swap_ab=True)
        if not swap_ab_tile(c):
            assert got == plain  # only the engines' swapped tiles change
            continue
        assert got == _recorded("sm90", table, c) == FAMILY.footprint(
            c, SM90, dtype, scales=scales, swap_ab=True).total, c.label()
        assert got >= plain
        more += got > plain
    assert more > 0


def test_bf16_is_never_swapped():
    c = MoEConfig(16, 64, 128, 1, 4, 3)
    assert smem.total_bytes(c, SM90, "bf16", swap_ab=True) == smem.total_bytes(c, SM90, "bf16")


def test_a_tile_that_fits_unswapped_does_not_fit_swapped_on_the_h200():
    c = MoEConfig(16, 256, 256, 1, 4, 4)  # per-tensor fp8: 3 x 69,632 B unswapped, 4 x swapped
    assert FAMILY.verdict(c, SM90, "fp8").fits
    assert not FAMILY.verdict(c, SM90, "fp8", swap_ab=True).fits
    fp = FAMILY.footprint(c, SM90, "fp8", swap_ab=True)
    assert any("swap-AB" in n for n in fp.notes)


def test_check_judges_a_vllm_file_as_vllm_runs_it_on_the_h200(cli, tmp_path):
    name = "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    wide = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 1,
            "num_warps": 4, "num_stages": 4}
    (tmp_path / name).write_text(json.dumps({"triton_version": "3.6.0", "1": wide}))
    args = ("check", "--model", str(FIXTURES / "configs" / "qwen3-30b-fp8-tensor"), "--gpu", "h200",
            "--tp", "2", "--engine", "vllm", "--backend", "triton", "--config-dir", str(tmp_path), "--json")
    r = cli(*args)
    assert r.code == 1, r.err
    fatal = [f for f in r.json()["findings"] if f["severity"] == "fatal"][0]
    assert fatal["kind"] == "tuned-config-exceeds-smem" and r.json()["checked"]["swap_ab"] is True
    old = cli(*args, "--engine-version", "0.24.0")  # before vLLM's swap-AB path: it fits
    assert old.code == 0, old.err


def test_fit_takes_swap_ab(cli):
    r = cli("fit", "--family", "triton-moe", "--arch", "sm90", "--dtype", "fp8", "--config",
            "16,64,128,1,4,4", "--swap-ab", "--json")
    plain = cli("fit", "--family", "triton-moe", "--arch", "sm90", "--dtype", "fp8", "--config",
                "16,64,128,1,4,4", "--json")
    assert r.code == plain.code == 0, (r.err, plain.err)
    assert (r.json()[0]["smem_bytes"], plain.json()[0]["smem_bytes"]) == (40960, 30720)


@pytest.fixture
def h200(monkeypatch):
    from tilefit.cli import tune_cmd

    monkeypatch.setattr(tune_cmd, "_local_gpus", lambda: ([0], "NVIDIA H200"))


def test_tune_times_the_swapped_tiles_for_engines_that_swap(h200, tmp_path):
    from tilefit.cli import tune_cmd
    from tilefit.cli.main import build_parser
    from tilefit.tune.targets.tilefit_moe import TilefitMoETarget

    def req(*argv):
        return tune_cmd.build_request(build_parser().parse_args(["tune", "--out", str(tmp_path), *argv]))

    sg = req("--model", "glm-5-fp8", "--ep", "8", "--emit", "sglang")
    assert dict(sg.target.kwargs)["swap_ab"] is True and sg.provenance["swap_ab"] is True
    old = req("--model", "glm-5-fp8", "--ep", "8", "--emit", "vllm,sglang", "--engine-version", "0.24.0")
    assert dict(old.target.kwargs)["swap_ab"] is False
    assert dict(req("--model", "glm-5-fp8", "--ep", "8").target.kwargs)["swap_ab"] is False
    assert dict(req("--model", "glm-5", "--ep", "8", "--emit", "sglang").target.kwargs)["swap_ab"] is False
    t = TilefitMoETarget(gpu="h200", swap_ab=True, scales="row")
    assert t.journal_name == "tilefit+row-scale+swap-ab"
