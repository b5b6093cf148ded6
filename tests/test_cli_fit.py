"""`tilefit fit`: both families through the generic command; JSON shape, exit codes, bad input."""

from __future__ import annotations

import pytest


def test_triton_grid_summary_on_sm120(cli):
    r = cli("fit", "--family", "triton-moe", "--arch", "sm120")
    assert r.code == 0, r.err
    first = r.out.splitlines()[0]
    assert "1920 config(s)" in first and "101,376" in first
    assert "cannot launch on sm120" in r.out and "--all" in r.out


def test_triton_json_rows_have_the_documented_keys(cli):
    rows = cli("fit", "--family", "triton-moe", "--gpu", "h200", "--json").json()
    assert len(rows) == 1920
    need = {"config", "arch", "smem_bytes", "limit_bytes", "fits", "source"}
    assert all(need <= set(r) for r in rows)
    assert set(rows[0]["config"]) == {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M",
                                      "num_warps", "num_stages"}
    assert all(r["source"] == "model" and r["limit_bytes"] == 232448 and r["fits"] == (r["smem_bytes"] <= 232448)
               for r in rows)
    assert sum(not r["fits"] for r in rows) == 616  # measured on an H200 (benchmarks/RESULTS.md): 616 of 1920 fail


def test_triton_single_config_that_does_not_fit_exits_1(cli):
    r = cli("fit", "--family", "triton-moe", "--arch", "sm120", "--dtype", "fp8", "--config", "128,256,128,1,8,4",
            "--json")
    assert r.code == 1
    row = r.json()[0]
    assert row["fits"] is False and row["smem_bytes"] > 101376 and row["margin_bytes"] < 0


def test_triton_fp8_block_takes_the_narrow_tiles_with_recorded_figures(cli):
    """BLOCK_SIZE_N 32/64 and BLOCK_SIZE_K 64 are on the fp8-block grid (the kernel reads the weight
    scale per column and the K scale per step): exact figures, not extrapolations."""
    import json
    from importlib import resources

    table = json.loads((resources.files("tilefit.kernels.triton_moe") / "data" /
                        "oracle_triton-3.6.0.json").read_text())["entries"]
    r = cli("fit", "--family", "triton-moe", "--gpu", "h200", "--dtype", "fp8-block",
            "--config", "16,32,64,1,4,5", "--config", "16,64,128,1,4,4", "--json")
    assert r.code == 0, r.err
    got = {tuple(row["config"].values()): row["smem_bytes"] for row in r.json()}
    assert got == {(16, 32, 64, 1, 4, 5): table["sm90/fp8-block/16,32,64,4,5"],
                   (16, 64, 128, 1, 4, 4): table["sm90/fp8-block/16,64,128,4,4"]}
    every = cli("fit", "--family", "triton-moe", "--gpu", "h200", "--dtype", "fp8-block", "--json").json()
    assert len(every) == 1920 and sum(not row["fits"] for row in every) == 224


def test_cutlass_sm120_nvfp4_lists_every_tactic_and_marks_failures(cli):
    rows = cli("fit", "--family", "flashinfer-cutlass", "--gpu", "rtx-pro-6000", "--dtype", "nvfp4", "--json").json()
    over = [r for r in rows if r["status"] == "exceeds-smem"]
    assert over and all(r["config"]["fusion"] == "finalize" and r["config"]["gemm"] == "gemm2" for r in over)
    assert {tuple(r["config"]["tile"]) for r in over} == {(128, 256, 128), (256, 128, 128)}
    assert all(r["smem_bytes"] == 102400 and r["stages"] == 3 for r in over)
    text = cli("fit", "--family", "flashinfer-cutlass", "--gpu", "rtx-pro-6000", "--dtype", "nvfp4").out
    assert text.count("EXCEEDS") == len(over) and "fits" in text  # the whole list, failures marked


def test_cutlass_blocklist_is_json_for_flashinfer(cli):
    import json

    r = cli("fit", "--family", "flashinfer-cutlass", "--arch", "sm120", "--dtype", "nvfp4", "--emit-blocklist")
    assert r.code == 0
    data = json.loads(r.out)
    assert "invalid_tactics" in data


@pytest.mark.parametrize("args, needle", [
    (["--family", "triton"], "did you mean 'triton-moe'"),
    (["--family", "triton-moe", "--arch", "sm75"], "tilefit gpus"),
    (["--family", "triton-moe", "--arch", "sm120", "--config", "100,64,64,1,4,3"], ""),
    (["--family", "triton-moe", "--arch", "sm120", "--config", "64,64"], ""),
    (["--family", "triton-moe", "--arch", "sm120", "--config", "512,64,64,1,4,3"], ""),
    (["--family", "triton-moe", "--arch", "sm80", "--dtype", "fp8"], "fp8"),
    (["--family", "triton-moe", "--arch", "sm120", "--flashinfer", "0.5.2"], "flashinfer-cutlass only"),
    (["--family", "flashinfer-cutlass", "--arch", "sm90", "--dtype", "nvfp4"], "nvfp4"),
    (["--family", "flashinfer-cutlass", "--arch", "sm120", "--dtype", "nvfp4", "--config", "96x96x96"], ""),
    (["--family", "triton-moe", "--arch", "sm120", "--emit-blocklist"], "blocklist"),
])
def test_bad_input_exits_2(cli, args, needle):
    r = cli("fit", *args)
    assert r.code == 2, (r.out, r.err)
    assert needle in r.err and "Traceback" not in r.err and r.err.strip().count("\n") == 0


def test_no_target_and_no_local_gpu(cli, monkeypatch):
    monkeypatch.setattr("tilefit.hw.catalog.detect_local_gpu", lambda: None)
    r = cli("fit", "--family", "triton-moe")
    assert r.code == 2 and "--gpu NAME or --arch smXX" in r.err


def test_a_flashinfer_newer_than_the_catalog_gets_a_note(cli):
    r = cli("fit", "--family", "flashinfer-cutlass", "--arch", "sm120", "--dtype", "nvfp4", "--flashinfer", "9.9.9")
    assert r.code == 0 and "newer than the newest catalogued" in r.err
    r = cli("fit", "--family", "flashinfer-cutlass", "--arch", "sm120", "--dtype", "nvfp4", "--flashinfer", "0.7.4")
    assert "newer than" not in r.err


def test_sm120_nvfp4_tactic_list_golden(cli):
    from conftest import check_golden

    r = cli("fit", "--family", "flashinfer-cutlass", "--gpu", "rtx-pro-6000", "--dtype", "nvfp4")
    assert r.code == 0
    check_golden("fit_cutlass_sm120_nvfp4.txt", r.out)
    r = cli("fit", "--family", "flashinfer-cutlass", "--gpu", "rtx-pro-6000", "--dtype", "nvfp4", "--flashinfer", "0.7.0")
    check_golden("fit_cutlass_sm120_nvfp4_fi070.txt", r.out)


def test_a_bare_cutlass_tile_stands_for_all_its_tactics(cli):
    # sizeof(SharedStorage) compiled with nvcc 13.0 + CUTLASS for 128x256x128 (cutlass#3144): gemm1 98,304; FINALIZE 102,400 (over); FINALIZE+swap-AB 74,752.
    rows = cli("fit", "--family", "flashinfer-cutlass", "--arch", "sm120", "--config", "128x256x128", "--json").json()
    by = {(r["config"]["gemm"], r["config"]["fusion"], r["config"]["swap_ab"]): r["smem_bytes"] for r in rows}
    assert by[("gemm1", "none", False)] == 98304
    assert by[("gemm2", "finalize", False)] == 102400 and by[("gemm2", "finalize", True)] == 74752
    assert cli("fit", "--family", "flashinfer-cutlass", "--arch", "sm120", "--config", "128x256x128").code == 1


def test_emit_blocklist_for_a_qualified_config_carries_its_tactic_id(cli):
    import json

    r = cli("fit", "--family", "flashinfer-cutlass", "--arch", "sm120", "--config", "128x256x128 finalize",
            "--emit-blocklist")
    ids = json.loads(r.out)["invalid_tactics"]["trtllm::fused_moe::gemm2::MoERunner"]
    assert len(ids) == 1 and isinstance(ids[0], int)


def test_fit_notes_a_flashinfer_version_past_the_catalogue(cli):
    r = cli("fit", "--family", "flashinfer-cutlass", "--gpu", "rtx-pro-6000", "--dtype", "nvfp4",
            "--flashinfer", "0.9.9")
    assert r.code == 0 and "note: FlashInfer 0.9.9 is newer than the newest catalogued" in r.err
