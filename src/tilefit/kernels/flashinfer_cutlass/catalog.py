"""FlashInfer's CUTLASS MoE tactic lists, read from data/tactics.toml, as `Tactic` values.

Flow: a FlashInfer version picks one list per (arch, dtype); the list's base configs are expanded the
way FlashInfer's getTmaWarpSpecializedConfigs does (FINALIZE copies for gemm2, then swap-AB copies),
and each tactic keeps the id FlashInfer's autotuner knows it by. Tile K is converted from the enum's
bytes to elements of the activation type.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from tilefit._toml import load_package_toml
from tilefit.errors import UsageError
from tilefit.versions import parse_version as _parse_version

PACKAGE = "tilefit.kernels.flashinfer_cutlass"

# dtype -> (activation bits in shared memory for K-byte conversion, description)
DTYPES: dict[str, tuple[int, str]] = {
    "nvfp4": (4, "NVFP4 activations and weights (e2m1, ue4m3 scale per 16)"),
    "mxfp8-mxfp4": (8, "MXFP8 activations x MXFP4 weights (ue8m0 scale per 32)"),
    "fp8": (8, "FP8 e4m3 activations and weights, per-tensor scales"),
    "bf16": (16, "bf16 activations and weights"),
}
GEMMS = ("gemm1", "gemm2")
ARCHS = ("sm120", "sm121", "sm100", "sm103", "sm90")  # catalogued, in the order parse_config tries them


@dataclass(frozen=True, slots=True)
class Tactic:
    """One FlashInfer CUTLASS MoE GEMM tactic. Tile and cluster are in elements / CTAs."""

    arch: str  # "sm120"
    dtype: str  # "nvfp4"
    enum: str  # FlashInfer's tile enum, K in bytes: "CtaShape128x256x64B" (ampere: "CtaShape..._s3")
    tile: tuple[int, int, int]  # M, N, K in elements
    cluster: tuple[int, int, int] = (1, 1, 1)
    fusion: str = "none"  # "none" | "finalize" (gemm2 only)
    swap_ab: bool = False
    schedule: str = "tma-ws"  # "tma-ws" (TMA warp-specialized grouped) | "ampere" (SM80 multistage)
    gemm: str | None = None  # "gemm1" | "gemm2" | None when parsed from text
    stages: int | None = None  # fixed stage count (ampere configs); None: the builder picks
    flashinfer: str | None = field(default=None, compare=False)
    tactic_id: int | None = field(default=None, compare=False)
    dynamic_cluster: tuple[int, int, int] | None = None  # SM100 runtime cluster; None: static cluster
    epilogue: str = "tma"  # "tma" | "nosmem" (SM100 NO_SMEM epilogue schedule, never with finalize)
    native: bool = False  # SM103-native kernel (cutlass::arch::Sm103, MMA K = 3 x tile K, Ultra schedule)

    @property
    def tile_text(self) -> str:
        return "x".join(str(v) for v in self.tile)

    def label(self) -> str:
        """e.g. 'gemm2 #33 128x256x128 [128x256x64B] finalize' (id and gemm when from a list)."""
        parts = [p for p in (self.gemm, None if self.tactic_id is None else f"#{self.tactic_id}") if p]
        parts.append(self.tile_text)
        if self.schedule == "tma-ws":
            parts.append(f"[{self.enum.removeprefix('CtaShape')}]")
        if self.cluster != (1, 1, 1):
            parts.append("2sm" if self.arch in ("sm100", "sm103") and self.cluster[0] == 2
                         else "c" + "x".join(str(v) for v in self.cluster))
        if self.dynamic_cluster is not None:
            parts.append("dyn" + "x".join(str(v) for v in self.dynamic_cluster))
        if self.epilogue != "tma":
            parts.append(f"{self.epilogue}-epi")
        if self.native:
            parts.append("sm103-ultra")
        if self.schedule == "ampere":
            parts.append(f"ampere s{self.stages}")
        if self.fusion != "none":
            parts.append(self.fusion)
        if self.swap_ab:
            parts.append("swap-ab")
        return " ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "arch": self.arch, "dtype": self.dtype, "enum": self.enum, "tile": list(self.tile),
            "cluster": list(self.cluster), "fusion": self.fusion, "swap_ab": self.swap_ab,
            "schedule": self.schedule, "gemm": self.gemm, "stages": self.stages,
            "flashinfer": self.flashinfer, "tactic_id": self.tactic_id,
            "dynamic_cluster": list(self.dynamic_cluster) if self.dynamic_cluster else None,
            "epilogue": self.epilogue, "native": self.native,
        }


@dataclass(frozen=True, slots=True)
class TacticList:
    """One [[list]] entry of tactics.toml: the base configs of a version range."""

    archs: tuple[str, ...]
    dtypes: tuple[str, ...]
    min: tuple[int, ...]
    max: tuple[int, ...] | None
    read: tuple[str, ...]
    finalize: bool
    # (enum bytes "128x256x64B", cluster, dynamic cluster or None)
    configs: tuple[tuple[str, tuple[int, int, int], tuple[int, int, int] | None], ...]
    dispatch: frozenset[str]
    no_case_message: str
    ampere: tuple[tuple[tuple[int, int, int], int], ...]  # ((M, N, K elements), stages) for dtype
    epilogues: tuple[str, ...] = ("tma",)  # SM100 epilogue schedules, the outer loop of the list
    # SM103 NVFP4: SM103-native configs (same tokens as `configs`) listed ahead of `configs`, their
    # epilogue schedules (outer loop) and the enums their SHAPE_CASE(103, ...) dispatch accepts.
    native: tuple[tuple[str, tuple[int, int, int], tuple[int, int, int] | None], ...] = ()
    native_epilogues: tuple[str, ...] = ()
    native_dispatch: frozenset[str] = frozenset()
    swap_ab: bool = True  # 0.5.2 lists no swap-AB copies

    def covers(self, version: tuple[int, ...]) -> bool:
        return self.min <= version and (self.max is None or version < self.max)


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.6.8.post1' -> (0, 6, 8); suffixes (post/rc/dev) do not change the tactic lists we read."""
    return _parse_version(text, "FlashInfer version", "0.7.4 (--flashinfer X.Y.Z)")


def _shape(text: str) -> tuple[int, int, int]:
    a, b, c = (int(v) for v in text.split("x"))
    return a, b, c


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    return load_package_toml(PACKAGE, "tactics.toml")


@lru_cache(maxsize=1)
def tactic_lists() -> tuple[TacticList, ...]:
    out = []
    for raw in _data()["list"]:
        native = raw.get("native", {})
        for dtype in raw["dtypes"]:
            ampere = tuple((_shape(t), int(s)) for t, s in
                           (x.split() for x in raw.get("ampere", {}).get(dtype, [])))
            out.append(TacticList(
                archs=tuple(raw["archs"]), dtypes=(dtype,), min=parse_version(raw["min"]),
                max=parse_version(raw["max"]) if raw["max"] else None, read=tuple(raw["read"]),
                finalize=bool(raw["finalize"]), configs=_configs(raw["configs"]),
                dispatch=frozenset(raw["dispatch"]), no_case_message=raw["no_case_message"],
                ampere=ampere, epilogues=tuple(raw.get("epilogues", ["tma"])),
                native=_configs(native.get("configs", [])), native_epilogues=tuple(native.get("epilogues", [])),
                native_dispatch=frozenset(native.get("dispatch", [])),
                swap_ab=bool(raw.get("swap_ab", True)),
            ))
    return tuple(out)


def _configs(items: list[str]) -> tuple[tuple[str, tuple[int, int, int], tuple[int, int, int] | None], ...]:
    """'128x128x128B 2x1x1 d4x1x1' -> (enum bytes, cluster, runtime cluster or None for 'static')."""
    out = []
    for item in items:
        enum_text, cluster, *dyn = item.split()
        dynamic = _shape(dyn[0].lstrip("d")) if dyn and dyn[0] != "static" else None
        out.append((enum_text, _shape(cluster), dynamic))
    return tuple(out)


def latest_version() -> str:
    return _data()["sources"]["latest"]


def version_note(flashinfer: str | None) -> str | None:
    """A note when `flashinfer` is newer than anything read: its tactics are judged with the newest
    catalogued lists, which a newer release may have changed."""
    if flashinfer and parse_version(flashinfer) > parse_version(latest_version()):
        return (f"FlashInfer {flashinfer} is newer than the newest catalogued ({latest_version()}): "
                f"judged with {latest_version()}'s tactic lists, which it may have changed")
    return None


def earliest_version() -> str:
    return _data()["sources"]["earliest"]


def message(key: str) -> str:
    return _data()["messages"][key]


def dtypes_for(arch: str) -> list[str]:
    """Dtypes some catalogued FlashInfer version offers on `arch`."""
    return [d for d in DTYPES if any(arch in t.archs and d in t.dtypes for t in tactic_lists())]


def find_list(arch: str, dtype: str, flashinfer: str | None) -> TacticList:
    """The list FlashInfer `flashinfer` (default: latest catalogued) uses on arch/dtype."""
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r} for flashinfer-cutlass; known: {', '.join(DTYPES)}")
    version_text = flashinfer or latest_version()
    version = parse_version(version_text)
    if version < parse_version(earliest_version()):
        raise UsageError(f"FlashInfer {version_text} predates the catalog (starts at "
                         f"{earliest_version()}); pass --flashinfer {earliest_version()} or later")
    known = dtypes_for(arch)
    if dtype not in known and f"{arch} {dtype}" in _data().get("not_catalogued", {}):
        raise UsageError(_data()["not_catalogued"][f"{arch} {dtype}"])
    if dtype not in known:
        listing = ", ".join(known) if known else "none (arch not catalogued)"
        raise UsageError(f"FlashInfer's CUTLASS MoE has no {dtype} kernels on {arch}; "
                         f"dtypes there: {listing}")
    lists = [tl for tl in tactic_lists() if arch in tl.archs and dtype in tl.dtypes]
    for tl in lists:
        if tl.covers(version):
            return tl
    # Releases outside every list of this arch and dtype were not read (not: read and found empty).
    read = sorted({r for tl in lists for r in tl.read}, key=parse_version)
    later = [r for r in read if parse_version(r) >= version]
    nearest = later[0] if later else read[-1]
    raise UsageError(f"tilefit has not read FlashInfer {version_text}'s {dtype} CUTLASS MoE tactics on {arch} "
                     f"(read: {', '.join(read)}); pass --flashinfer {nearest} to check against the "
                     f"nearest release read")


def k_elements(k_bytes: int, dtype: str) -> int:
    return k_bytes * 8 // DTYPES[dtype][0]


def enum_to_tile(enum_bytes: str, dtype: str) -> tuple[int, int, int]:
    m, n, kb = _shape(enum_bytes.rstrip("B"))
    return m, n, k_elements(kb, dtype)


def enum_name(enum_bytes: str) -> str:
    return f"CtaShape{enum_bytes}"


def finalize_switch_since() -> str:
    """The first FlashInfer whose op hands the caller's use_fused_finalize to the runner before it
    lists the tactics: from it on, fused finalize off leaves gemm2's FINALIZE copies out."""
    return str(_data()["sources"]["finalize_switch_since"])


def expand(tl: TacticList, arch: str, dtype: str, gemm: str, version: str,
           fused_finalize: bool = True) -> list[Tactic]:
    """The tactic list of one GEMM, in FlashInfer's order (getTmaWarpSpecializedConfigs).
    `fused_finalize` False (the engine turns it off) drops the FINALIZE copies where this
    FlashInfer honours the switch; before that they are listed whatever the caller passes."""
    honoured = parse_version(version) >= parse_version(finalize_switch_since())
    finalize = tl.finalize and (fused_finalize or not honoured)
    base = [Tactic(arch, dtype, enum_name(e), enum_to_tile(e, dtype), cluster, "none", False,
                   "tma-ws", gemm, None, version, None, dyn, epi, True)
            for epi in tl.native_epilogues for e, cluster, dyn in tl.native]  # SM103 ahead of SM100
    base += [Tactic(arch, dtype, enum_name(e), enum_to_tile(e, dtype), cluster, "none", False,
                    "tma-ws", gemm, None, version, None, dyn, epi)
             for epi in tl.epilogues for e, cluster, dyn in tl.configs]
    if gemm == "gemm2" and finalize:  # FINALIZE copies, then those on NO_SMEM are dropped
        base += [with_changes(t, fusion="finalize") for t in base if t.epilogue == "tma"]
    if tl.swap_ab:
        base += [with_changes(t, swap_ab=True) for t in base]
    base += [Tactic(arch, dtype, f"CtaShape{m}x{n}x{k}_s{s}", (m, n, k), (1, 1, 1), "none", False,
                    "ampere", gemm, s, version) for (m, n, k), s in tl.ampere]
    return base


def with_changes(t: Tactic, **changes: Any) -> Tactic:
    """A copy of `t` with some fields changed."""
    return replace(t, **changes)


def tactics(arch: str, dtype: str, flashinfer: str | None = None,
            gemm: str | None = None, fused_finalize: bool = True) -> list[Tactic]:
    """Every tactic FlashInfer enumerates, with the ids its autotuner uses (gemm2 ids follow gemm1's).
    With `fused_finalize` False the FINALIZE copies are left out (FlashInfer >= 0.6.15), so the
    swap-AB copies after them take lower ids: the list the engine really profiles."""
    if gemm is not None and gemm not in GEMMS:
        raise UsageError(f"unknown gemm {gemm!r}; use gemm1 (gate/up) or gemm2 (down)")
    version = flashinfer or latest_version()
    tl = find_list(arch, dtype, version)
    g1 = expand(tl, arch, dtype, "gemm1", version, fused_finalize)
    g2 = expand(tl, arch, dtype, "gemm2", version, fused_finalize)
    numbered = [with_changes(t, tactic_id=i) for i, t in enumerate(g1 + g2)]
    return [t for t in numbered if gemm is None or t.gemm == gemm]


def dispatch_problem(t: Tactic, flashinfer: str | None = None) -> str | None:
    """The message FlashInfer throws for `t` at launch when no dispatch case exists, else None."""
    if t.schedule != "tma-ws":
        return None
    tl = find_list(t.arch, t.dtype, flashinfer or t.flashinfer)
    enum_bytes = t.enum.removeprefix("CtaShape")
    if enum_bytes not in (tl.native_dispatch if t.native else tl.dispatch):
        m, n, kb = _shape(enum_bytes.rstrip("B"))
        return message(tl.no_case_message).format(enum_value=m * 1_000_000 + n * 1000 + kb)
    combos = _sm120_combos(t.arch, tl)
    if combos is not None and t.tile not in combos:
        cm, cn, ck = t.cluster
        m, n, k = t.tile
        return message("no_combo").format(m=m, n=n, k=k, cm=cm, cn=cn, ck=ck, sm=t.arch[2:])
    return None


def _sm120_combos(arch: str, tl: TacticList) -> frozenset[tuple[int, int, int]] | None:
    """Element tiles are_tile_shapes_supported_sm120 accepts in this list's versions."""
    if arch not in ("sm120", "sm121"):
        return None
    raw = _data()["sm120_combos"]
    for entry in raw:
        lo, hi = parse_version(entry["min"]), parse_version(entry["max"]) if entry["max"] else None
        if lo <= tl.min and (hi is None or tl.min < hi):
            return frozenset(_shape(x) for x in entry["tiles"])
    return None


def known_tiles(arch: str, dtype: str) -> list[str]:
    """Every tile (elements) any catalogued version offers on arch/dtype, for error messages."""
    seen: dict[str, None] = {}
    for tl in tactic_lists():
        if arch in tl.archs and dtype in tl.dtypes:
            for e, *_ in tl.native + tl.configs:
                seen["x".join(str(v) for v in enum_to_tile(e, dtype))] = None
    return list(seen)
