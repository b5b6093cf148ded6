"""The largest batch an engine runs the MoE kernel inside a captured CUDA graph: `tilefit tune`
times batch sizes up to it as graph replays (no host launch in the figure) and larger ones with
CUDA events, as the engine will run them.

Where the limit comes from, first match wins:
- `--graph-max-batch B` on tune's command line;
- the launch command after `--`: CUDA graphs off (sglang --disable-cuda-graph, vLLM
  --enforce-eager or cudagraph_mode NONE) -> 0; explicit capture sizes -> the largest the engine
  keeps (vLLM drops sizes over max_num_batched_tokens: config/vllm.py, 0.11.1-0.33.0; sglang takes
  the largest of --cuda-graph-bs as the decode max_bs: arg_groups/memory_hook.py, 0.5.23); else
  the engine's default for the command's settings on this GPU;
- the engines of `--emit`, each at its defaults for tilefit's --tp/--ep on this GPU: the largest;
- else `DEFAULT` (no engine named).

Engine defaults are the memory plan's (`memory.plan.rules_for(engine).defaults`): vLLM
min(2 x max_num_seqs, 512 (1024 on cc 10.x from 0.28.0), max_num_batched_tokens); sglang by GPU
memory and --tp (e.g. 512 on 90-160 GiB GPUs at tp >= 4). Each module names the wheels read.

sglang also runs prefill batches inside CUDA graphs, the MoE layers included (piecewise graphs in
0.5.10-0.5.14, breakable ones from 0.5.15), up to chunked_prefill_size tokens or less
(engines/sglang_prefill.py has the rules and the wheels they were read from): its limit is the
larger of the decode and the prefill graphs' maxima. vLLM's one limit covers both: in its default
mode (FULL_AND_PIECEWISE) prefill and mixed batches of up to max_cudagraph_capture_size tokens run
in piecewise graphs (config/compilation.py CUDAGraphMode, 0.33.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports DEFAULT at start-up: the rest loads when a limit is computed
    from tilefit.hw.catalog import GPU
    from tilefit.memory.base import Parallel, Settings
    from tilefit.models.architecture import Architecture

DEFAULT = 256  # no engine named: issue 17's default (sglang's on 60-160 GiB GPUs below tp 4)


@dataclass(frozen=True, slots=True)
class GraphLimit:
    """Batches up to `batch` are timed as CUDA-graph replays; `source` says why this number."""

    batch: int
    source: str

    def line(self) -> str:
        if self.batch == 0:
            return f"no batch timed as a CUDA-graph replay: {self.source}"
        return f"batches up to {self.batch} timed as CUDA-graph replays: {self.source}"

    def as_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "source": self.source}


def explicit(batch: int) -> GraphLimit:
    return GraphLimit(batch, f"--graph-max-batch {batch}")


def default() -> GraphLimit:
    return GraphLimit(DEFAULT, f"tilefit's default {DEFAULT} (no engine named: give --emit or the "
                               f"launch command after `--` to follow the engine's)")


def from_launch(spec: Any, arch: Architecture, gpu: GPU, version: str | None) -> GraphLimit:
    """The limit a parsed launch command (`tilefit.launch.LaunchSpec`) gives on `gpu`."""
    from tilefit.memory.base import from_launch as memory_inputs

    parallel, settings = memory_inputs(spec)
    decode = _decode_from_launch(spec, arch, gpu, parallel, settings, version)
    return _with_prefill(spec.engine, decode, arch, gpu, parallel, settings, version, spec.flags(),
                         spec.pipeline, spec.settings.disable_cuda_graph)


def _decode_from_launch(spec: Any, arch: Architecture, gpu: GPU, parallel: Parallel,
                        settings: Settings, version: str | None) -> GraphLimit:
    ls = spec.settings
    if ls.disable_cuda_graph:
        return GraphLimit(0, f"the {spec.engine} launch command turns CUDA graphs off")
    if ls.cuda_graph_batch_sizes:
        sizes = list(ls.cuda_graph_batch_sizes)
        if spec.engine == "vllm":  # sizes over max_num_batched_tokens are dropped
            tokens = engine_settings("vllm", arch, gpu, parallel, settings, version).chunked_prefill
            sizes = [s for s in sizes if tokens is None or s <= tokens]
        if sizes:
            return GraphLimit(max(sizes), f"the largest CUDA-graph batch size of the {spec.engine} "
                                          f"launch command")
        return GraphLimit(0, f"the {spec.engine} launch command's CUDA-graph batch sizes are all "
                             f"over its max_num_batched_tokens: none is captured")
    return _engine_default(spec.engine, arch, gpu, parallel, settings, version, "launch command")


def from_engines(engines: tuple[str, ...], arch: Architecture, gpu: GPU, gpus: int, ep: int,
                 version: str | None) -> GraphLimit:
    """The largest of `engines`' defaults for `gpus` GPUs with experts split `ep` ways (tilefit's
    layout, read as each engine's flags); the others' smaller limits are named."""
    from tilefit.memory.base import Parallel, Settings

    limits = []
    for e in engines:
        parallel = Parallel.for_engine(e, gpus, ep)
        decode = _engine_default(e, arch, gpu, parallel, Settings(), version, "defaults")
        limits.append(_with_prefill(e, decode, arch, gpu, parallel, Settings(), version, {}, 1, False))
    top = max(limits, key=lambda g: g.batch)
    others = [g for g in limits if g.batch < top.batch]
    if not others:
        return GraphLimit(top.batch, "; ".join(g.source for g in limits))
    rest = "; ".join(f"{g.source}, so its batches {g.batch + 1}-{top.batch} run without graphs"
                     for g in others)
    return GraphLimit(top.batch, f"{top.source}; {rest}")


def engine_settings(engine: str, arch: Architecture, gpu: GPU, parallel: Parallel, settings: Settings,
                    version: str | None) -> Settings:
    """`settings` with `engine`'s defaults filled in, as the memory plan fills them."""
    from tilefit.memory.base import MemoryRequest
    from tilefit.memory.plan import rules_for

    return rules_for(engine).defaults(MemoryRequest(arch, gpu, engine, parallel, settings, version))


def _engine_default(engine: str, arch: Architecture, gpu: GPU, parallel: Parallel, settings: Settings,
                    version: str | None, what: str) -> GraphLimit:
    from tilefit.memory.plan import rules_for

    filled = engine_settings(engine, arch, gpu, parallel, settings, version)
    batch = filled.cuda_graph_max_bs or 0
    release = version or f"as read in {rules_for(engine).versions.split(',')[-1].strip()}"
    given = " (as the launch command sets it)" if settings.cuda_graph_max_bs else ""
    return GraphLimit(batch, f"{engine} {release} captures up to {batch}{given} with the {what} on "
                             f"{gpu.name} at {_flags(engine, parallel)}")


def _with_prefill(engine: str, decode: GraphLimit, arch: Architecture, gpu: GPU, parallel: Parallel,
                  settings: Settings, version: str | None, flags: dict[str, str], pp: int,
                  no_graphs: bool) -> GraphLimit:
    """`decode`, or for sglang (prefill graphs of their own; vLLM's one limit covers both) the
    larger of it and the prefill graphs' maximum for this model, GPU and launch flags ({}: the
    defaults), both named."""
    if engine != "sglang":
        return decode
    from tilefit.engines.sglang_prefill import Model, prefill_graphs

    att = arch.attention
    chunk = engine_settings(engine, arch, gpu, parallel, settings, version).chunked_prefill
    prefill = prefill_graphs(version, Model(att.is_mla, att.is_mla and att.has_indexer,
                                            arch.linear_attention),
                             flags, pp=pp, chunked_prefill=chunk, disable_cuda_graph=no_graphs)
    if prefill.max_tokens > decode.batch:
        return GraphLimit(prefill.max_tokens, f"{prefill.why}; decode: {decode.source}")
    return GraphLimit(decode.batch, f"{decode.source}; prefill: {prefill.why}")


def _flags(engine: str, parallel: Parallel) -> str:
    if engine == "vllm":
        return f"-tp {parallel.tp}" + (f" -dp {parallel.dp}" if parallel.dp > 1 else "") + (
            " --enable-expert-parallel" if parallel.expert_parallel else "")
    return f"--tp {parallel.tp}" + (f" --ep {parallel.ep}" if parallel.ep > 1 else "") + (
        f" --dp {parallel.dp}" if parallel.dp > 1 else "")
