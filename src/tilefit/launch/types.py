"""The typed result of reading a serving engine's launch command.

A LaunchSpec says what the engine will build from its command line: how many GPUs, the MoE layout
(tilefit's Layout: tp = MoE tensor parallel, ep = expert parallel, dp = attention data parallel),
the settings that matter to kernels and memory, the environment, and every flag it did not use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilefit.layout.plan import Layout

# How each engine's memory fraction is meant (the memory helper reads `mem_fraction_kind`):
# sglang --mem-fraction-static: the share of GPU memory for weights + KV cache;
# vLLM --gpu-memory-utilization: the share of GPU memory the whole process may use;
# TensorRT-LLM kv_cache_config.free_gpu_memory_fraction: the share of the memory left after the
# weights and buffers that goes to the KV cache.
MEM_FRACTION_KINDS = ("static", "utilization", "free")


@dataclass(frozen=True, slots=True)
class LaunchSettings:
    """Engine settings that change kernels, memory or limits. None: not given (the engine's default
    applies). Names are tilefit's; each engine module maps its own flags onto them."""

    quantization: str | None = None  # sglang/vLLM --quantization (e.g. "modelopt_fp4", "fp8")
    moe_backend: str | None = None  # --moe-runner-backend / --moe-backend / moe_config.backend
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    mem_fraction: float | None = None
    mem_fraction_kind: str | None = None  # one of MEM_FRACTION_KINDS when mem_fraction is set
    max_running_requests: int | None = None  # --max-running-requests / --max-num-seqs / max_batch_size
    context_length: int | None = None  # --context-length / --max-model-len / max_seq_len
    chunked_prefill_size: int | None = None  # --chunked-prefill-size / --max-num-batched-tokens / max_num_tokens
    cuda_graph_batch_sizes: tuple[int, ...] | None = None
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    flashinfer_autotune: bool | None = None  # False: sglang --disable-flashinfer-autotune
    # Other engine options by the engine's own name that rules read (e.g. TensorRT-LLM
    # "moe_config.disable_finalize_fusion"), as given.
    extra: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_values(cls, values: dict[str, object], mem_fraction_kind: str, **given: object
                    ) -> "LaunchSettings":
        """Settings from parsed flag values named as data/tables.toml names them (quantization,
        mem_fraction, cuda_graph_bs, ...); `given` overrides (e.g. a backend a legacy flag chose)."""
        v = values
        fields: dict[str, object] = {
            "quantization": v.get("quantization"), "moe_backend": v.get("moe_backend"),
            "kv_cache_dtype": v.get("kv_cache_dtype"), "dtype": v.get("dtype"),
            "mem_fraction": v.get("mem_fraction"),
            "mem_fraction_kind": mem_fraction_kind if v.get("mem_fraction") is not None else None,
            "max_running_requests": v.get("max_running_requests"),
            "context_length": v.get("context_length"),
            "chunked_prefill_size": v.get("chunked_prefill_size"),
            "cuda_graph_batch_sizes": v.get("cuda_graph_bs"),
            "cuda_graph_max_bs": v.get("cuda_graph_max_bs"),
            "disable_cuda_graph": bool(v.get("disable_cuda_graph")),
        }
        fields.update(given)
        return cls(**fields)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for name in self.__slots__:  # type: ignore[attr-defined]
            value = getattr(self, name)
            out[name] = dict(value) if name == "extra" else (
                list(value) if isinstance(value, tuple) else value)
        return out


@dataclass(frozen=True, slots=True)
class Parallel:
    """What an engine's parallel flags build: one replica's MoE layout and every GPU used."""

    layout: Layout
    gpus: int
    replicas: int = 1
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """One launch command as the engine reads it."""

    engine: str  # "sglang" | "vllm" | "trtllm"
    model: str  # model path or Hugging Face id, as given
    layout: Layout  # the MoE layout one replica builds
    gpus: int  # every GPU the command uses: replicas, pipeline stages and nodes included
    settings: LaunchSettings
    env: tuple[tuple[str, str], ...] = ()  # leading VAR=value, export, docker -e, mpirun -x
    ignored: tuple[str, ...] = ()  # flags the engine knows that do not change tilefit's answers
    unknown: tuple[str, ...] = ()  # flags this engine's parser (as read) does not know
    argv: tuple[str, ...] = ()  # the engine's arguments, after the entry point
    engine_version: str | None = None  # never known from a command line; the caller may set it
    replicas: int = 1  # sglang --dp without DP attention: independent copies of the model
    pipeline: int = 1  # pipeline-parallel stages
    nodes: int = 1
    notes: tuple[str, ...] = field(default=(), compare=False)  # how the layout was derived

    @property
    def environ(self) -> dict[str, str]:
        return dict(self.env)

    def flags(self) -> dict[str, str]:
        """Launch flags by the engine's own name, for engine rules that read the command line
        (sglang's SM120 NVFP4 rule reads --quantization)."""
        out = {k: v for k, v in self.settings.extra}
        if self.settings.quantization is not None:
            out["quantization"] = self.settings.quantization
        if self.settings.moe_backend is not None:
            out["moe_backend"] = self.settings.moe_backend
        return out

    def headline(self) -> str:
        """'8 GPUs: sglang builds MoE EP8 (TP1 per expert), attention TP8' - the first line."""
        lay = self.layout
        moe = f"EP{lay.ep}" if lay.ep > 1 else f"TP{lay.tp}"
        if lay.ep > 1 and lay.tp > 1:
            moe = f"TP{lay.tp} x EP{lay.ep}"
        attention = f"attention TP{lay.attention_tp}" + (f" x DP{lay.dp}" if lay.dp > 1 else "")
        extra = []
        if self.pipeline > 1:
            extra.append(f"{self.pipeline} pipeline stages")
        if self.replicas > 1:
            extra.append(f"{self.replicas} replicas")
        if self.nodes > 1:
            extra.append(f"{self.nodes} nodes")
        tail = f" ({', '.join(extra)})" if extra else ""
        return (f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}: {self.engine} builds MoE {moe} on "
                f"{lay.gpus} GPU{'s' if lay.gpus != 1 else ''}, {attention}{tail}")

    def as_dict(self) -> dict[str, object]:
        return {"engine": self.engine, "model": self.model, "gpus": self.gpus,
                "layout": {"tp": self.layout.tp, "ep": self.layout.ep, "dp": self.layout.dp},
                "replicas": self.replicas, "pipeline": self.pipeline, "nodes": self.nodes,
                "settings": self.settings.as_dict(), "env": dict(self.env),
                "ignored": list(self.ignored), "unknown": list(self.unknown),
                "engine_version": self.engine_version, "notes": list(self.notes),
                "headline": self.headline()}
