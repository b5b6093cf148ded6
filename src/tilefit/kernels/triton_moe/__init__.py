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
from tilefit.kernels.base import FitVerdict, OracleCheck, SmemFootprint, UNSUPPORTED, judge
from tilefit.kernels.triton_moe import config as _config
from tilefit.kernels.triton_moe import smem
from tilefit.kernels.triton_moe.config import MoEConfig

# fp8 (e4m3) tensor-core dots exist from sm89 on (Ada, Hopper, Blackwell).
_FP8_MIN_CC = (8, 9)


class TritonMoEFamily:
    """The kernel-family protocol for our Triton fused-MoE grouped GEMM."""

    name = "triton-moe"

    def dtypes(self, arch: Arch) -> Sequence[str]:
        return ("bf16", "fp16", "fp8") if arch.cc >= _FP8_MIN_CC else ("bf16", "fp16")

    def _dtype(self, arch: Arch, dtype: str) -> str:
        d = _config.canonical_dtype(dtype)
        if d not in self.dtypes(arch):
            raise UsageError(f"triton-moe has no {d} path on {arch.name} (fp8 needs sm89 or newer); "
                             f"use one of {', '.join(self.dtypes(arch))}")
        return d

    def configs(self, arch: Arch, dtype: str, grid: str = "full", **_: Any) -> list[MoEConfig]:
        """The engines' 1920-config grid (fp8: its 128-multiple N/K subset, 640 configs)."""
        return _config.grid_configs(self._dtype(arch, dtype), grid)

    def parse_config(self, text: str, dtype: str = "bf16") -> MoEConfig:
        return _config.parse_config(text, dtype)

    def footprint(self, config: MoEConfig, arch: Arch, dtype: str) -> SmemFootprint:
        return smem.footprint(config, arch, self._dtype(arch, dtype))

    def verdict(self, config: MoEConfig, arch: Arch, dtype: str) -> FitVerdict:
        d = _config.canonical_dtype(dtype)
        if d not in self.dtypes(arch):
            return FitVerdict(config, arch, None, UNSUPPORTED,
                              f"no {d} tensor-core path on {arch.name}")
        return judge(config, arch, smem.footprint(config, arch, d))

    def default_config(self, arch: Arch, dtype: str, *, M: int = 1, E: int = 1, N: int = 0,
                       K: int = 0, topk: int = 8, **_: Any) -> MoEConfig:
        """The config used when no tuned one exists, in the spirit of the engines' heuristics.

        From the expected rows per expert m = M*topk/E: BLOCK_SIZE_M is the power of two >= m
        clamped to [16, 64] (small blocks waste less padding when experts get few tokens);
        BLOCK_SIZE_N 64 for BM <= 32 (memory-bound: more column blocks to fill the SMs), else 128;
        BLOCK_SIZE_K 128 for BM <= 32, else 64; GROUP_SIZE_M 1 for BM <= 32, else 16; 4 warps;
        fp8 needs N/K blocks of 128. num_stages is the deepest of 4, 3, 2 whose shared memory (the
        model) fits the arch. N and K are accepted for signature compatibility; unused for now.
        """
        d = self._dtype(arch, dtype)
        m = max(1, -(-int(M) * int(topk) // max(1, int(E))))
        bm = min(64, max(16, 1 << (m - 1).bit_length()))
        small = bm <= 32
        bn, bk, gm = (64, 128, 1) if small else (128, 64, 16)
        if d == "fp8":
            bn, bk = 128, 128
        for stages in (4, 3, 2):
            cfg = MoEConfig(bm, bn, bk, gm, 4, stages)
            if smem.total_bytes(cfg, arch, d) <= arch.smem_per_block_optin:
                return cfg
        return cfg

    def verify(self, configs: Sequence[MoEConfig], arch: Arch, dtype: str,
               **_: Any) -> list[OracleCheck]:
        """Compile each config with the live Triton compiler and compare with the model."""
        from tilefit.kernels.triton_moe.spec import compile_config

        d = self._dtype(arch, dtype)
        checks = []
        for cfg in configs:
            r = compile_config(cfg, arch.cc_int, d)
            checks.append(OracleCheck(cfg, arch, smem.total_bytes(cfg, arch, d), r.shared,
                                      f"triton {r.triton_version}",
                                      {"seconds": round(r.seconds, 3), "cached": r.cached}))
        return checks

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
