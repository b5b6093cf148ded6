"""check judges the tactic list the engine release really profiles: the FlashInfer its wheel pins
(sglang 0.5.20 -> flashinfer-python 0.6.18, 0.5.23 -> 0.7.2; Requires-Dist in the wheels'
METADATA) with fused finalize as that release sets it, and the blocklist carries those ids."""

import json

from tilefit.engines.pins import flashinfer_pin
from tilefit.kernels.flashinfer_cutlass import catalog

BASE = ("check", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--ep", "8", "--engine", "sglang",
        "--json")


def test_pins_read_from_the_wheels():
    assert flashinfer_pin("sglang", "0.5.23") == "0.7.2"
    assert flashinfer_pin("sglang", "0.5.13.post1") == "0.6.12"
    assert flashinfer_pin("vllm", "0.15.1") == "0.6.1"
    assert flashinfer_pin("sglang", None) is None and flashinfer_pin("sglang", "9.9.9") is None


def test_sglang_0_5_20_profiles_flashinfer_0_6_18_with_finalize(cli):
    d = cli(*BASE, "--engine-version", "0.5.20").json()
    assert d["checked"]["flashinfer"] == "0.6.18" and d["checked"]["tactics"] == 60
    fix = next(f for f in d["findings"] if f["kind"] == "tactics-cannot-launch")["remedies"]
    setting = next(r["setting"] for r in fix if r["kind"] == "blocklist")
    doc = json.loads(setting.split("<file.json>:\n", 1)[1])
    assert doc["_metadata"]["flashinfer_version"] == "0.6.18"
    ids = doc["invalid_tactics"]["trtllm::fused_moe::gemm2::MoERunner"]
    listed = {t.tactic_id: t for t in catalog.tactics("sm120", "nvfp4", "0.6.18")}
    assert {(listed[i].tile, listed[i].fusion) for i in ids} >= {((128, 256, 128), "finalize")}


def test_sglang_0_5_23_profiles_0_7_2_without_finalize(cli):
    d = cli(*BASE, "--engine-version", "0.5.23").json()
    assert d["checked"]["flashinfer"] == "0.7.2" and d["checked"]["tactics"] == 48 - 16
    assert not [f for f in d["findings"] if f["kind"] == "tactics-cannot-launch"]
