"""vLLM as tilefit models it: backend rules and remedies (data/*.toml rows with engine = "vllm"),
its Triton fused-MoE default configs and tuned-config files, and its log lines.

Read from vLLM's published wheels 0.11.0-0.33.0 (each fact names the versions it was read in).
M is the number of tokens in the batch, E the local experts, N the per-rank width I/tp.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tilefit.engines.a2a import vllm_ep_comm
from tilefit.engines.triton_moe import (
    TritonEngine, config_content, device_part, engine_dtype, package_dir, selectors, write_json_atomic)
from tilefit.engines.types import NO_ZERO_ROWS, ConfigLookup, EpComm, FinalizeState, Source, ZeroRows
from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch
from tilefit.layout.plan import Layout

TUNED_ENV = "VLLM_TUNED_CONFIG_FOLDER"
# get_moe_configs pops a tuned file's "triton_version" key from 0.11.0; 0.10.1-0.10.2 (which read
# VLLM_TUNED_CONFIG_FOLDER already) int() it like a batch key and fail on the files tilefit writes
# (fused_moe.py, vllm 0.9.0-0.33.0 wheels).
VERSION_KEY_POPPED_SINCE = "0.11.0"
PKG_CONFIGS = ("model_executor", "layers", "fused_moe", "configs")  # the shipped files

_PATH = "vllm/model_executor/layers/fused_moe/fused_moe.py (get_default_config)"
SRC = {
    "legacy": Source("vllm-project/vllm", _PATH, "0.11.0 and 0.16.0 wheels",
                     "same branches since 2025; no num_warps/num_stages except block fp8"),
    "0.17": Source("vllm-project/vllm", _PATH, "0.17.0 and 0.21.0 wheels; 0.22.0-0.24.0 keep it "
                   "(absent in 0.16.0)", "PR #34846 batch-aware defaults, merged 2026-02-18"),
    "0.25": Source("vllm-project/vllm", _PATH, "0.25.0, 0.29.0, 0.31.0, 0.33.0 wheels (absent in "
                   "0.24.0)", "block fp8: BLOCK_SIZE_N 64 and 4 stages at M <= 8"),
}
_RANGES = {"legacy": "vllm < 0.17.0", "0.17": "vllm >= 0.17.0, < 0.25.0", "0.25": "vllm >= 0.25.0"}


def _default(M: int, E: int, dtype: str | None, bs: tuple[int, int] | None, v: tuple[int, ...]
             ) -> tuple[dict[str, int], str, str]:
    """get_default_config's branches per version range: (partial config, branch, range key)."""
    if v < (0, 17):
        if dtype == "fp8_w8a8" and bs:
            return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": bs[0], "BLOCK_SIZE_K": bs[1],
                     "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}, "block fp8", "legacy")
        if M <= E:
            return ({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64,
                     "GROUP_SIZE_M": 1}, "M <= E", "legacy")
        return ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                "M > E", "legacy")
    key = "0.25" if v >= (0, 25) else "0.17"
    if dtype == "fp8_w8a8" and bs:
        block_n, stages = bs[0], 3
        if key == "0.25" and M <= 8 and bs[0] % 64 == 0:
            block_n, stages = 64, (4 if M <= 4 else 3)
        return ({"BLOCK_SIZE_M": 16 if M <= 64 else 64, "BLOCK_SIZE_N": block_n,
                 "BLOCK_SIZE_K": bs[1], "GROUP_SIZE_M": 1 if M <= 16 else 32,
                 "num_warps": 4, "num_stages": stages}, "block fp8", key)
    block_m = 16 if M <= 32 else 32 if M <= 96 else 64 if M <= 512 else 128
    cfg = {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": 64 if M <= 64 else 128,
           "BLOCK_SIZE_K": 128 if dtype == "fp8_w8a8" or M <= 64 else 64,
           "GROUP_SIZE_M": 16 if M // max(E, 1) > 128 else 1,
           "num_warps": 4 if M <= 128 else 8, "num_stages": 4 if M <= 32 else 3}
    return cfg, "bf16/fp16 or per-tensor fp8 (batch-aware)", key


def device_name(name: str) -> str:
    """The device part of a vLLM file name: spaces -> '_', any H200 variant -> 'NVIDIA_H200'
    (get_config_file_name, vllm 0.11.1-0.33.0 wheels; 0.11.0 keeps the full name)."""
    part = device_part(name)
    return "NVIDIA_H200" if "H200" in part.split("_") else part


def config_name(E: int, N: int, device: str, dtype: str | None = None,
                block_shape: tuple[int, int] | list[int] | None = None) -> str:
    """vLLM's file name, e.g. 'E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json'."""
    return (f"E={int(E)},N={int(N)},device_name={device_name(device)}"
            f"{selectors(dtype, block_shape, spaced=False)}.json")


class Vllm(TritonEngine):
    name, title, newest, tuned_config_env = "vllm", "vLLM", "0.33.0", TUNED_ENV
    # The API server's uvicorn line comes once the engine core finished warmup and CUDA-graph
    # capture. Fatal: vllm/v1/engine/core.py run_engine_core, v1/engine/utils.py (engine core
    # startup), v1/executor/multiproc_executor.py worker_busy_loop (0.11.0-0.33.0 wheels).
    ready_lines = ("Application startup complete.",)
    fatal_lines = ("EngineCore failed to start.", "EngineCore encountered a fatal error.",
                   "Engine core initialization failed. See root cause above.", "WorkerProc hit an exception")
    select = {"triton-moe": ("TRITON", "--moe-backend triton"),
              "flashinfer-cutlass": ("FLASHINFER_CUTLASS", "--moe-backend flashinfer_cutlass")}
    forced_sources = {"triton-moe": ("vllm_fp8_oracle", "vllm_unq_oracle"),
                      "flashinfer-cutlass": ("vllm_fi_cutlass",)}
    default_sources = SRC
    default_ranges = _RANGES

    def default_branch(self, M: int, E: int, dtype: str | None, block: tuple[int, int] | None,
                       version: tuple[int, int, int], arch: Arch) -> tuple[dict[str, int], str, str]:
        return _default(M, E, dtype, block, version)

    # fused_moe/utils.py enable_swap_ab (is_device_capability(90), BLOCK_SIZE_M < 64,
    # BLOCK_SIZE_N >= 64), taken for use_fp8_w8a8 in invoke_fused_moe_triton_kernel: vllm 0.25.0-
    # 0.33.0 wheels (0.33.0 utils.py l.706, fused_moe.py l.788); absent in 0.24.0.
    swap_ab_since = "0.25.0"
    # fp8-block weight scales per column: `offs_bsn = offs_bn // group_n` and `tl.dot(a, b) *
    # a_scale[:, None] * b_scale[None, :]` (fused_moe.py 0.11.1 l.461/509, 0.33.0 l.488/550), so
    # row_scale_since stays None.

    def ep_zero_rows(self, model: object, runner: str, *, version: str | None = None,
                     flags: Mapping[str, str] | None = None) -> ZeroRows:
        """With an expert map (EP without DP: every rank sees all tokens) moe_align_block_size maps
        other ranks' experts to -1 and fused_moe_kernel writes zeros to those pairs' rows
        (`if off_experts == -1: write_zeros_to_output`). Read per version: both GEMMs in the
        monolithic fused_experts_impl of 0.9.0-0.12.0; 0.13.0 drops those pairs before the
        alignment (`ignore_invalid_experts=True`, fused_moe.py l.1933-1939) but zero-fills gemm2's
        whole output first (`intermediate_cache3.zero_()`, l.1997); the modular TritonExperts, the
        default from 0.14.0, writes them again in both (0.14.0 fused_moe.py l.2417-2419, 0.30.0
        experts/triton_moe.py) until 0.31.0 drops them (experts/triton_moe.py
        `ignore_invalid_experts=skip_invalid`, 0.31.0-0.33.0; not with LoRA or a global dynamic
        per-tensor fp8 scale)."""
        if runner != "TRITON":
            return NO_ZERO_ROWS
        if self._since("0.31.0", version):
            return NO_ZERO_ROWS
        name = f"vllm {version or self.newest} (Triton experts)"
        if self._since("0.14.0", version) or not self._since("0.13.0", version):
            return ZeroRows(("gemm1", "gemm2"), f"{name} writes zeros to the rows of other ranks' "
                            "(token, k) pairs in both GEMMs' outputs")
        return ZeroRows(("gemm2",), f"{name} zero-fills gemm2's whole output before it (counted: "
                        "the other ranks' rows of it)")

    def ep_comm(self, layout: Layout, *, version: str | None = None,
                flags: Mapping[str, str] | None = None,
                environ: Mapping[str, str] | None = None) -> EpComm:
        """The all2all backend vLLM `version` resolves from --all2all-backend and
        VLLM_ALL2ALL_BACKEND, and whether it runs at all (engines/a2a.py)."""
        self.check_version(version)
        return vllm_ep_comm(layout, version or self.newest, flags or {}, environ or {})

    def wide_block_k(self, block_k: int, block: tuple[int, int]) -> str:
        """invoke_fused_moe_kernel sets BLOCK_SIZE_K = min(BLOCK_SIZE_K, min(block_shape)) before
        the launch (fused_moe.py, vllm 0.9.0-0.33.0 wheels; 0.11.0 line 616, 0.33.0 line 844)."""
        return (f"vLLM runs BLOCK_SIZE_K={block_k} as {min(block)} under {list(block)} block "
                f"scales (it clamps BLOCK_SIZE_K to the scale block), a kernel this run did not time")

    def _find(self, E: int, N: int, device: str, dtype: str | None, block: tuple[int, int] | None,
              user: Path | None, env: Mapping[str, str], triton_version: str | None,
              version: str | None, down: bool) -> ConfigLookup:
        """vLLM tries <config_dir>, then $VLLM_TUNED_CONFIG_FOLDER/<name>, then its shipped
        model_executor/layers/fused_moe/configs/<name> (get_moe_configs, 0.11.0-0.33.0). One file
        serves both GEMMs, so `down` changes nothing; the Triton version is not in the name."""
        name = config_name(E, N, device, dtype, block)
        roots: list[Path] = [user] if user is not None else []
        if env.get(TUNED_ENV):
            roots.append(Path(env[TUNED_ENV]))
        pkg = package_dir("vllm")
        if pkg is not None:
            roots.append(pkg.joinpath(*PKG_CONFIGS))
        tried = tuple(r / name for r in roots)
        found = next((p for p in tried if p.is_file()), None)
        note = "" if pkg is not None else "vllm is not installed here: its shipped configs were not searched"
        return ConfigLookup(self.name, name, found, tried, note)

    def write_tuned_configs(self, out_dir: str | os.PathLike[str], *, E: int, N: int,
                            device_name: str, weight_dtype: str, gemm1: Mapping[int, Mapping[str, int]],
                            gemm2: Mapping[int, Mapping[str, int]] | None,
                            triton_version: str | None) -> list[Path]:
        """One file, `triton_version` first (vLLM pops it before reading batch keys, from
        VERSION_KEY_POPPED_SINCE)."""
        if gemm2 is not None:
            raise UsageError("vLLM reads one fused-MoE config for both GEMMs; tune them together")
        dtype, block = engine_dtype(weight_dtype)
        name = config_name(E, N, device_name, dtype, block)
        return [write_json_atomic(Path(out_dir) / name, config_content(gemm1, triton_version))]

    def fused_finalize(self, *, version: str | None = None, environ: Mapping[str, str] | None = None,
                       settings: Mapping[str, str] | None = None) -> FinalizeState:
        """vLLM passes no use_fused_finalize to FlashInfer: FlashInfer's default (on) applies."""
        self.check_version(version)
        src = self.facts.sources
        return FinalizeState(self.name, True, "vLLM passes no use_fused_finalize: FlashInfer's "
                             "default (fused finalize on) applies",
                             (src["vllm_no_ff"], src["fi_fused_finalize"]))


ENGINE = Vllm()
