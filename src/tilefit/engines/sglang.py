"""SGLang as tilefit models it: backend rules and remedies (data/*.toml rows with engine = "sglang"),
its Triton fused-MoE default configs and tuned-config files, its fused-finalize switch, and its log
lines. Read from SGLang's published wheels 0.5.10-0.5.23 (each fact names the versions read).

File layout: <root>/configs/triton_X_Y_Z/E={E},N={N},device_name={dev}[,dtype={d}]
[,block_shape=[bn, bk]][_down].json (the block shape is Python's list repr, with a space); `_down`
holds gemm2's configs, whose BLOCK_SIZE_M must equal gemm1's at the same batch size.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tilefit.engines.a2a import sglang_ep_comm
from tilefit.engines.sglang_shared import shared_fusion
from tilefit.engines.table import TableEngine
from tilefit.engines.triton_moe import (
    TritonEngine, config_content, device_part, engine_dtype, installed_triton_version, package_dir,
    selectors, write_json_atomic)
from tilefit.engines.types import (
    NO_ZERO_ROWS, ConfigLookup, EpComm, FinalizeState, SharedFusion, Source, VersionRange, ZeroRows,
    flag_on, parse_version)
from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch
from tilefit.layout.plan import Layout
from tilefit.versions import parse_version as parse_triton_version

TUNED_ENV = "SGLANG_MOE_CONFIG_DIR"  # replaces the package folder; <dir>/configs/triton_X_Y_Z/
FUSED_FINALIZE_ENV = "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"
# Package-relative folders that hold the shipped files.
# (package-relative folder, first sglang version that has it): read from the sglang wheels
# 0.5.10-0.5.23 (fused_moe_triton_config.py moved to moe_runner/triton_utils in 0.5.11).
PKG_ROOTS = ((("srt", "layers", "moe", "moe_runner", "triton_utils"), "0.5.11"),
             (("srt", "layers", "moe", "fused_moe_triton"), ""))
# SGLang before 0.5.12 falls back through this fixed list (newest first); from 0.5.12 it lists the
# triton_* folders on disk, newest first (wheels 0.5.10-0.5.11 vs 0.5.12-0.5.23).
OLD_FALLBACK = ("3.4.0", "3.3.1", "3.2.0", "3.1.0")
LISTS_FOLDERS_SINCE = "0.5.12"
# The fused-finalize switch (environ.py): absent before 0.5.18, default on 0.5.18-0.5.20, off from 0.5.21.
FF_SWITCH = VersionRange("0.5.18", "")
FF_DEFAULT_ON = VersionRange("", "0.5.21")
_TRUE = ("1", "true", "yes", "on")
# SGLang switches its per-tensor fp8 default when the device's opt-in shared memory per block is
# below this (fused_moe_triton_config.py _LOW_SMEM_FP8_DEFAULT_CUTOFF_BYTES = 128 * 1024).
LOW_SMEM_CUTOFF = 128 * 1024

_OLD = "python/sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py (get_default_config)"
_NEW = ("python/sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py "
        "(get_default_config)")
SRC = {
    "legacy": Source("sgl-project/sglang", _OLD, "0.5.10 wheel; commits 083d601, c050f40",
                     "fp8 per-tensor 128x256x128 / 8 warps / 4 stages"),
    "0.5.15": Source("sgl-project/sglang", _NEW, "0.5.15-0.5.23 wheels (absent in 0.5.10)",
                     "low-smem fp8 default below 128 KiB opt-in smem"),
}
_RANGES = {"legacy": "sglang < 0.5.15", "0.5.15": "sglang >= 0.5.15"}


def _default(M: int, E: int, dtype: str | None, bs: tuple[int, int] | None, v: tuple[int, ...],
             arch: Arch) -> tuple[dict[str, int], str, str]:
    """get_default_config's branches per version range: (partial config, branch, range key)."""
    key = "0.5.15" if v >= (0, 5, 15) else "legacy"
    if dtype == "fp8_w8a8" and bs:
        return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": bs[0], "BLOCK_SIZE_K": bs[1],
                 "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}, "block fp8", key)
    if dtype == "fp8_w8a8":
        if key == "0.5.15" and arch.smem_per_block_optin < LOW_SMEM_CUTOFF:
            if M > E:
                return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 256,
                         "GROUP_SIZE_M": 64, "num_warps": 4, "num_stages": 2},
                        "per-tensor fp8, low-smem device, M > E", key)
            return ({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 256,
                     "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4},
                    "per-tensor fp8, low-smem device, M <= E", key)
        if M <= E:
            return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128,
                     "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4}, "per-tensor fp8, M <= E", key)
        return ({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128,
                 "GROUP_SIZE_M": 32, "num_warps": 8, "num_stages": 4}, "per-tensor fp8, M > E", key)
    if M <= E:
        return ({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1},
                "M <= E", key)
    return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
            "M > E", key)


def version_dir(triton_version: str) -> str:
    """'3.4.0' -> 'triton_3_4_0' (SGLang keeps one folder per Triton version)."""
    v = str(triton_version).strip()
    if not v or any(c in v for c in "/\\\0"):
        raise UsageError(f"bad Triton version {triton_version!r} for an SGLang config folder")
    return "triton_" + v.replace(".", "_")


def config_name(E: int, N: int, device: str, dtype: str | None = None,
                block_shape: tuple[int, int] | list[int] | None = None, down: bool = False) -> str:
    """SGLang's file name (no folder); `down` names the separately tuned gemm2 file."""
    return (f"E={int(E)},N={int(N)},device_name={device_part(device)}"
            f"{selectors(dtype, block_shape, spaced=True)}{'_down' if down else ''}.json")


def config_relpath(E: int, N: int, device: str, triton_version: str, dtype: str | None = None,
                   block_shape: tuple[int, int] | list[int] | None = None, down: bool = False) -> str:
    """'triton_3_4_0/E=..,N=..,device_name=..[,dtype=..][,block_shape=[bn, bk]][_down].json'."""
    return f"{version_dir(triton_version)}/" + config_name(E, N, device, dtype, block_shape, down)


def check_down_configs(gemm1: Mapping[int, Mapping[str, int]],
                       gemm2: Mapping[int, Mapping[str, int]]) -> None:
    """SGLang's rule for a `_down` file: same batch keys, BLOCK_SIZE_M equal to gemm1's."""
    if set(gemm1) != set(gemm2):
        raise ValueError(f"gemm1 and gemm2 configs cover different batches: "
                         f"{sorted(set(gemm1) ^ set(gemm2))}")
    bad = [b for b in gemm1 if gemm1[b]["BLOCK_SIZE_M"] != gemm2[b]["BLOCK_SIZE_M"]]
    if bad:
        raise ValueError(f"SGLang's _down configs need gemm1's BLOCK_SIZE_M; batches {sorted(bad)} differ")


def _version_dirs(root: Path, version: str, old: bool) -> list[str]:
    """triton_X_Y_Z folders in SGLang's search order: the running version, then the fallbacks."""
    first = version_dir(version)
    if old:
        rest = [version_dir(v) for v in OLD_FALLBACK]
    else:
        found = [d.name for d in root.iterdir() if d.is_dir() and d.name.startswith("triton_")
                 and all(p.isdigit() for p in d.name[len("triton_"):].split("_"))] \
            if root.is_dir() else []
        rest = sorted(found, key=lambda n: tuple(int(p) for p in n[len("triton_"):].split("_")),
                      reverse=True)
    return [first] + [d for d in rest if d != first]


class Sglang(TritonEngine):
    name, title, newest, tuned_config_env = "sglang", "SGLang", "0.5.23", TUNED_ENV
    # srt/entrypoints/http_server.py (uvicorn's own lines come before sglang's warmup finishes);
    # fatal: srt/managers/scheduler.py and the launcher's SIGQUIT handler in srt/entrypoints/engine.py.
    ready_lines = ("The server is fired up and ready to roll!",)
    fatal_lines = ("Scheduler hit an exception:", "Received sigquit from a child process")
    select = {"triton-moe": ("triton", "--moe-runner-backend triton"),
              "flashinfer-cutlass": ("flashinfer_cutlass", "--moe-runner-backend flashinfer_cutlass")}
    forced_sources = {"triton-moe": ("sgl_fp8_runner", "sgl_unquant_runner"),
                      "flashinfer-cutlass": ("sgl_fp8_runner", "sgl_nvfp4_runner", "sgl_mxfp4")}
    default_sources = SRC
    default_ranges = _RANGES

    def shared_fusion(self, model: Any, layout: Layout, arch: Arch, runner: str, *,
                      version: str | None = None, flags: Mapping[str, str] | None = None) -> SharedFusion:
        return shared_fusion(version or self.newest, architecture=model.hf_architecture,
                             routed=model.num_experts, shared=model.shared_experts, layout=layout,
                             arch=arch, runner=runner, flags=flags or {},
                             shared_width=model.shared_expert_width, routed_width=model.expert_width)

    def ep_comm(self, layout: Layout, *, version: str | None = None,
                flags: Mapping[str, str] | None = None,
                environ: Mapping[str, str] | None = None) -> EpComm:
        """--moe-a2a-backend as SGLang `version` reads it (engines/a2a.py)."""
        self.check_version(version)
        return sglang_ep_comm(layout, version or self.newest, flags or {})

    def ep_zero_rows(self, model: Any, runner: str, *, version: str | None = None,
                     flags: Mapping[str, str] | None = None) -> ZeroRows:
        """Under EP the Triton runner maps other ranks' experts to -1 and aligns those pairs into
        a bucket of their own; fused_moe_kernel writes zeros to their rows in both GEMMs (`if
        off_experts == -1: write_zeros_to_output`): the 0.4.10 wheel (fused_moe_triton/
        fused_moe.py) and every wheel 0.5.10-0.5.23 (0.5.10 fused_moe_triton_kernels.py
        l.440-455; 0.5.23 kernels/ops/moe/fused_moe_triton_kernels.py l.458-478). In 0.5.23 gemm2
        adds into a zeroed [T, hidden] output instead under --enable-fused-moe-sum-all-reduce with
        top-k above 2 (moe_runner/triton_utils/fused_moe.py l.634-641, l.889-891). Not followed: a
        tuned `_down` file's USE_TMA (gemm1 then writes in sorted order, no zeros), and the fused
        SwiGLU path of 0.5.18-0.5.22 (SGLANG_OPT_FUSE_SWIGLU_INTERLEAVED=1, bf16), which skips
        gemm1's."""
        if runner != "triton":
            return NO_ZERO_ROWS
        if not self._since("0.4.10", version):
            return NO_ZERO_ROWS  # not read
        v = version or self.newest
        summed = (self._since("0.5.23", version) and model.top_k > 2
                  and flag_on(flags or {}, "enable_fused_moe_sum_all_reduce"))
        if summed:
            return ZeroRows(("gemm1",), f"sglang {v} (Triton runner) writes zeros to the rows of "
                            "other ranks' (token, k) pairs in gemm1's output; gemm2 adds into a "
                            "zeroed output under --enable-fused-moe-sum-all-reduce")
        return ZeroRows(("gemm1", "gemm2"), f"sglang {v} (Triton runner) writes zeros to the rows "
                        "of other ranks' (token, k) pairs in both GEMMs' outputs")

    def forced_family(self, family: str, dtype: str, arch: Arch) -> tuple[str, tuple[str, ...]]:
        family, caveats = TableEngine.forced_family(self, family, dtype, arch)
        if family == "flashinfer-cutlass" and dtype.startswith("fp8"):
            # sglang 0.5.23 Fp8MoEMethod has no flashinfer_cutlass path: it runs those layers on Triton.
            return TableEngine.forced_family(self, "triton-moe", dtype, arch)[0], (
                "sglang runs FP8 experts on Triton even under --moe-runner-backend flashinfer_cutlass "
                "(Fp8MoEMethod.create_moe_runner)",)
        return family, caveats

    def backend_name(self, family: str, dtype: str) -> tuple[str, str]:
        if dtype == "mxfp4" and family == "flashinfer-cutlass":  # sglang 0.5.23 quantization/mxfp4.py
            return "flashinfer_mxfp4", "--moe-runner-backend flashinfer_mxfp4"
        return self.select[family]

    def default_branch(self, M: int, E: int, dtype: str | None, block: tuple[int, int] | None,
                       version: tuple[int, int, int], arch: Arch) -> tuple[dict[str, int], str, str]:
        return _default(M, E, dtype, block, version, arch)

    # should_enable_swap_ab (is_sm90_supported: compute capability 9.x with CUDA >= 12.3;
    # BLOCK_SIZE_M < 64, BLOCK_SIZE_N >= 64), taken for use_fp8_w8a8 in invoke_fused_moe_kernel:
    # sglang 0.5.10-0.5.23 wheels (0.5.23 fused_moe_triton_kernels.py l.62-69); absent in 0.4.10.
    swap_ab_since = "0.5.10"
    # fused_moe_kernel with block scales: `offs_bsn = pid_n * BLOCK_SIZE_N // group_n` unless
    # BLOCK_SIZE_N > group_n, then `accumulator += tl.dot(a, b) * (a_scale[:, None] * b_scale)`:
    # one weight scale per tile and K group. Read in the wheels: per column (`offs_bsn = offs_bn //
    # group_n` always) in 0.4.10 (fused_moe_triton/fused_moe.py l.462), 0.5.4 and 0.5.4.post1
    # (fused_moe_triton_kernels.py l.447); per row from 0.5.4.post2 (l.476) and in 0.5.5 (l.478/545),
    # 0.5.6, 0.5.7, 0.5.9, every wheel 0.5.10-0.5.23 (0.5.10 l.497/570, 0.5.15
    # moe_runner/triton_utils/ l.501/574, 0.5.23 kernels/ops/moe/ l.529/602). Versions compare
    # by release (0.5.4.post2 reads as 0.5.4), so 0.5.4's post releases count as per column.
    row_scale_since = "0.5.5"
    # try_get_optimal_moe_config(return_down_config=True) reads the `_down` file from 0.5.4.post2
    # (absent in 0.5.4.post1) and asserts `config["BLOCK_SIZE_M"] == down_config["BLOCK_SIZE_M"]`
    # through 0.5.12.post1 (0.5.4.post2 fused_moe_triton_config.py l.239, 0.5.9 l.265, 0.5.10
    # l.265, 0.5.12 moe_runner/triton_utils/ l.273); from 0.5.13 it logs "down_moe config
    # BLOCK_SIZE_M=.. does not match up config .. overriding down BLOCK_SIZE_M to match" and runs
    # gemm1's (0.5.13, 0.5.14 l.310, 0.5.18 l.327, 0.5.23 l.324-338).
    down_block_m_override_since = "0.5.13"
    # The `_down` file is read from 0.5.4.post2 (absent in 0.5.4.post1); versions compare by
    # release, so 0.5.4's post releases count as not reading it.
    down_files_since = "0.5.5"

    def wide_block_k(self, block_k: int, block: tuple[int, int]) -> str:
        """fused_moe_kernel loads one scale per K step, at k_start // group_k, and nothing clamps
        BLOCK_SIZE_K (fused_moe_triton_kernels.py, sglang 0.5.10-0.5.23 wheels, 0.5.23 line 591;
        fused_moe.py line 511 in 0.4.10); its tuner keeps only BLOCK_SIZE_K dividing the block
        (benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py)."""
        return (f"SGLang's kernel scales each BLOCK_SIZE_K step by one {list(block)} block's "
                f"scales: BLOCK_SIZE_K={block_k} spans {block_k // block[1]} scale groups and "
                f"would compute wrong results")

    def _find(self, E: int, N: int, device: str, dtype: str | None, block: tuple[int, int] | None,
              user: Path | None, env: Mapping[str, str], triton_version: str | None,
              version: str | None, down: bool) -> ConfigLookup:
        """SGLang reads <root>/configs/triton_X_Y_Z/<name>, root being $SGLANG_MOE_CONFIG_DIR
        (replacing its package folder) or the package, falling back to other triton_* folders.
        `user` (an SGLANG_MOE_CONFIG_DIR, or tilefit tune's output) is searched first."""
        triton = triton_version or installed_triton_version()
        if not triton:
            raise UsageError("SGLang keeps configs per Triton version: pass the Triton version the "
                             "server runs (e.g. --triton-version 3.4.0)")
        parse_triton_version(triton, "Triton version", "3.4.0")
        return self._lookup(E, N, device, dtype, block, user, env, triton, version, down)

    def _lookup(self, E, N, device, dtype, block, user, env, triton, version, down) -> ConfigLookup:
        name = config_name(E, N, device, dtype, block, down)
        roots: list[Path] = [user / "configs", user] if user is not None else []
        notes: list[str] = []
        if env.get(TUNED_ENV):
            roots.append(Path(env[TUNED_ENV]) / "configs")
            notes.append(f"{TUNED_ENV} is set: SGLang will not read its shipped configs")
        else:
            pkg = package_dir("sglang")
            if pkg is None:
                notes.append("sglang is not installed here: its shipped configs were not searched")
            for rel, _since in PKG_ROOTS if pkg is not None else ():
                if pkg.joinpath(*rel, "configs").is_dir():
                    roots.append(pkg.joinpath(*rel, "configs"))
                    break
        old = version is not None and parse_version(version) < parse_version(LISTS_FOLDERS_SINCE)
        tried = [root / vdir / name for root in roots for vdir in _version_dirs(root, triton, old)]
        found = next((p for p in tried if p.is_file()), None)
        if found is not None and version_dir(triton) not in found.parts:
            notes.append(f"found only for another Triton version ({found.parent.name}): SGLang uses "
                         f"it with a 'Fallback to triton version' warning")
        if found is None and down:
            up = self._lookup(E, N, device, dtype, block, user, env, triton, version, False)
            if up.found is not None:
                notes.append("no _down file: SGLang 0.5.23 reuses the gemm1 (up) config for gemm2")
            return ConfigLookup(self.name, name, up.found, tuple(tried) + up.tried, "; ".join(notes))
        return ConfigLookup(self.name, name, found, tuple(tried), "; ".join(notes))

    def write_tuned_configs(self, out_dir: str | os.PathLike[str], *, E: int, N: int,
                            device_name: str, weight_dtype: str, gemm1: Mapping[int, Mapping[str, int]],
                            gemm2: Mapping[int, Mapping[str, int]] | None,
                            triton_version: str | None) -> list[Path]:
        """gemm1's file under configs/triton_X_Y_Z/ and, when gemm2 was tuned separately, the
        `_down` file next to it: `out_dir` is the folder to give SGLang as SGLANG_MOE_CONFIG_DIR
        (it reads <dir>/configs/triton_X_Y_Z/ and lists <dir>/configs, failing when it is
        missing). No "triton_version" key: SGLang's loader int()s every key."""
        if not triton_version:
            raise UsageError("SGLang files live in a triton_X_Y_Z folder: the Triton version is needed")
        dtype, block = engine_dtype(weight_dtype)
        if gemm2 is not None:
            check_down_configs(gemm1, gemm2)
        files = [(gemm1, False)] + ([(gemm2, True)] if gemm2 is not None else [])
        return [write_json_atomic(Path(out_dir) / "configs" / config_relpath(E, N, device_name, triton_version,
                                                                 dtype, block, down),
                                  config_content(per_batch, None)) for per_batch, down in files]

    def fused_finalize(self, *, version: str | None = None, environ: Mapping[str, str] | None = None,
                       settings: Mapping[str, str] | None = None) -> FinalizeState:
        """FlashInfer defaults use_fused_finalize to on; sglang passes SGLANG_FLASHINFER_MOE_FUSED_FINALIZE
        (absent before 0.5.18, default on in 0.5.18-0.5.20, off from 0.5.21). With `version` None
        the answer is known only where every version agrees; else `enabled` is None."""
        self.check_version(version)
        src = (self.facts.sources["sgl_ff_env"], self.facts.sources["fi_fused_finalize"])
        env = environ or {}
        given = env.get(FUSED_FINALIZE_ENV)
        switched_on = given is not None and given.strip().lower() in _TRUE
        if version is None:
            if given is not None and switched_on:
                return FinalizeState(self.name, True, f"{FUSED_FINALIZE_ENV}={given}, and sglang before "
                                     f"0.5.18 always runs FlashInfer's default (on)", src)
            tail = (f"; {FUSED_FINALIZE_ENV}={given} takes effect only from sglang 0.5.18"
                    if given is not None else "")
            return FinalizeState(self.name, None, (
                "FINALIZE tactics are profiled only when sglang runs FlashInfer with fused "
                "finalize: always before 0.5.18, by default in 0.5.18-0.5.20, from 0.5.21 only "
                f"with {FUSED_FINALIZE_ENV}=1{tail} (pass --engine-version to decide)"), src)
        if not FF_SWITCH.contains(version):
            return FinalizeState(self.name, True, "this sglang has no fused-finalize switch; "
                                 "FlashInfer's default (on) applies", src)
        if given is not None:
            return FinalizeState(self.name, switched_on, f"{FUSED_FINALIZE_ENV}={given}", src)
        default = FF_DEFAULT_ON.contains(version)
        return FinalizeState(self.name, default, f"{FUSED_FINALIZE_ENV} unset: default "
                             f"{'1' if default else '0'} in this sglang version", src)


ENGINE = Sglang()
