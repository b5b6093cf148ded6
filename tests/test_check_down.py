"""`check` judges SGLang's separately tuned gemm2 (`_down`) file as SGLang runs it: every entry on
the GPU's shared memory, and an entry whose BLOCK_SIZE_M is not gemm1's at that batch as the
release treats it (an assertion through 0.5.12.post1, gemm1's BLOCK_SIZE_M from 0.5.13:
fused_moe_triton_config.py try_get_optimal_moe_config in the sglang wheels)."""

from __future__ import annotations

import json

import pytest

from tilefit.engines.triton_moe import installed_triton_version

OK = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
      "num_stages": 3}
NAME = "E=128,N=192,device_name=NVIDIA_GeForce_RTX_5090"


def _files(root, up, down):
    triton = installed_triton_version()
    if triton is None:
        pytest.skip("SGLang keeps its files per Triton version and Triton is not installed")
    folder = root / "configs" / ("triton_" + "_".join(triton.split(".")[:3]))
    folder.mkdir(parents=True)
    (folder / f"{NAME}.json").write_text(json.dumps(up))
    if down is not None:
        (folder / f"{NAME}_down.json").write_text(json.dumps(down))


def _check(cli, root, version):
    return cli("check", "--model", "qwen3-30b-a3b", "--gpu", "rtx-5090", "--tp", "4", "--engine",
               "sglang", "--engine-version", version, "--config-dir", str(root), "--json")


def _kinds(d):
    return {f["kind"]: f for f in d["findings"]}


def test_a_down_entry_too_big_for_sm120_is_fatal(cli, tmp_path):
    big = dict(OK, BLOCK_SIZE_N=256, BLOCK_SIZE_K=128, num_stages=4)  # fits an H100, not sm120
    _files(tmp_path, {"1": OK, "4096": OK}, {"1": OK, "4096": big})
    r = _check(cli, tmp_path, "0.5.23")
    assert r.code == 1, r.err
    fatal = _kinds(r.json())["down-config-exceeds-smem"]
    assert fatal["severity"] == "fatal" and [i["batch"] for i in fatal["items"]] == [4096]
    assert r.json()["checked"]["configs"] == 4  # both files' entries


def test_without_a_down_file_nothing_more_is_said(cli, tmp_path):
    _files(tmp_path, {"1": OK, "4096": OK}, None)
    d = _check(cli, tmp_path, "0.5.23").json()
    assert not {k for k in _kinds(d) if k.startswith("down-")} and d["checked"]["configs"] == 2


def test_another_block_m_is_an_assertion_before_0_5_13_and_gemm1s_after(cli, tmp_path):
    # gemm2's entry asks 16x64x128 in 4 stages: as written it fits sm120 (61,440 B), run with
    # gemm1's BLOCK_SIZE_M 128 it does not (147,456 B of 101,376).
    down = dict(OK, BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, num_stages=4)
    _files(tmp_path, {"1": OK, "4096": dict(OK, BLOCK_SIZE_M=128)}, {"1": OK, "4096": down})
    old = _check(cli, tmp_path, "0.5.12")
    assert old.code == 1
    kinds = _kinds(old.json())
    assert kinds["down-config-block-m"]["severity"] == "fatal"
    assert "down-config-exceeds-smem" not in kinds  # as written, every entry fits
    new = _check(cli, tmp_path, "0.5.13")
    kinds = _kinds(new.json())
    assert kinds["down-config-block-m"]["severity"] == "info"
    assert [i["batch"] for i in kinds["down-config-exceeds-smem"]["items"]] == [4096]
    assert kinds["down-config-exceeds-smem"]["items"][0]["config"]["BLOCK_SIZE_M"] == 128


def test_releases_that_read_no_down_file_are_not_judged_on_it(cli, tmp_path):
    # sglang reads `_down` files from 0.5.4.post2; tilefit reads 0.5.4's post releases as 0.5.4.
    down = dict(OK, BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, num_stages=4)
    _files(tmp_path, {"1": OK, "4096": dict(OK, BLOCK_SIZE_M=128)}, {"1": OK, "4096": down})
    kinds = _kinds(_check(cli, tmp_path, "0.5.4").json())
    assert not {k for k in kinds if k.startswith("down-")}


def test_without_a_version_a_block_m_mismatch_is_a_warning_naming_both_behaviours(cli, tmp_path):
    down = dict(OK, BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, num_stages=4)
    _files(tmp_path, {"1": OK, "4096": dict(OK, BLOCK_SIZE_M=128)}, {"1": OK, "4096": down})
    r = cli("check", "--model", "qwen3-30b-a3b", "--gpu", "rtx-5090", "--tp", "4", "--engine", "sglang",
            "--config-dir", str(tmp_path), "--json")
    found = _kinds(r.json())["down-config-block-m"]
    assert found["severity"] == "warning" and "0.5.13" in found["title"]


def test_pairs_the_two_files_as_the_engine_selects_them_at_every_batch(cli, tmp_path):
    # gemm1 keys 1 and 4096, _down keys 1, 64 and 4096: batch 64 takes gemm1's key-1 entry (BM 64)
    # and the _down key-64 entry (BM 16), a pair neither key set shows alone.
    _files(tmp_path, {"1": OK, "4096": dict(OK, BLOCK_SIZE_M=128)},
           {"1": OK, "64": dict(OK, BLOCK_SIZE_M=16), "4096": dict(OK, BLOCK_SIZE_M=128)})
    found = _kinds(_check(cli, tmp_path, "0.5.12").json())["down-config-block-m"]
    assert found["severity"] == "fatal" and any(i.startswith("batch 64 (gemm1 key 1)") for i in found["details"])
