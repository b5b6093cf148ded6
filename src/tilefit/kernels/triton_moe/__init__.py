"""tilefit's Triton fused-MoE kernel family: the kernel (kernel.py, align.py, ops.py), its config
grid (config.py), the oracle's view of it (spec.py) and the byte-exact shared-memory model (smem.py).

`FAMILY` answers the kernel-family protocol of tilefit.kernels.base without importing triton or
torch; only `verify` (the live compiler oracle) needs triton.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch
from tilefit.kernels.base import (
    ENGINE, Blocklist, FitVerdict, Judgement, OracleCheck, SmemFootprint, UNSUPPORTED, judge, judgement)
from tilefit.kernels.triton_moe import config as _config
from tilefit.kernels.triton_moe import smem
from tilefit.kernels.triton_moe.config import MoEConfig

# fp8 (e4m3) tensor-core dots exist from sm89 on (Ada, Hopper, Blackwell).
_FP8_MIN_CC = (8, 9)


class TritonMoEFamily:
    """The kernel-family protocol for our Triton fused-MoE grouped GEMM."""

    name = "triton-moe"
    # `scales`: how fp8-block weight scales are applied, "column" (one per output column: vLLM's
    # kernel, the default) or "row" (one per tile where its columns share a scale group: SGLang's);
    # the forms differ in shared memory (smem.ROW_TABLE) and speed. Other dtypes ignore it.
    # `swap_ab`: fp8 as vLLM (>= 0.25) and SGLang run it on sm90, the tiles with BLOCK_SIZE_M < 64
    # and BLOCK_SIZE_N >= 64 computed as B^T A^T (config.swap_ab_tile; more shared memory).
    options: tuple[str, ...] = ("scales", "swap_ab")
    # vLLM and SGLang launch the config their tuned file (else their default) gives: no autotuner.
    picked_by = ENGINE

    def dtypes(self, arch: Arch) -> Sequence[str]:
        return _config.DTYPES if arch.cc >= _FP8_MIN_CC else ("bf16", "fp16")

    def _dtype(self, arch: Arch, dtype: str) -> str:
        d = _config.canonical_dtype(dtype)
        if d not in self.dtypes(arch):
            raise UsageError(f"triton-moe has no {d} path on {arch.name} (fp8 needs sm89 or newer); "
                             f"use one of {', '.join(self.dtypes(arch))}")
        return d

    def configs(self, arch: Arch, dtype: str, grid: str = "full", **_: Any) -> list[MoEConfig]:
        """The engines' 1920-config grid, for every dtype (fp8-block included)."""
        return _config.grid_configs(self._dtype(arch, dtype), grid)

    def parse_config(self, text: str, dtype: str = "bf16", **_: Any) -> MoEConfig:
        return _config.parse_config(text, dtype)

    def expand(self, text: str, config: MoEConfig, arch: Arch, dtype: str, **_: Any) -> list[MoEConfig]:
        return [config]  # a spelling names exactly one config

    def judge(self, configs: Sequence[MoEConfig], arch: Arch, dtype: str, **options: Any) -> Judgement:
        return judgement(self, configs, arch, dtype, **options)

    def group(self, config: MoEConfig) -> str:
        return ""  # one config serves both GEMMs

    def extrapolated(self, config: MoEConfig, dtype: str) -> bool:
        return not _config.in_grid(config, dtype)

    def blocklist(self, verdicts: Sequence[FitVerdict], **_: Any) -> Blocklist | None:
        return None  # the engines read no skip list for the Triton kernel: a config either launches or not

    def source(self, **_: Any) -> str:
        return ""

    def note(self, **_: Any) -> str | None:
        return None

    def footprint(self, config: MoEConfig, arch: Arch, dtype: str, scales: str | None = None,
                  swap_ab: bool = False, **_: Any) -> SmemFootprint:
        return smem.footprint(config, arch, self._dtype(arch, dtype), scales or "column", bool(swap_ab))

    def verdict(self, config: MoEConfig, arch: Arch, dtype: str, scales: str | None = None,
                swap_ab: bool = False, **_: Any) -> FitVerdict:
        d = _config.canonical_dtype(dtype)
        if d not in self.dtypes(arch):
            return FitVerdict(config, arch, None, UNSUPPORTED,
                              f"no {d} tensor-core path on {arch.name}")
        return judge(config, arch, smem.footprint(config, arch, d, scales or "column", bool(swap_ab)))

    def default_config(self, arch: Arch, dtype: str, *, M: int = 1, E: int = 1, N: int = 0,
                       K: int = 0, topk: int = 8, **_: Any) -> MoEConfig:
        """The config used when no tuned one exists: three buckets of rows per expert.

        m = M * topk / E is the expected number of rows an expert receives (M tokens, E = the
        model's routed experts, so that EP ranks get the same answer as TP ranks). Like the
        engines' defaults (vLLM: BM 16 for small batches, 64 above), the tile grows with m:
          m <= 16:  16 x  64 x 128, GROUP_SIZE_M  1, 4 warps  (weight-streaming, many N blocks)
          m <= 64:  64 x 128 x  64, GROUP_SIZE_M 16, 4 warps
          m  > 64: 128 x 256 x  64, GROUP_SIZE_M 16, 8 warps, at most 3 stages (compute-bound)
        These were the best of benchmarks/bench_triton_kernel.py's sweep in each bucket on an H200
        (GLM-5 EP8/TP8, see benchmarks/RESULTS.md). fp8-block keeps N and K at 128 or more: its
        kernel runs the smaller tiles too, but the buckets were timed in bf16 only. num_stages is
        the deepest allowed (from 4, or 3 for the large tile, down to 2) whose shared memory (the
        model) fits the arch, so the default always launches. N and K are accepted for callers
        that know them; the buckets do not need them.
        """
        d = self._dtype(arch, dtype)
        m = int(M) * int(topk) / max(1, int(E))
        if m <= 16:
            bm, bn, bk, gm, warps, depths = 16, 64, 128, 1, 4, (4, 3, 2)
        elif m <= 64:
            bm, bn, bk, gm, warps, depths = 64, 128, 64, 16, 4, (4, 3, 2)
        else:
            bm, bn, bk, gm, warps, depths = 128, 256, 64, 16, 8, (3, 2)
        if d == "fp8-block":
            bn, bk = max(bn, _config.FP8_BLOCK), max(bk, _config.FP8_BLOCK)
        for stages in depths:
            cfg = MoEConfig(bm, bn, bk, gm, warps, stages)
            if smem.total_bytes(cfg, arch, d) <= arch.smem_per_block_optin:
                return cfg
        # Nothing fits even at 2 stages (no catalogued arch): the grid's smallest tile.
        return MoEConfig(16, 32, 64, 1, 4, 2)

    def verify(self, configs: Sequence[MoEConfig], arch: Arch, dtype: str, scales: str | None = None,
               swap_ab: bool = False, **_: Any) -> list[OracleCheck]:
        """Compile each config with the live Triton compiler and compare with the model."""
        from tilefit.kernels.triton_moe.spec import compile_config

        d, form = self._dtype(arch, dtype), scales or "column"
        smem.table_dtype(d, form)  # a bad form is a UsageError before any compile
        checks = []
        for cfg in configs:
            swap = smem.swapped(cfg, d, swap_ab)
            r = compile_config(cfg, arch.cc_int, d, row_scale=form == "row", swap_ab=swap)
            checks.append(OracleCheck(cfg, arch, smem.total_bytes(cfg, arch, d, form, swap), r.shared,
                                      f"triton {r.triton_version}",
                                      {"seconds": round(r.seconds, 3), "cached": r.cached}))
        return checks

    def tile(self, config: MoEConfig) -> tuple[str, int]:
        """(tile, pipeline depth): the two things shared memory grows with. GROUP_SIZE_M never
        changes it and num_warps rarely does, so `fit` shows one row per tile at its deepest
        fitting depth."""
        return f"{config.block_m}x{config.block_n}x{config.block_k}", config.num_stages

    def summary(self, verdicts: Sequence[FitVerdict]) -> list[str]:
        """Human lines: how many configs cannot launch, and by how much the worst overshoots."""
        if not verdicts:
            return []
        arch = verdicts[0].arch
        over = [v for v in verdicts if not v.fits]
        lines = [f"{len(over)} of {len(verdicts)} configs cannot launch on {arch.name} "
                 f"(limit {arch.smem_per_block_optin:,} B per block; triton {smem.model_version()})"]
        if over:
            worst = max(over, key=lambda v: v.footprint.total if v.footprint else 0)
            if worst.footprint is not None:
                lines.append(f"largest request: {worst.config.label()} needs "
                             f"{worst.footprint.total:,} B ({worst.footprint.dominant().name} "
                             f"{worst.footprint.dominant().bytes:,} B)")
        return lines


FAMILY = TritonMoEFamily()
