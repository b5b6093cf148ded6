"""The protocol every serving engine answers (sglang, vLLM, TensorRT-LLM: one module each).

check, diagnose, tune and the CLI ask an engine, found by name through engines.registry.get_engine,
and never branch on its name: its parallel layout from its flags, the MoE backend and kernel family
it runs, its default kernel configs, the tuned-config files it reads and writes, its fused-finalize
switch, how its EP ranks exchange tokens, what is fatal and the fixes, and its ready and fatal log
lines. Facts that are data live in engines/data/*.toml (each row with its source and the versions
read); engines/table.py reads them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from tilefit.engines.triton_moe import DefaultConfig
from tilefit.engines.types import (
    BackendChoice, ConfigLookup, EpComm, Fatality, FinalizeState, Remedy, SharedFusion, ZeroRows)
from tilefit.hw.catalog import Arch
from tilefit.layout.plan import Layout
from tilefit.models.types import MoEModel

PerBatch = Mapping[int, Mapping[str, int]]  # batch -> {BLOCK_SIZE_M, ..., num_stages}


@runtime_checkable
class Engine(Protocol):
    """One serving engine, as tilefit models it. Methods that do not apply to an engine (TensorRT-LLM
    has no Triton fused-MoE config files) raise a UsageError saying what it does instead."""

    name: str  # 'sglang', as the CLI's --engine spells it
    title: str  # 'SGLang', for sentences
    newest: str  # the newest version whose source was read: what `version=None` means for defaults
    tuned_config_env: str | None  # the variable that points the engine at tuned config files
    ready_lines: tuple[str, ...]  # log text that means the server is ready
    fatal_lines: tuple[str, ...]  # log text that means the engine died

    def layout(self, *, tp: int = 1, ep: int = 1, dp: int = 1, enable_expert_parallel: bool = False,
               enable_dp_attention: bool = False) -> Layout:
        """The MoE layout the engine's --tp/--ep/--dp flags (and vLLM's --enable-expert-parallel,
        sglang's --enable-dp-attention) give."""
        ...

    def backend(self, weight_dtype: str, arch: Arch | str, *, layout: Layout | None = None,
                version: str | None = None, override: str | None = "auto",
                environ: Mapping[str, str] | None = None,
                flags: Mapping[str, str] | None = None,
                architecture: str | None = None) -> BackendChoice:
        """The MoE backend and kernel family the engine runs for this quantization, arch, layout,
        version and environment; `override` is the CLI's --backend; `flags` the launch flags by the
        engine's own name (LaunchSpec.flags()), None when no launch command was given;
        `architecture` the model's config.json architecture (MoEModel.hf_architecture), which
        sglang's SM100 backend choice reads."""
        ...

    def default_configs(self, batches: Iterable[int], *, E: int, weight_dtype: str,
                        arch: Arch | str, version: str | None = None) -> dict[int, DefaultConfig]:
        """The Triton fused-MoE config the engine launches per batch size when no tuned file
        matches (E = local experts)."""
        ...

    def block_scales(self, version: str | None = None) -> str:
        """How the engine's Triton fused-MoE kernel applies fp8-block weight scales: "column" (one
        per output column) or "row" (one per row and K group where a tile's columns share a scale
        block): the triton-moe family's `scales` option."""
        ...

    def swap_ab_path(self, weight_dtype: str, arch: Arch | str, version: str | None = None) -> bool:
        """Whether the engine's Triton fused-MoE kernel computes narrow-row tiles as B^T A^T for
        this dtype and arch (the triton-moe family's `swap_ab` option)."""
        ...

    def find_tuned_config(self, *, E: int, N: int, device_name: str, weight_dtype: str,
                          triton_version: str | None = None,
                          config_dir: str | os.PathLike[str] | None = None,
                          environ: Mapping[str, str] | None = None, version: str | None = None,
                          down: bool = False) -> ConfigLookup:
        """The tuned config file the engine would load, and every path it tries, in its order."""
        ...

    def write_tuned_configs(self, out_dir: str | os.PathLike[str], *, E: int, N: int,
                            device_name: str, weight_dtype: str, gemm1: PerBatch,
                            gemm2: PerBatch | None, triton_version: str | None) -> list[Path]:
        """Write tuned configs in the engine's file format (atomically); the paths written."""
        ...

    def fused_finalize(self, *, version: str | None = None, environ: Mapping[str, str] | None = None,
                       settings: Mapping[str, str] | None = None) -> FinalizeState:
        """Whether gemm2's fused FINALIZE tactics are in play; `settings` are launch options by the
        engine's own name (e.g. TensorRT-LLM's moe_config.disable_finalize_fusion)."""
        ...

    def reads_down_files(self, version: str | None = None) -> bool:
        """Whether the engine reads a separately tuned gemm2 (`_down`) config file."""
        ...

    def down_block_m_mismatch(self, version: str | None = None) -> str:
        """What the engine does with a `_down` entry whose BLOCK_SIZE_M is not gemm1's at that
        batch: "override" (runs gemm1's) or "assert" (fails)."""
        ...

    def shared_fusion(self, model: MoEModel, layout: Layout, arch: Arch, runner: str, *,
                      version: str | None = None,
                      flags: Mapping[str, str] | None = None) -> SharedFusion:
        """Shared experts the engine appends to its fused MoE for this model and deployment (the
        fused MoE then runs local experts + that many, every token routed to them); `runner`: the
        MoE backend it runs (BackendChoice.engine_backend)."""
        ...

    def ep_zero_rows(self, model: MoEModel, runner: str, *, version: str | None = None,
                     flags: Mapping[str, str] | None = None) -> ZeroRows:
        """What the engine's fused MoE (`runner`, BackendChoice.engine_backend) writes under
        expert parallelism with replicated tokens for the (token, k) pairs routed to other
        ranks' experts: zeros to those rows of gemm1's and/or gemm2's output, or nothing;
        `flags`: the launch flags by the engine's own name."""
        ...

    def ep_comm(self, layout: Layout, *, version: str | None = None,
                flags: Mapping[str, str] | None = None,
                environ: Mapping[str, str] | None = None) -> EpComm:
        """How the engine moves tokens between the EP ranks of `layout` (its dp: attention data
        parallel ranks) with these launch flags (by the engine's own name) and environment."""
        ...

    def fatality(self, family: str) -> Fatality:
        """Whether a config/tactic of `family` that cannot launch kills the engine at warmup."""
        ...

    def remedies(self, family: str, *, arch: Arch | str | None = None, version: str | None = None,
                 kinds: tuple[str, ...] | None = None, dir: str | None = None,
                 name: str | None = None, file: str | None = None) -> list[Remedy]:
        """The fixes the engine offers for `family`, in its own terms (flags, env, YAML keys)."""
        ...
