"""Shared memory of FlashInfer's grouped CUTLASS MoE kernels, computed without a compiler.

Flow: tactic + CUTLASS profile (data/cutlass.toml) -> the builder's stage count
(StageCountAutoCarveout<epilogue bytes> against the capacity that CUTLASS version leaves) -> the
kernel's SharedStorage laid out as C++ would (member alignment, struct rounding) -> SmemFootprint
terms. The epilogue's storage is read from the oracle's calibration table; all else is derived.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from tilefit._toml import load_package_toml
from tilefit.dtypes import BITS
from tilefit.errors import UsageError
from tilefit.kernels.base import SmemFootprint, SmemTerm
from tilefit.kernels.flashinfer_cutlass import calibration
from tilefit.kernels.flashinfer_cutlass.catalog import PACKAGE, Tactic, latest_version, parse_version

# CUTLASS detail::smX_smem_capacity_bytes (include/cutlass/arch/arch.h), what the builders divide.
BUILDER_CAPACITY = {"sm90": 232448, "sm100": 232448, "sm120": 101376}
# Block-scaled dtypes: (bits per element in smem for A, for B, scale-factor vector size).
# On the mixed MXF8F6F4 path FP4 occupies a whole byte in shared memory.
BLOCK_SCALED = {"nvfp4": (4, 4, 16), "mxfp8-mxfp4": (8, 8, 32)}
DENSE_BITS = {d: BITS[d] for d in ("fp8", "bf16")}


@dataclass(frozen=True, slots=True)
class Profile:
    cutlass: str
    flashinfer_min: tuple[int, ...]
    flashinfer_max: tuple[int, ...] | None
    values: tuple[tuple[str, int], ...]

    def __getitem__(self, key: str) -> int:
        return dict(self.values)[key]


@lru_cache(maxsize=1)
def _raw() -> dict:
    return load_package_toml(PACKAGE, "cutlass.toml")


def constant(name: str) -> int:
    return int(_raw()["constants"][name])


@lru_cache(maxsize=None)
def profile_for(flashinfer: str | None) -> Profile:
    """The CUTLASS constants of the version that FlashInfer `flashinfer` pins."""
    v = parse_version(flashinfer or latest_version())
    for p in _raw()["profile"]:
        lo = parse_version(p["flashinfer_min"])
        hi = parse_version(p["flashinfer_max"]) if p["flashinfer_max"] else None
        if lo <= v and (hi is None or v < hi):
            values = tuple((k, int(x)) for k, x in p.items() if isinstance(x, int))
            return Profile(p["cutlass"], lo, hi, values)
    raise UsageError(f"no CUTLASS profile for FlashInfer {flashinfer}; see data/cutlass.toml")


def profile_by_cutlass(cutlass: str) -> Profile:
    """The profile of one CUTLASS version (the calibration script measures per CUTLASS version)."""
    for p in _raw()["profile"]:
        if p["cutlass"] == cutlass:
            return profile_for(p["flashinfer_min"])
    raise UsageError(f"CUTLASS {cutlass} is not profiled; known: "
                     f"{', '.join(p['cutlass'] for p in _raw()['profile'])}")


def round_up(x: int, a: int) -> int:
    return -(-x // a) * a


class Layout:
    """Lays out struct members the way the C++ compiler does: each at its alignment, size rounded."""

    def __init__(self, align: int = 1) -> None:
        self.size = 0
        self.align = align
        self.offsets: dict[str, int] = {}

    def add(self, name: str, size: int, align: int) -> int:
        self.size = round_up(self.size, align)
        self.offsets[name] = self.size
        self.size += size
        self.align = max(self.align, align)
        return self.offsets[name]

    def total(self) -> int:
        return round_up(self.size, self.align)


@dataclass(frozen=True, slots=True)
class Epilogue:
    total: int  # sizeof(CollectiveEpilogue::SharedStorage): the builder's carve-out
    tensors: int
    pipeline: int
    tensormaps: int
    align: int  # alignof(CollectiveEpilogue::TensorStorage): its smem swizzle's alignment


def epilogue(t: Tactic, cutlass: str) -> Epilogue:
    family = calibration.arch_family(t.arch, t.native)
    cluster_m = t.cluster[0] if family in ("sm100", "sm103") else None  # 1SM / 2SM epilogue
    row = calibration.epilogue_row(cutlass, t.arch, t.dtype, t.tile, t.fusion, t.swap_ab, t.epilogue, cluster_m,
                                   t.native)
    if row is None:
        raise UsageError(f"no calibrated epilogue for {t.arch} {t.dtype} {t.label()} with CUTLASS "
                         f"{cutlass}; regenerate with scripts/calibrate_cutlass.py")
    return Epilogue(row["epilogue"], row["epilogue_tensors"], row["epilogue_pipeline"],
                    row["epilogue_tensormaps"], row.get("epilogue_align", 16))


def footprint(t: Tactic, flashinfer: str | None = None) -> SmemFootprint:
    """The kernel's SharedStorage for tactic `t` under the CUTLASS that FlashInfer `flashinfer` pins."""
    if t.schedule == "ampere":
        return _ampere(t)
    prof = profile_for(flashinfer or t.flashinfer)
    if t.native:
        return _sm103_ultra(t, prof)
    family = calibration.arch_family(t.arch)
    if family == "sm120" and t.dtype in BLOCK_SCALED:
        return _sm120_block_scaled(t, prof)
    if family == "sm90" and t.dtype in DENSE_BITS:
        return _sm90_dense(t, prof)
    if family == "sm100":
        return _sm100(t, prof)
    raise UsageError(f"no shared-memory model for {t.dtype} on {t.arch} yet")


def _sm120_block_scaled(t: Tactic, prof: Profile) -> SmemFootprint:
    bits_a, bits_b, vec = BLOCK_SCALED[t.dtype]
    m, n, k = t.tile
    a, b = m * k * bits_a // 8, n * k * bits_b // 8
    if n < 128 and prof["sm120_sfb_min_n"] < 128:
        raise UsageError(f"CUTLASS {prof.cutlass}'s SM120 block-scaled builder gives N={n} tiles a "
                         f"degenerate SFB buffer (fixed in 4.5.0 with max(N, 128)); FlashInfer builds "
                         f"with it never dispatch such tiles, so there is nothing to model")
    if k // vec < 4:
        raise UsageError(f"K={k} holds {k // vec} scale factors per row, fewer than the 4 of one "
                         f"scale-factor block: CUTLASS's SM120 scale-factor layout is degenerate there "
                         f"(such tiles do not compile in 4.5.0 and are not dispatched by FlashInfer)")
    sfa, sfb = m * k // vec, max(n, prof["sm120_sfb_min_n"]) * k // vec
    pair, desc = constant("barrier_pair_bytes"), constant("tma_descriptor_bytes")
    epi = epilogue(t, prof.cutlass)
    reserved = (prof["sm120_reserve_scheduler_stages"] * pair + prof["sm120_reserve_tensormaps"] * desc
                + prof["sm120_reserve_tensormap_ready_stages"] * pair)
    capacity = BUILDER_CAPACITY["sm120"] - reserved
    per_stage = a + b + sfa + sfb + round_up(pair, prof["sm120_stage_barrier_round"])
    stages = (capacity - epi.total) // per_stage
    notes = (f"builder: ({capacity:,} capacity - {epi.total:,} epilogue carve-out) // "
             f"{per_stage:,} per stage = {stages} stages",)
    return _kernel(t, stages, [("A", a, 1024), ("B", b, 1024), ("SFA", sfa, 16), ("SFB", sfb, 16)],
                   mainloop_tensormaps=4, epi=epi, notes=notes)


def _sm90_dense(t: Tactic, prof: Profile) -> SmemFootprint:
    bits = DENSE_BITS[t.dtype]
    m, n, k = t.tile
    a, b = m * k * bits // 8, n * k * bits // 8
    pair, desc = constant("barrier_pair_bytes"), constant("tma_descriptor_bytes")
    epi = epilogue(t, prof.cutlass)
    reserved = prof["sm90_reserve_tensormaps"] * desc + prof["sm90_reserve_scheduler_stages"] * pair
    capacity = (BUILDER_CAPACITY["sm90"] - reserved) // 128 * 128
    per_stage = round_up(a + b, 128) + pair
    stages = (capacity - round_up(epi.total, 128)) // per_stage
    notes = (f"builder: ({capacity:,} capacity - {round_up(epi.total, 128):,} epilogue carve-out) // "
             f"{per_stage:,} per stage = {stages} stages",)
    return _kernel(t, stages, [("A", a, 128), ("B", b, 128)], mainloop_tensormaps=2, epi=epi, notes=notes)


def _kernel(t: Tactic, stages: int, operands: list[tuple[str, int, int]], *, mainloop_tensormaps: int,
            epi: Epilogue, notes: tuple[str, ...]) -> SmemFootprint:
    """GemmUniversal's SharedStorage (sm90_gemm_array_tma_warpspecialized_cooperative.hpp)."""
    pair, desc = constant("barrier_pair_bytes"), constant("tma_descriptor_bytes")
    mainloop = Layout(128)  # CollectiveMainloop::TensorStorage : aligned_struct<128>
    for name, size, align in operands:
        mainloop.add(name, stages * size, align)
    tensors = Layout(128)
    tensors.add("mainloop", mainloop.total(), mainloop.align)
    tensors.add("epilogue", epi.tensors, epi.align)
    sched_stages = constant("kernel_scheduler_stages")
    pipelines = Layout(16)
    for name, size in (("scheduler", sched_stages * pair), ("mainloop", stages * pair),
                       ("epilogue load", epi.pipeline), ("load order", constant("load_order_barrier_bytes"))):
        pipelines.add(name, size, 16)
    response = sched_stages * constant("scheduler_response_bytes")
    tmaps = Layout(128)
    tmaps.add("mainloop", mainloop_tensormaps * desc, 128)
    tmaps.add("epilogue", epi.tensormaps, 128)
    kernel = Layout(tensors.align)
    kernel.add("tensors", tensors.total(), tensors.align)
    kernel.add("pipelines", pipelines.total(), 16)
    kernel.add("scheduler response", response, 16)
    kernel.add("tensormaps", tmaps.total(), 128)
    terms = [SmemTerm(f"{name} buffers", stages * size, f"{stages} stages x {size:,} B, alignas({align})")
             for name, size, align in operands]
    terms += [
        SmemTerm("epilogue storage", epi.tensors, f"{t.fusion} epilogue" + (", swap-AB" if t.swap_ab else "")),
        SmemTerm("pipeline barriers", pipelines.size,
                 f"scheduler {sched_stages} + mainloop {stages} stages + epilogue load + load order"),
        SmemTerm("scheduler response", response, f"{sched_stages} x {constant('scheduler_response_bytes')} B"),
        SmemTerm("tensormaps", mainloop_tensormaps * desc + epi.tensormaps,
                 f"{mainloop_tensormaps} mainloop + {epi.tensormaps // desc} epilogue TMA descriptors"),
    ]
    total = kernel.total()
    notes = notes + (f"SharedStorage rounded to alignas({kernel.align}): {kernel.size:,} -> {total:,} B",)
    return SmemFootprint(total=total, terms=tuple(terms), stages=stages, source="model", notes=notes)


def _ampere(t: Tactic) -> SmemFootprint:
    """SM80-style multistage grouped GEMM (bf16 fallback on sm90): the stages' A and B tiles."""
    m, n, k = t.tile
    bits = DENSE_BITS.get(t.dtype, 16)
    a, b = m * k * bits // 8, n * k * bits // 8
    s = t.stages or 2
    terms = (SmemTerm("A buffers", s * a, f"{s} stages"), SmemTerm("B buffers", s * b, f"{s} stages"))
    return SmemFootprint(total=s * (a + b), terms=terms, stages=s, source="model",
                         notes=("SM80 multistage mainloop; its epilogue reuses the mainloop's buffers "
                                "(not checked by the nvcc oracle)",))



def _sm100(t: Tactic, prof: Profile) -> SmemFootprint:
    """SM100 grouped kernels: the builder's stage count (sm100_umma_builder.inl, sm100_blockscaled_umma_
    builder.inl, carve-out of sm100_pipeline_carveout.inl) and sm100_gemm_array_tma_warpspecialized.hpp's
    SharedStorage. A 2SM MMA gives each CTA of the pair A's M rows and half of B's N rows."""
    m, n, k = t.tile
    two_sm = t.cluster[0] == 2
    n_cta = n // 2 if two_sm else n
    pair, desc = constant("barrier_pair_bytes"), constant("tma_descriptor_bytes")
    sched = constant("kernel_scheduler_stages")
    scaled = t.dtype in BLOCK_SCALED
    if scaled:  # MXF8F6F4 keeps FP4 in a byte; scale factors in 128-row x 4-column atoms, SFB over all N
        bits_a, bits_b, vec = BLOCK_SCALED[t.dtype]
        bits_a, bits_b = (8, 8) if t.dtype == "mxfp8-mxfp4" else (bits_a, bits_b)
        sf_cols = round_up(k // vec, 4)
        sfa, sfb = round_up(m, 128) * sf_cols, round_up(n, 128) * sf_cols
        acc = 1 if n == 256 else 2
        n_maps = 4  # A, SFA, B, SFB
        stage_barrier = round_up(pair, prof["sm100_bs_stage_barrier_round"])
    else:  # TMEM (128 x 512 fp32 columns) over the CTA tile, the MMA_M = 64 case counted twice; cap 4
        bits_a = bits_b = DENSE_BITS[t.dtype]
        sfa = sfb = 0
        acc = min(4, (128 * 512) // (m * n) if (two_sm or m > 64) else (512 // n) * 2)
        n_maps = 2
        stage_barrier = pair
    a, b = m * k * bits_a // 8, n_cta * k * bits_b // 8
    epi = epilogue(t, prof.cutlass)
    responses, copies = prof["sm100_clc_responses"], prof["sm100_tensormap_copies"]
    ready = prof["sm100_tensormap_ready"] * sched * pair
    # KernelSmemCarveout: accumulator, CLC and throttle pipelines, load order, TMEM dealloc barrier,
    # CLC responses, TMEM pointers, tensormaps and the tensormap-ready pipeline.
    carveout = (acc * pair + responses * sched * pair + constant("load_order_barrier_bytes")
                + constant("cluster_barrier_bytes") + sched * pair
                + responses * sched * constant("clc_response_bytes") + sched * constant("tmem_ptr_bytes")
                + copies * n_maps * desc + ready)
    capacity = BUILDER_CAPACITY["sm100"] - carveout
    per_stage = a + b + sfa + sfb + stage_barrier
    stages = (capacity - epi.total) // per_stage
    notes = (f"builder: ({capacity:,} capacity - {epi.total:,} epilogue carve-out) // {per_stage:,} per "
             f"stage = {stages} stages",)
    pipelines = Layout(16)
    for name, size in (("mainloop", stages * pair), ("epilogue load", epi.pipeline),
                       ("load order", constant("load_order_barrier_bytes")), ("scheduler", sched * pair),
                       ("accumulator", acc * pair), ("scheduler throttle", 1),
                       ("tmem dealloc", constant("cluster_barrier_bytes")), ("tensormap ready", ready)):
        if size:
            pipelines.add(name, size, 16)
    # Async tensormap updates add 2 uint16 to each CLC response.
    response = responses * sched * (constant("clc_response_bytes") + (4 if responses > 1 else 0))
    slot = round_up(max(epi.tensormaps, 1), 128) + n_maps * desc  # epilogue's, then the mainloop's
    kernel = _tcgen05_storage(epi, (("A", stages * a), ("B", stages * b), ("SFA", stages * sfa),
                                    ("SFB", stages * sfb)), pipelines, response, copies * slot)
    total = kernel.total()
    terms = [SmemTerm("A buffers", stages * a, f"{stages} stages x {a:,} B"),
             SmemTerm("B buffers", stages * b,
                      f"{stages} stages x {b:,} B" + (", half of N (2SM)" if two_sm else ""))]
    if scaled:
        terms.append(SmemTerm("scale-factor buffers", stages * (sfa + sfb),
                              f"{stages} stages x ({sfa:,} SFA + {sfb:,} SFB) B"))
    terms += [
        SmemTerm("epilogue storage", epi.tensors, f"{t.fusion} epilogue, {t.epilogue} schedule"),
        SmemTerm("pipeline barriers", pipelines.total(),
                 f"mainloop {stages} + accumulator {acc} stages, scheduler, throttle, load order, TMEM"),
        SmemTerm("scheduler response", response, f"{responses} x {sched} CLC responses"),
        SmemTerm("tensormaps", copies * slot, f"{copies} x (epilogue + {n_maps} mainloop TMA descriptors)"),
    ]
    notes += (f"SharedStorage rounded to alignas({kernel.align}): {kernel.size:,} -> {total:,} B",)
    return SmemFootprint(total=total, terms=tuple(terms), stages=stages, source="model", notes=notes)


def _tcgen05_storage(epi: Epilogue, buffers: tuple[tuple[str, int], ...], pipelines: Layout, response: int,
                     tensormaps: int) -> Layout:
    """The SharedStorage of the SM100-family grouped kernels (SM100 and SM103-native alike), member by
    member: pipelines, scheduler response, TMEM base pointer, tensormaps, then the tensors union of
    epilogue storage and the mainloop's operand/scale-factor buffers."""
    mainloop = Layout(128)
    for name, size in buffers:
        if size:
            mainloop.add(name, size, 1)
    tensors = Layout(128)
    tensors.add("epilogue", max(epi.tensors, 1), epi.align)
    tensors.add("mainloop", mainloop.total(), 128)
    kernel = Layout(tensors.align)
    kernel.add("pipelines", pipelines.total(), 16)
    kernel.add("scheduler response", response, 16)
    kernel.add("tmem base ptr", constant("tmem_ptr_bytes"), 4)
    kernel.add("tensormaps", tensormaps, 128)
    kernel.add("tensors", tensors.total(), tensors.align)
    return kernel


def _sm103_ultra(t: Tactic, prof: Profile) -> SmemFootprint:
    """SM103-native NVFP4 kernels (sm103_blockscaled_umma_builder.inl, sm103_blockscaled_mma_array_
    warpspecialized.hpp, sm103_blockscaled_gemm_array_tma_warpspecialized.hpp). The MMA tile's K is 3 x the
    CTA tile's; A and B stream in 128-byte K slices, each an AB-pipeline stage, and the scale factors of a
    quarter MMA-K travel in a pipeline of their own that takes the bytes the AB stages leave over."""
    m, n, k = t.tile
    two_sm = t.cluster[0] == 2
    pair, desc = constant("barrier_pair_bytes"), constant("tma_descriptor_bytes")
    sched = prof["sm103_scheduler_stages"]
    vec = BLOCK_SCALED[t.dtype][2]
    slice_bytes = prof["sm103_k_slice_bytes"]
    a, b = m * slice_bytes, (n // 2 if two_sm else n) * slice_bytes
    sf_cols = round_up(3 * k // vec // prof["sm103_sf_buffers_per_k"], 4)  # per SF stage, 4-column atoms
    sfa, sfb = round_up(m, 128) * sf_cols, round_up(n, 128) * sf_cols
    acc = 1 if n == 256 else 2
    n_maps = 4  # A, SFA, B, SFB
    epi = epilogue(t, prof.cutlass)
    response_bytes = constant("clc_response_bytes")
    carveout = (acc * pair + sched * pair + constant("load_order_barrier_bytes") + sched * response_bytes
                + sched * pair + constant("cluster_barrier_bytes") + acc * constant("tmem_ptr_bytes")
                + n_maps * desc)
    capacity = BUILDER_CAPACITY["sm100"] - carveout
    per_stage = a + b + 2 * pair + sfa + sfb
    stages = (capacity - epi.total) // per_stage
    sf_stages = stages + (capacity - epi.total - stages * per_stage) // (pair + sfa + sfb)
    notes = (f"builder: ({capacity:,} capacity - {epi.total:,} epilogue carve-out) // {per_stage:,} per "
             f"stage = {stages} AB stages; the rest // {pair + sfa + sfb:,} adds scale-factor stages: "
             f"{sf_stages}",)
    pipelines = Layout(16)
    for name, size in (("mainloop", (stages + sf_stages) * pair), ("epilogue load", epi.pipeline),
                       ("load order", constant("load_order_barrier_bytes")), ("scheduler", sched * pair),
                       ("accumulator", acc * pair), ("scheduler throttle", 1)):
        pipelines.add(name, size, 16)
    pipelines.add("tmem dealloc", constant("cluster_barrier_bytes"), 8)  # alignas(8) ClusterBarrier
    response = sched * response_bytes
    tmaps = round_up(max(epi.tensormaps, 1), 128) + n_maps * desc
    kernel = _tcgen05_storage(epi, (("A", stages * a), ("B", stages * b), ("SFA", sf_stages * sfa),
                                    ("SFB", sf_stages * sfb)), pipelines, response, tmaps)
    total = kernel.total()
    terms = (
        SmemTerm("A buffers", stages * a, f"{stages} stages x {a:,} B ({slice_bytes} B of K)"),
        SmemTerm("B buffers", stages * b, f"{stages} stages x {b:,} B" + (", half of N (2SM)" if two_sm else "")),
        SmemTerm("scale-factor buffers", sf_stages * (sfa + sfb),
                 f"{sf_stages} stages x ({sfa:,} SFA + {sfb:,} SFB) B"),
        SmemTerm("epilogue storage", epi.tensors, f"{t.fusion} epilogue, {t.epilogue} schedule"),
        SmemTerm("pipeline barriers", pipelines.total(),
                 f"AB {stages} + SF {sf_stages} + accumulator {acc} stages, scheduler, throttle, TMEM"),
        SmemTerm("scheduler response", response, f"{sched} CLC responses"),
        SmemTerm("tensormaps", tmaps, f"epilogue + {n_maps} mainloop TMA descriptors"),
    )
    notes += (f"SharedStorage rounded to alignas({kernel.align}): {kernel.size:,} -> {total:,} B",)
    return SmemFootprint(total=total, terms=terms, stages=stages, source="model", notes=notes)
