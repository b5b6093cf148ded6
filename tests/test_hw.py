"""GPU and arch catalog: limits from the CUDA Programming Guide and CUTLASS arch.h, lookups by every spelling, clear errors."""

from __future__ import annotations

import pytest

from tilefit.errors import UsageError
from tilefit.hw.catalog import all_archs, all_gpus, get_arch, get_gpu, resolve_target

REQUIRED = ["a100", "rtx-3090", "rtx-a6000", "rtx-4090", "l40s", "h100", "h200", "b200", "gb200",
            "rtx-5090", "rtx-pro-6000", "dgx-spark"]


@pytest.mark.parametrize("arch, per_sm, optin, threads", [
    ("sm80", 167936, 166912, 2048), ("sm86", 102400, 101376, 1536), ("sm89", 102400, 101376, 1536),
    ("sm90", 233472, 232448, 2048), ("sm100", 233472, 232448, 2048), ("sm103", 233472, 232448, 2048),
    ("sm120", 102400, 101376, 1536), ("sm121", 102400, 101376, 1536),
])
def test_arch_limits(arch, per_sm, optin, threads):
    a = get_arch(arch)
    assert (a.smem_per_sm, a.smem_per_block_optin, a.max_threads_per_sm) == (per_sm, optin, threads)
    assert a.smem_per_block_optin == a.smem_per_sm - 1024  # CUDA's 1 KB reserve per block
    assert a.regs_per_sm == 65536 and a.smem_alloc_unit == 128


def test_catalog_has_every_required_gpu_with_sources():
    keys = {g.key for g in all_gpus()}
    assert set(REQUIRED) <= keys
    for g in all_gpus():
        assert g.sm_count > 0 and g.mem_bandwidth_gbps > 0 and g.peak_tflops("bf16")
        assert {"sm_count", "memory", "tflops", "interconnect"} <= {f for f, _ in g.sources}
        assert all(src for _, src in g.sources)


@pytest.mark.parametrize("spelling, key", [
    ("rtx-pro-6000", "rtx-pro-6000"), ("rtxpro6000", "rtx-pro-6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
    ("NVIDIA_H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA GeForce RTX 5090", "rtx-5090"),
    ("GB10", "dgx-spark"), ("l40s", "l40s"),
])
def test_gpu_spellings(spelling, key):
    assert get_gpu(spelling).key == key


def test_sm_counts_from_facts():
    assert get_gpu("rtx-5090").sm_count == 170
    assert get_gpu("rtx-pro-6000").sm_count == 188
    assert get_gpu("h200").sm_count == 132


@pytest.mark.parametrize("spelling, name", [("sm_120a", "sm120"), ("120", "sm120"), ("12.1", "sm121"),
                                            ("SM90", "sm90"), ("compute_89", "sm89")])
def test_arch_spellings(spelling, name):
    assert get_arch(spelling).name == name


def test_unknown_names_suggest_and_point_to_listing():
    with pytest.raises(UsageError, match=r"did you mean 'rtx-5090'.*tilefit gpus"):
        get_gpu("rtx5900")
    with pytest.raises(UsageError, match="tilefit gpus"):
        get_arch("sm75")


def test_resolve_target():
    gpu, arch = resolve_target("rtx-pro-6000", None)
    assert gpu.key == "rtx-pro-6000" and arch.name == "sm120"
    assert resolve_target(None, "sm90") == (None, get_arch("sm90"))
    with pytest.raises(UsageError, match="not sm90"):
        resolve_target("rtx-5090", "sm90")


def test_archs_sorted_and_unique():
    ccs = [a.cc for a in all_archs()]
    assert ccs == sorted(ccs) and len(set(ccs)) == len(ccs)


@pytest.mark.parametrize("other_product", ["NVIDIA H100 PCIe", "NVIDIA H200 NVL"])
def test_other_products_are_not_matched_by_prefix(other_product):
    with pytest.raises(UsageError, match="unknown GPU"):
        get_gpu(other_product)


def test_memory_is_the_drivers_total_in_bytes():
    # nvidia-smi memory.total: 32607 MiB on an RTX 5090, 97887 MiB on an RTX PRO 6000 Blackwell
    assert get_gpu("rtx-5090").memory_bytes == 32607 * 2**20
    assert get_gpu("rtx-pro-6000").memory_bytes == 97887 * 2**20
    assert all(g.memory_mib > 0 for g in all_gpus())
