"""Value types of the device-memory plan and the protocol each engine's memory rules implement.

Flow: a `MemoryRequest` (model, GPU, engine flags, settings) goes to an engine's `MemoryRules`,
which places every weight (`Placement`), sizes the KV cache per token and computes the pool its
memory rule allocates; `plan.py` turns that into a `MemoryPlan` (per GPU: weights by kind, KV,
the rest, free) with a verdict and the settings that would make a NO-GO fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tilefit.engines.types import TRUE_WORDS
from tilefit.hw.catalog import GPU
from tilefit.models.architecture import Architecture

GIB = 2**30


@dataclass(frozen=True, slots=True)
class Parallel:
    """The parallel flags as the engine reads them (not tilefit's own --tp/--ep).

    sglang: `tp` GPUs; `ep` carves expert parallelism out of them; `dp` with `dp_attention`
    splits attention. vLLM: `tp` x `dp` GPUs; `expert_parallel` makes the MoE layers EP over all.
    """

    tp: int = 1
    ep: int = 1
    dp: int = 1
    dp_attention: bool = False
    expert_parallel: bool = False  # vLLM --enable-expert-parallel
    a2a_backend: str = "none"  # sglang --moe-a2a-backend (deepep replicates shared experts)

    @classmethod
    def for_engine(cls, engine: str, gpus: int, ep: int = 1, dp: int = 1, a2a_backend: str = "none") -> Parallel:
        """The flags `engine` takes for `gpus` GPUs with experts split `ep` ways and attention
        `dp` ways: sglang --tp <gpus> --ep <ep> [--dp <dp> --enable-dp-attention]; vLLM
        -tp <gpus/dp> -dp <dp> [--enable-expert-parallel]."""
        if engine == "vllm":
            return cls(tp=gpus // dp, dp=dp, expert_parallel=ep > 1)
        return cls(tp=gpus, ep=ep, dp=dp, dp_attention=dp > 1, a2a_backend=a2a_backend)


@dataclass(frozen=True, slots=True)
class LaunchFlags:
    """What else of the launch command an engine's default rules read (sglang's reserve behind
    --mem-fraction-static): flags by the engine's own name (LaunchSpec.flags()), the environment
    the command sets, the pipeline stages and whether CUDA graphs are turned off."""

    flags: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    pipeline: int = 1
    disable_cuda_graph: bool = False  # sglang --disable-cuda-graph / vLLM --enforce-eager

    def mapping(self) -> dict[str, str]:
        return dict(self.flags)

    def on(self, name: str) -> bool:
        """A switch given as a flag (or an environment variable) with a true value."""
        value = dict(self.flags).get(name, dict(self.env).get(name, ""))
        return str(value).strip().lower() in TRUE_WORDS


@dataclass(frozen=True, slots=True)
class Settings:
    """Memory settings from the launch command; None means the engine's default."""

    mem_fraction: float | None = None  # sglang --mem-fraction-static / vLLM --gpu-memory-utilization
    context_length: int | None = None  # --context-length / --max-model-len
    max_running_requests: int | None = None  # --max-running-requests / --max-num-seqs
    kv_dtype: str = "auto"  # auto | bf16 | fp8 | fp4
    chunked_prefill: int | None = None  # --chunked-prefill-size / --max-num-batched-tokens
    cuda_graph_max_bs: int | None = None
    page_size: int | None = None  # sglang --page-size / vLLM --block-size
    moe_backend: str | None = None  # the MoE kernel path where it changes weight layout (vLLM mxfp4: marlin)
    launch: LaunchFlags = LaunchFlags()  # the rest of the launch command the engine's defaults read


def since(version: str | None, boundary: tuple[int, ...]) -> bool:
    """Whether engine `version` is `boundary` or later; no (or an unparsable) version counts as
    the newest wheel read, which is later than every boundary."""
    v = version_tuple(version)
    return v is None or v >= boundary


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """'0.5.9' -> (0, 5, 9); None or unparsable (or a part over 99,999) -> None (the rules then
    follow the newest wheel read). Parsed by `tilefit.versions`, so digits are bounded."""
    from tilefit.errors import UsageError
    from tilefit.versions import parse_version

    if not version:
        return None
    try:
        return parse_version(version, "engine version", "0.5.9")
    except UsageError:
        return None


def from_launch(spec: object) -> tuple[Parallel, Settings]:
    """The memory plan's inputs from a parsed launch command (`tilefit.launch.LaunchSpec`, read by
    attribute so this package does not depend on the parser): its layout (MoE TP, EP, attention
    DP over `layout.gpus` GPUs) and the memory settings the command gave."""
    engine, layout, ls = spec.engine, spec.layout, spec.settings  # type: ignore[attr-defined]
    kind = {"sglang": "static", "vllm": "utilization"}.get(engine)
    mf = ls.mem_fraction if getattr(ls, "mem_fraction_kind", kind) == kind else None
    kv = ls.kv_cache_dtype or "auto"
    graph_bs = ls.cuda_graph_max_bs
    sizes = getattr(ls, "cuda_graph_batch_sizes", None)
    if engine == "sglang" and graph_bs is None and sizes:
        graph_bs = max(sizes)  # --cuda-graph-bs sets the maximum (server_args.py 0.5.9-0.5.18, memory_hook.py)
    flags = getattr(spec, "flags", dict)()
    launch = LaunchFlags(flags=tuple(sorted(flags.items())), env=tuple(getattr(spec, "env", ())),
                         pipeline=int(getattr(spec, "pipeline", 1) or 1),
                         disable_cuda_graph=bool(getattr(ls, "disable_cuda_graph", False)))
    settings = Settings(mem_fraction=mf, context_length=ls.context_length,
                        max_running_requests=ls.max_running_requests, kv_dtype=kv,
                        chunked_prefill=ls.chunked_prefill_size, cuda_graph_max_bs=graph_bs, launch=launch)
    a2a = flags.get("moe_a2a_backend", "none") if engine == "sglang" else "none"
    return Parallel.for_engine(engine, layout.gpus, layout.ep, layout.dp, a2a), settings


@dataclass(frozen=True, slots=True)
class Placement:
    """How many ways each kind of weight is split on this engine and layout (1 = replicated)."""

    gpus: int
    attn_tp: int  # attention heads split
    vocab_shards: int  # input embedding
    lm_head_shards: int
    dense_shards: int  # dense MLP layers (first_k_dense)
    shared_shards: int  # shared experts
    expert_tp: int
    expert_ep: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Figure:
    """One amount of memory per GPU, with how it was obtained."""

    kind: str
    bytes: int
    basis: str  # "exact: ...", or "estimate: <basis>"

    @property
    def is_estimate(self) -> bool:
        return self.basis.startswith("estimate")


@dataclass(frozen=True, slots=True)
class KVLayout:
    """KV cache bytes per token on one GPU, all layers together."""

    bytes_per_token: int
    layers: int  # layers whose cache grows with the sequence
    dtype: str
    basis: str
    page_size: int = 1


@dataclass(frozen=True, slots=True)
class Pool:
    """What the engine's memory rule leaves for the KV cache on one GPU, and what it assumes."""

    kv_bytes: int
    rule: str  # the engine's formula in words, with the numbers
    startup: tuple[Figure, ...]  # non-weight, non-KV memory the plan counts before the pool
    runtime: tuple[Figure, ...]  # memory needed after the pool (graphs, activations, buffers)
    headroom: int  # memory the rule leaves outside the pool for `runtime`


@dataclass(frozen=True, slots=True)
class MemoryRequest:
    arch: Architecture
    gpu: GPU
    engine: str
    parallel: Parallel
    settings: Settings = field(default_factory=Settings)
    version: str | None = None


class MemoryRules(Protocol):
    """One engine's memory behaviour, read from its wheels (each module names the versions)."""

    name: str
    versions: str

    def placement(self, arch: Architecture, parallel: Parallel) -> Placement: ...

    def kv_layout(self, arch: Architecture, placement: Placement, settings: Settings) -> KVLayout: ...

    def defaults(self, req: MemoryRequest) -> Settings:
        """The request's settings with the engine's defaults filled in."""
        ...

    def extra_weights(self, arch: Architecture, placement: Placement, gpu: GPU,
                      settings: Settings) -> tuple[Figure, ...]:
        """Weight-sized tensors the engine makes at load (padding, absorbed copies)."""
        ...

    def pool(self, req: MemoryRequest, settings: Settings, weights: int, kv: KVLayout) -> Pool: ...

    def kv_tokens(self, arch: Architecture, pool_bytes: int, kv: KVLayout, version: str | None = None) -> int:
        """Tokens a pool of `pool_bytes` holds, with the engine's rounding to pages/blocks."""
        ...

    def max_requests(self, settings: Settings, kv_tokens: int) -> int:
        """The engine's running-request limit when none is given."""
        ...
