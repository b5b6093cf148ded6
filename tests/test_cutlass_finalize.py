"""gemm2's tactic list with fused finalize off: FlashInfer (>= 0.6.15) leaves the FINALIZE copies
out, so the swap-AB copies after them take lower ids; blocklists must use those ids.
Facts from the flashinfer-python wheels (flashinfer_cutlass_fused_moe_binding.cu sets
use_fused_finalize_ before getTactics in 0.6.15-0.7.4, not in 0.6.14)."""

import json

from tilefit.hw.catalog import get_arch
from tilefit.kernels.flashinfer_cutlass import FAMILY, catalog

SM120 = get_arch("sm120")


def test_finalize_off_drops_copies_and_moves_ids():
    on = catalog.tactics("sm120", "nvfp4", "0.7.4")
    off = catalog.tactics("sm120", "nvfp4", "0.7.4", fused_finalize=False)
    g1 = [t for t in on if t.gemm == "gemm1"]
    assert len(on) == 48 and len(off) == 48 - 16  # gemm2's 8 FINALIZE copies and their swap-AB twins
    assert not any(t.fusion == "finalize" for t in off)
    first_swap_on = next(t for t in on if t.gemm == "gemm2" and t.swap_ab)
    first_swap_off = next(t for t in off if t.gemm == "gemm2" and t.swap_ab)
    assert first_swap_on.tactic_id == len(g1) + 16 and first_swap_off.tactic_id == len(g1) + 8
    assert [t.tactic_id for t in off] == list(range(len(off)))


def test_before_the_switch_finalize_copies_stay():
    on = catalog.tactics("sm120", "nvfp4", "0.6.14")
    off = catalog.tactics("sm120", "nvfp4", "0.6.14", fused_finalize=False)
    assert on == off and any(t.fusion == "finalize" for t in off)


def test_blocklist_ids_follow_the_profiled_list():
    def ids(ff: bool) -> list[int]:
        ts = FAMILY.configs(SM120, "nvfp4", flashinfer="0.7.4", fused_finalize=ff)
        doc = json.loads(FAMILY.blocklist([FAMILY.verdict(t, SM120, "nvfp4", "0.7.4") for t in ts],
                                          "0.7.4", gpu_name="NVIDIA RTX PRO 6000 Blackwell").content)
        assert doc["_metadata"]["gpu"] == "NVIDIA RTX PRO 6000 Blackwell"
        return doc["invalid_tactics"].get("trtllm::fused_moe::gemm2::MoERunner", [])
    on, off = ids(True), ids(False)
    assert on and on != off  # the FINALIZE tactics that overflow are not in the off list at all
