"""FlashInfer / TensorRT-LLM CUTLASS MoE tactics: catalog, shared-memory model and oracle.

`FAMILY` answers the kernel-family protocol (tilefit.kernels.base): the tactics a FlashInfer version
profiles on an arch and dtype (catalog.py), the SharedStorage each needs (smem.py), whether it
launches (fits / exceeds shared memory / no dispatch case), and the blocklist that skips the rest.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch
from tilefit.kernels.base import (AUTOTUNER, EXCEEDS_SMEM, FITS, NO_DISPATCH, UNSUPPORTED, Blocklist,
                                  FitVerdict, Judgement, OracleCheck, SmemFootprint, judge, judgement)
from tilefit.kernels.flashinfer_cutlass import catalog, smem
from tilefit.kernels.flashinfer_cutlass.catalog import Tactic
from tilefit.numeric import bounded_int

_BARE_TILE = re.compile(r"^\s*\d+x\d+x\d+B?\s*$")

MAX_TILE = 4096  # no CUTLASS tile or cluster side is longer; only the digits are counted here
BLOCKLIST_ENV = "FLASHINFER_TACTICS_BLOCKLIST"
# FlashInfer's autotuner keys: f"{custom_op}::{runner class}", custom_op per GEMM (fused_moe/core.py).
BLOCKLIST_KEYS = {"gemm1": "trtllm::fused_moe::gemm1::MoERunner",
                  "gemm2": "trtllm::fused_moe::gemm2::MoERunner"}
# Every key flashinfer/autotuner's _collect_metadata() fills (0.6.15-0.7.4 wheels; cutlass_dsl_version
# from 0.7.0): TacticsBlocklist.load compares each and skips the file on a mismatch unless it is "*".
METADATA_KEYS = ("flashinfer_version", "cuda_version", "cublas_version", "cudnn_version",
                 "cudnn_frontend_version", "cutlass_dsl_version", "gpu")
BLOCKLIST_SINCE = "0.6.15"  # autotuner reads FLASHINFER_TACTICS_BLOCKLIST from 0.6.15 (absent in 0.6.14)


class FlashInferCutlassFamily:
    """The kernel-family protocol for FlashInfer's CUTLASS MoE grouped GEMMs."""

    name = "flashinfer-cutlass"
    options = ("flashinfer", "gemm", "fused_finalize")  # the family-specific options it accepts
    # FlashInfer's (and TensorRT-LLM's) autotuner profiles every tactic at warmup and skips failures.
    picked_by = AUTOTUNER

    def dtypes(self, arch: Arch) -> Sequence[str]:
        return catalog.dtypes_for(arch.name)

    def configs(self, arch: Arch, dtype: str, flashinfer: str | None = None, gemm: str | None = None,
                fused_finalize: bool = True, **_shape: Any) -> Sequence[Tactic]:
        """Every tactic FlashInfer `flashinfer` (default: latest catalogued) profiles, in its order;
        `fused_finalize` False is the list an engine that turns fused finalize off profiles (FINALIZE
        copies left out from FlashInfer 0.6.15, so later ids move).

        Shape options (tokens, hidden, ...) are accepted and ignored: the tactic list and each
        tactic's footprint do not depend on the GEMM's sizes.
        """
        return catalog.tactics(arch.name, dtype, flashinfer, gemm, fused_finalize)

    def judge(self, configs: Sequence[Tactic], arch: Arch, dtype: str, **options: Any) -> Judgement:
        return judgement(self, configs, arch, dtype, **options)

    def group(self, config: Tactic) -> str:
        return config.gemm or ""  # FlashInfer tunes gemm1 and gemm2 as two operations

    def extrapolated(self, config: Tactic, dtype: str) -> bool:
        return False  # every catalogued tactic's footprint was checked against the compiler

    def tile(self, config: Tactic) -> tuple[str, int] | None:
        return None  # a tactic's footprint also depends on its epilogue and swap-AB: one row each

    def source(self, flashinfer: str | None = None, **_options: Any) -> str:
        return f"FlashInfer {flashinfer}" if flashinfer else \
            f"FlashInfer {catalog.latest_version()} (the newest catalogued)"

    def parse_config(self, text: str, dtype: str, arch: Arch | None = None, flashinfer: str | None = None,
                     gemm: str | None = None, **_options: Any) -> Tactic:
        """A tactic from its spelling.

        Syntax: TILE [QUALIFIER ...], qualifiers separated by spaces, commas or '+':
          TILE       `128x256x128` (elements) or an enum `CtaShape128x256x64B` (K in bytes)
          finalize   the gemm2 epilogue with fused finalize (default: none)
          swap-ab    operands swapped (also `swap`, `swapab`)
          gemm1 / gemm2, and an MMA cluster `c2x1x1` (`2sm` on SM100)
          nosmem     SM100's NO_SMEM epilogue schedule (default: TMA)
          ultra      SM103's own NVFP4 kernel (Sm103, MMA K = 3 x tile K; also `sm103-ultra`, `native`)
        e.g. "128x256x128 finalize", "CtaShape128x64x64B+swap-ab". `flashinfer` and `gemm` (CLI options)
        are recorded on the tactic; a gemm qualifier in the text wins over `gemm`.
        """
        if dtype not in catalog.DTYPES:
            raise UsageError(f"unknown dtype {dtype!r}; known: {', '.join(catalog.DTYPES)}")
        words = [w for w in re.split(r"[\s,+]+", text.strip().lower()) if w]
        if not words:
            raise UsageError("empty tactic; write e.g. 128x256x128 or 'CtaShape128x256x64B finalize'")
        tile_word, qualifiers = words[0], words[1:]
        m = re.fullmatch(r"(?:ctashape)?(\d+)x(\d+)x(\d+)(b?)", tile_word)
        if not m:
            raise UsageError(f"bad tile {tile_word!r}; write MxNxK in elements (128x256x128) or an "
                             f"enum name (CtaShape128x256x64B)")
        mm, nn, kk = (bounded_int(g, "tile size", maximum=MAX_TILE) for g in m.group(1, 2, 3))
        enum_bytes = f"{mm}x{nn}x{kk}B" if m.group(4) else f"{mm}x{nn}x{kk * catalog.DTYPES[dtype][0] // 8}B"
        tile = catalog.enum_to_tile(enum_bytes, dtype)
        if arch is not None and dtype not in catalog.dtypes_for(arch.name):
            raise UsageError(f"FlashInfer's CUTLASS MoE has no {dtype} kernels on {arch.name}; dtypes there: "
                             f"{', '.join(catalog.dtypes_for(arch.name)) or 'none'}")
        # Without an arch, any arch's catalogued tile is accepted; verdict() judges it on the real arch.
        archs = [arch.name] if arch is not None else [a for a in catalog.ARCHS if dtype in catalog.dtypes_for(a)]
        arch_name = next((a for a in archs if "x".join(map(str, tile)) in catalog.known_tiles(a, dtype)), None)
        if arch_name is None:
            known = list(dict.fromkeys(x for a in archs for x in catalog.known_tiles(a, dtype)))
            where = archs[0] if len(archs) == 1 else "any arch"
            raise UsageError(f"unknown {dtype} tile {tile_word!r} on {where}; FlashInfer's catalogued "
                             f"tiles (elements): {', '.join(known) or 'none'}")
        fusion, swap, cluster, epilogue, native = "none", False, (1, 1, 1), "tma", False
        if gemm is not None and gemm not in catalog.GEMMS:
            raise UsageError(f"unknown gemm {gemm!r}; use gemm1 (gate/up) or gemm2 (down)")
        for q in qualifiers:
            if q in ("finalize", "fin"):
                fusion = "finalize"
            elif q in ("swap-ab", "swap", "swapab", "swap_ab"):
                swap = True
            elif q in catalog.GEMMS:
                gemm = q
            elif q == "2sm":
                cluster = (2, 1, 1)
            elif re.fullmatch(r"c?\d+x\d+x\d+", q):
                cluster = tuple(bounded_int(v, "cluster size", maximum=MAX_TILE)  # type: ignore[assignment]
                                for v in q.lstrip("c").split("x"))
            elif q in ("none", "nofusion"):
                fusion = "none"
            elif q in ("nosmem", "nosmem-epi", "no-smem"):
                epilogue = "nosmem"
            elif q in ("ultra", "sm103-ultra", "native"):
                native = True
            else:
                raise UsageError(f"unknown tactic qualifier {q!r}; use finalize, swap-ab, gemm1, gemm2, "
                                 f"nosmem (SM100 epilogue), ultra (SM103 NVFP4) or a cluster like c2x1x1")
        if fusion == "finalize" and gemm == "gemm1":
            raise UsageError("finalize fusion exists for gemm2 only (the down projection)")
        if epilogue == "nosmem" and (fusion == "finalize" or not arch_name.startswith("sm10")):
            raise UsageError("the NO_SMEM epilogue exists on sm100/sm103 without finalize fusion only")
        if native and (dtype != "nvfp4" or (arch is not None and arch.name != "sm103")):
            raise UsageError("SM103's own (ultra) kernels exist for nvfp4 on sm103 only")
        arch_name = "sm103" if native else arch_name
        if flashinfer is not None:
            catalog.parse_version(flashinfer)  # a bad spelling is a UsageError here, not later
        return Tactic(arch_name, dtype, catalog.enum_name(enum_bytes), tile, cluster, fusion, swap,
                      "tma-ws", gemm or ("gemm2" if fusion == "finalize" else None), None, flashinfer,
                      epilogue=epilogue, native=native)

    def footprint(self, config: Tactic, arch: Arch, dtype: str, flashinfer: str | None = None,
                  **_options: Any) -> SmemFootprint:
        return smem.footprint(_on(config, arch, dtype), flashinfer)

    def verdict(self, config: Tactic, arch: Arch, dtype: str, flashinfer: str | None = None,
                **_options: Any) -> FitVerdict:
        """FITS / EXCEEDS_SMEM (by how much) / NO_DISPATCH (FlashInfer's own message) / UNSUPPORTED."""
        if dtype not in catalog.dtypes_for(arch.name):
            known = ", ".join(catalog.dtypes_for(arch.name)) or "none"
            return FitVerdict(config, arch, None, UNSUPPORTED,
                              f"FlashInfer's CUTLASS MoE has no {dtype} kernels on {arch.name} "
                              f"(dtypes there: {known})")
        t = _on(config, arch, dtype)
        if t.native and arch.name != "sm103":
            return FitVerdict(config, arch, None, UNSUPPORTED, "SM103's own (ultra) kernels run on sm103 only")
        if t.epilogue != "tma" and not arch.name.startswith("sm10"):
            return FitVerdict(config, arch, None, UNSUPPORTED,
                              f"the {t.epilogue} epilogue schedule exists on sm100/sm103 only")
        version = flashinfer or config.flashinfer
        problem = catalog.dispatch_problem(t, version)
        if problem is not None:
            return FitVerdict(config, arch, None, NO_DISPATCH,
                              f"no dispatch case in FlashInfer {version or catalog.latest_version()}: "
                              f"{problem}")
        return judge(config, arch, smem.footprint(t, version))

    def default_config(self, arch: Arch, dtype: str, flashinfer: str | None = None, gemm: str = "gemm1",
                       **_shape: Any) -> Tactic:
        """The tactic FlashInfer runs untuned: the first of the GEMM's list (setRunnerProfiles takes
        mAllProfiles.front() for gemm1 and the first gemm2 entry for gemm2)."""
        return catalog.tactics(arch.name, dtype, flashinfer, gemm)[0]

    def verify(self, configs: Iterable[Tactic], arch: Arch, dtype: str, flashinfer: str | None = None,
               flashinfer_data: str | None = None, **_options: Any) -> list[OracleCheck]:
        """Compile the tactics' kernel types with nvcc and compare with the model (MissingDependency
        when nvcc or FlashInfer's headers are absent). The headers' CUTLASS should be the one the
        FlashInfer version pins; a mismatch is reported in each check's `extra`."""
        from tilefit.oracles import nvcc_cutlass

        placed = [(c, _on(c, arch, dtype)) for c in configs if c.schedule == "tma-ws"]
        todo = [t for c, t in placed if catalog.dispatch_problem(t, flashinfer or c.flashinfer) is None]
        if not todo:
            return []
        tc, results = nvcc_cutlass.measure(todo, flashinfer_data)
        # Compare like with like: the model under the CUTLASS the headers carry.
        oracle_pin = ".".join(map(str, smem.profile_by_cutlass(tc.cutlass_version).flashinfer_min))
        checks = []
        for t in todo:
            fp = smem.footprint(t, oracle_pin)
            row = results[t]
            asked = smem.profile_for(flashinfer or t.flashinfer).cutlass
            extra = {"model_stages": fp.stages, "cutlass": tc.cutlass_version}
            if asked != tc.cutlass_version:
                extra["note"] = (f"FlashInfer {flashinfer or t.flashinfer} pins CUTLASS {asked}; the headers "
                                 f"found carry {tc.cutlass_version}, so both sides use {tc.cutlass_version}")
            if "error" in row:
                extra["error"] = row["error"]
                checks.append(OracleCheck(t, arch, fp.total, -1, tc.describe(), extra))
                continue
            extra["oracle_stages"] = row["stages"]
            checks.append(OracleCheck(t, arch, fp.total, row["shared_storage"], tc.describe(), extra))
        return checks

    def expand(self, text: str, config: Tactic, arch: Arch, dtype: str, **options: Any) -> list[Tactic]:
        """The catalogued tactics a --config stands for: a bare tile ('128x256x128') means every
        catalogued tactic with that tile (fusion, swap-AB, cluster variants), a qualified one its own
        catalog entry, so verdicts and blocklists carry FlashInfer's tactic ids. [] if not catalogued."""
        catalog_tactics = self.configs(arch, dtype, **options)
        if _BARE_TILE.match(text):
            return [c for c in catalog_tactics
                    if c.tile == config.tile and (config.gemm is None or c.gemm == config.gemm)]
        return [c for c in catalog_tactics
                if c == (config if config.gemm else dataclasses.replace(config, gemm=c.gemm))]

    def blocklist(self, verdicts: Iterable[FitVerdict], flashinfer: str | None = None,
                  gpu_name: str | None = None, **_options: Any) -> Blocklist:
        """JSON for FLASHINFER_TACTICS_BLOCKLIST (a file path): every tactic predicted not to launch.

        Format (flashinfer/autotuner, FlashInfer >= 0.6.15): {"invalid_tactics":
        {"trtllm::fused_moe::gemm1::MoERunner": [ids], "trtllm::fused_moe::gemm2::MoERunner": [ids]}},
        ids being the autotuner's tactic indices (gemm2's continue after gemm1's). A "_metadata" block
        names the FlashInfer version and, given `gpu_name` (torch's device name), the GPU: FlashInfer
        skips the file where either differs, since the ids belong to that pair; the keys it also
        compares (CUDA, cuBLAS, cuDNN, CuTe-DSL versions) are "*", which matches anything.
        """
        verdicts = list(verdicts)
        versions = {v.config.flashinfer for v in verdicts if v.config.flashinfer}
        if flashinfer is None and len(versions) > 1:
            raise UsageError(f"tactics from several FlashInfer versions ({', '.join(sorted(versions))}); "
                             f"a blocklist is for one version")
        version = flashinfer or next(iter(versions), None) or catalog.latest_version()
        if catalog.parse_version(version) < catalog.parse_version(BLOCKLIST_SINCE):
            raise UsageError(f"FlashInfer {version} has no tactics blocklist ({BLOCKLIST_ENV} arrived in "
                             f"{BLOCKLIST_SINCE}); upgrade FlashInfer or drop --emit-blocklist")
        invalid: dict[str, list[int]] = {}
        for v in verdicts:
            t = v.config
            if v.status in (EXCEEDS_SMEM, NO_DISPATCH) and t.tactic_id is not None and t.gemm:
                invalid.setdefault(BLOCKLIST_KEYS[t.gemm], []).append(t.tactic_id)
        meta = {key: "*" for key in METADATA_KEYS}
        meta.update(flashinfer_version=version, gpu=gpu_name or "*")
        content = json.dumps({"_metadata": meta,
                              "invalid_tactics": {k: sorted(ids) for k, ids in sorted(invalid.items())}},
                             indent=2)
        return Blocklist(BLOCKLIST_ENV, content,
                         f"tactic ids of {self.source(flashinfer=flashinfer)}: "
                         f"ids move between versions, so pass --flashinfer with the version the engine "
                         f"has installed")

    def note(self, flashinfer: str | None = None, **_options: Any) -> str | None:
        """A caveat about the FlashInfer version asked for (e.g. not catalogued), or None."""
        return catalog.version_note(flashinfer) if flashinfer else None

    def summary(self, verdicts: Sequence[FitVerdict]) -> list[str]:
        """Extra lines for humans: counts per verdict and how to hand the failures to FlashInfer."""
        counts = {s: sum(1 for v in verdicts if v.status == s) for s in (FITS, EXCEEDS_SMEM, NO_DISPATCH)}
        lines = [f"{len(verdicts)} tactics: {counts[FITS]} fit, {counts[EXCEEDS_SMEM]} exceed shared "
                 f"memory, {counts[NO_DISPATCH]} have no dispatch case"]
        versions = {v.config.flashinfer for v in verdicts if v.config.flashinfer}
        old = [x for x in versions if catalog.parse_version(x) < catalog.parse_version(BLOCKLIST_SINCE)]
        if counts[EXCEEDS_SMEM] + counts[NO_DISPATCH] and old:
            lines.append(f"FlashInfer {', '.join(sorted(old))} has no tactics blocklist (since "
                         f"{BLOCKLIST_SINCE}); its autotuner skips these only after they fail")
        elif counts[EXCEEDS_SMEM] + counts[NO_DISPATCH]:
            lines.append(f"skip them: write --emit-blocklist output to a file and export "
                         f"{BLOCKLIST_ENV}=/path/to/that.json (FlashInfer >= {BLOCKLIST_SINCE})")
        return lines


def _on(config: Tactic, arch: Arch, dtype: str) -> Tactic:
    """`config` as it runs on `arch` with `dtype` (a parsed tactic may name another arch)."""
    if config.arch == arch.name and config.dtype == dtype:
        return config
    return catalog.with_changes(config, arch=arch.name, dtype=dtype)


FAMILY = FlashInferCutlassFamily()
