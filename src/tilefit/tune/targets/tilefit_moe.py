"""Our own fused-MoE kernel (tilefit.kernels.triton_moe) as a tuning target: gemm1 and gemm2
tuned separately, prefiltered by the family's SMEM model, timed on the GPU, stored in tilefit's
own format.

Measurement: uniform random top-k routing with a fixed seed (tokens pick `topk` of
`total_experts`; other ranks' experts are dropped as under EP); the alignment is outside the timed
region. Two timings, as the engines run the kernel:
- decode batch sizes (up to `graph_max_batch`, the engine's CUDA-graph batch limit): replays of a
  captured CUDA graph of many launches, so the host's launch latency is not in the figure (as it is
  not in a served decode step). The launches rotate over copies of the weights whose touched bytes
  add up to several times the L2 cache, so each launch reads its weights from DRAM as a decode step
  of a model much larger than L2 does (a graph of one buffer would read a small expert set from L2).
- larger batches: triton.testing.do_bench (CUDA events around each launch, L2 cleared between
  repeats, median), as the engines' tuners time every batch.
A search ranks its configs with `probe`, the same timing on a shorter budget (fewer graph replays,
a shorter do_bench); `run`'s full budget is spent on the few configs re-timed for the pick.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tilefit.dtypes import BITS
from tilefit.tune.targets.base import MOE_SPACE, Routed, TuneShape
from tilefit.tune.targets.draws import half_dtype, routing
from tilefit.tune.targets.gpu_timing import events_together_us, replay_together_us, replay_us
from tilefit.tune.targets import own_compiles
from tilefit.tune.targets.kept import WEIGHTS_SHARE, KeptWeights
from tilefit.tune.targets.reference import compare_rows

SEED = 0
# do_bench budgets per config (ms) for `run`: the budgets every H200 run of issue 17 whose picks
# were checked against an exhaustive sweep re-timed with (benchmarks/bench_tune.py, sessions 4-9).
WARMUP_MS, REP_MS = 5, 25
# Graph replays' budget for `run` (ms): on the H200 a 12 ms budget left every graph-timed pick of
# session 5's runs within 0.6% of the sweep's best (benchmarks/RESULTS.md), and one config's
# rounds spread 0.01-0.1% there on 30 ms; large batches keep do_bench's longer budget.
GRAPH_MS = 12
# A search's ranking timings: the budgets the H200 exhaustive sweeps of issue 17 ran with; they
# only rank, and the search's best few are re-timed on `run`'s budget before anything is picked.
PROBE_WARMUP_MS, PROBE_REP_MS = 1, 5
# ... and a probe's graph replays' budget (ms): at batch 1-32 a probe's graph of 8 launches replays
# in 0.1-1.8 ms, so 6 ms (do_bench's budget) meant 4-45 replays. On the H200 (session 9, three
# runs of GLM-5 EP8/TP8 bf16 at 2 ms) the probes ranked as before (the finalists' probe over
# their re-timed medians spread 0.4-0.6% a search, 0.5-0.7% at 6 ms) and every checked pick stayed
# within 1% of the sweep's best; on one machine, with gpu_timing's single eager launch, a run's
# probes took 2.7-3.8 s less GPU time (benchmarks/RESULTS.md, session 9).
PROBE_GRAPH_MS = 2
MIN_REPLAYS, PROBE_MIN_REPLAYS = 4, 3  # graph replays timed at least (the first is left out)
# The CUDA-graph batch limit when no engine setting is given: batches up to it are graph-timed.
GRAPH_MAX_BATCH = 256
GRAPH_LAUNCHES = 24  # launches captured in one graph (at least; a multiple of the weight copies)
# ... in a probe's graph: a replay's fixed cost is the same for every config, so fewer launches
# rank configs alike, and at batch 32-256 (100-300 us a launch) 24 launches made each of a probe's
# at-least-4 replays 2.4-7 ms, three to five times the probe's budget (6 ms then, session 7).
PROBE_GRAPH_LAUNCHES = 8
L2_MULTIPLE = 4  # the rotated weight copies touch this many times the L2 size per graph pass
# Batch sizes whose routing and activations a GPU worker keeps: the searches side by side
# (tune/schedule.py: two GEMMs x two segments) interleave their timings on one worker, and
# remaking them at each switch cost 0.2-0.5 s of CPU at batch 4096 (session 6's H200 journals:
# a timing after another search's read 0.1-0.7 s at batch 1024-4096, after its own 10-33 ms).
ACTIVATIONS_KEPT = 4
ROTATE_MAX_BYTES = 16 << 30  # memory the weight copies may take at most
GRAPH = "cuda-graph"
KERNEL = "fused_moe_kernel"  # what the compile pool compiles (kernels/triton_moe/kernel.py)
EVENTS = "events"
# Errors after which the CUDA context is unusable: the worker must be replaced.
FATAL_MARKERS = ("illegal memory access", "unspecified launch failure", "misaligned address",
                 "device-side assert", "CUDA error: an illegal instruction", "uncorrectable ECC")


class TilefitMoETarget:
    name = "tilefit"
    jobs = ("gemm1", "gemm2")
    config_space = MOE_SPACE

    def __init__(self, *, gpu: str, seed: int = SEED, device: str = "cuda",
                 warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS, jobs: Any = None,
                 arch: str = "", graph_max_batch: int = GRAPH_MAX_BATCH,
                 probe_warmup_ms: float = PROBE_WARMUP_MS, probe_rep_ms: float = PROBE_REP_MS,
                 graph_ms: float = GRAPH_MS, probe_launches: int = PROBE_GRAPH_LAUNCHES,
                 probe_graph_ms: float = PROBE_GRAPH_MS, scales: str = "column",
                 engines: tuple[str, ...] = (), swap_ab: bool = False):
        from tilefit.kernels.triton_moe.smem import SCALES

        if scales not in SCALES:
            raise ValueError(f"scales must be one of {', '.join(SCALES)}, got {scales!r}")
        # As the engines written for run the kernel (cli/tune_cmd.py decides): fp8-block weight
        # scales per column (vLLM) or row (SGLang); only configs they all run as tuned searched
        # (Engine.runs_as_tuned); narrow fp8 tiles swapped as on sm90 (config.swap_ab_tile).
        self.scales, self.engines, self.swap_ab = scales, tuple(engines), bool(swap_ab)
        self.gpu = gpu
        self.arch_name = arch  # set for a GPU not in the catalog: its arch read from the device
        if jobs is not None:  # e.g. ("gemm1",) to tune one GEMM only
            self.jobs = tuple(jobs)
        self.seed = seed
        self.warmup_ms, self.rep_ms = warmup_ms, rep_ms
        self.graph_ms = graph_ms
        self.probe_warmup_ms, self.probe_rep_ms = probe_warmup_ms, probe_rep_ms
        self.probe_launches = probe_launches
        self.probe_graph_ms = probe_graph_ms
        self.graph_max_batch = graph_max_batch
        self.device = device  # "cpu" only for `check` under TRITON_INTERPRET=1 (tests)
        self._inputs: dict[Any, Any] = {}
        self._kept: KeptWeights | None = None  # made at first use (the device's memory)
        self._activations: dict[Any, Any] = {}  # (shape, batch) -> routing and A, oldest first
        self._aligns: dict[Any, Any] = {}
        self._watching: bool | None = False  # own_compiles.watch asked (None: not available)

    # -- protocol, no GPU needed ----------------------------------------------------------------
    @property
    def journal_name(self) -> str:
        """The target's name in journal lines: the per-row scale form and the swapped tiles are
        other kernels, whose compiles and timings must not answer for the plain ones' (nor the
        other way)."""
        return (self.name + ("+row-scale" if self.scales == "row" else "")
                + ("+swap-ab" if self.swap_ab else ""))

    @property
    def arch(self) -> Any:
        from tilefit.hw.catalog import get_arch, get_gpu

        return get_arch(self.arch_name) if self.arch_name else get_gpu(self.gpu).arch

    @property
    def family(self) -> Any:
        from tilefit.kernels.registry import get_family

        return get_family("triton-moe")

    def space(self, shape: TuneShape) -> list[Any]:
        configs = list(self.family.configs(self.arch, shape.dtype))
        if not self.engines:
            return configs
        from tilefit.engines import get_engine

        engines = [get_engine(e) for e in self.engines]
        return [c for c in configs
                if all(e.runs_as_tuned(c.as_dict(), shape.dtype) is None for e in engines)]

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        from tilefit.kernels.triton_moe.config import MoEConfig

        return MoEConfig.from_dict(data)

    def default_config(self, shape: TuneShape, batch: int) -> Any:
        n, k = shape.nk
        return self.family.default_config(self.arch, shape.dtype, M=batch, E=shape.total_experts,
                                          N=n, K=k, topk=shape.topk)

    def smem_bytes(self, config: Any, shape: TuneShape) -> int:
        return self.family.footprint(config, self.arch, shape.dtype, scales=self.scales,
                                     swap_ab=self.swap_ab).total

    def fit_reason(self, config: Any, shape: TuneShape) -> Any:
        from tilefit.tune.results import DoesNotFit

        v = self.family.verdict(config, self.arch, shape.dtype, scales=self.scales,
                                swap_ab=self.swap_ab)
        if v.fits:
            return None
        need = v.footprint.total if v.footprint is not None else 0
        return DoesNotFit("shared memory" if v.footprint is not None else v.reason, need, v.limit)

    def timing(self, shape: TuneShape, batch: int) -> str:
        return GRAPH if batch <= self.graph_max_batch else EVENTS

    def routed(self, shape: TuneShape, batch: int) -> Routed:
        ids = routing(shape, batch, self.seed)[0]
        local = ids[ids >= 0]
        return Routed(int(local.numel()), int(local.unique().numel()))

    def is_fatal(self, error: BaseException) -> bool:
        text = str(error)
        return any(m in text for m in FATAL_MARKERS)

    def versions(self) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        out = {}
        for pkg in ("tilefit", "triton", "torch"):
            try:
                out[pkg] = version(pkg)
            except PackageNotFoundError:
                pass
        return out

    def write(self, out_dir: Path, shape: TuneShape, device_name: str,
              winners: dict[str, dict[int, Any]]) -> list[Path]:
        from tilefit.tune.store import write_tilefit_store

        return [write_tilefit_store(out_dir, self.name, shape, device_name, winners, self.versions())]

    # -- compile (CPU worker) -------------------------------------------------------------------
    def compile_key(self, config: Any) -> Any:
        """GROUP_SIZE_M is a runtime argument of the kernel (kernel.py), so a tile's four
        GROUP_SIZE_M values are one compiled kernel: GROUP_SIZE_M 1 compiles for all of them."""
        return replace(config, group_m=1)

    def compile(self, config: Any, shape: TuneShape) -> None:
        """Compile for the GPU's arch with the compiler oracle (no GPU needed); a compiler crash
        or hang happens here, in a throw-away process, not in the GPU worker."""
        from tilefit.kernels.triton_moe.spec import compile_config

        n, k = shape.nk
        # full=True compiles to a cubin (a ptxas crash shows here); use_cache=False goes through
        # triton.compile, which fills Triton's own cache (the one the GPU worker's first launch
        # reads when the specialisation matches) and answers from it when the kernel is there.
        compile_config(config, self.arch.cc_int, shape.dtype, gemm=shape.gemm,
                       shape={"N": n, "K": k, "E": shape.experts, "topk": shape.topk},
                       use_cache=False, full=True, row_scale=self.scales == "row",
                       swap_ab=self._swapped(config, shape))

    def warm(self, shape: TuneShape, gpu: bool) -> None:
        """Ahead of the first request (pools.WorkerPool.warm): what a process's first compile
        pays before compiling made now (Triton's hash of its own sources), and on a GPU worker
        torch and the CUDA context. A compile worker never imports torch (the oracle specialises
        scalars itself, oracles/triton_compile.py). No weights yet: the main process may be
        timing the GPU's ceilings meanwhile."""
        from triton.runtime import cache

        from tilefit.kernels.triton_moe import kernel  # noqa: F401 - the @triton.jit function

        key = getattr(cache, "triton_key", None)  # Triton 3.x; cached after the first call
        if key is not None:
            key()
        if gpu and self.device == "cuda":
            import torch

            torch.cuda.init()
            torch.empty(1, device=self.device)  # the context and the caching allocator

    # -- run and check (GPU worker) -------------------------------------------------------------
    # Weights are made once per GEMM shape, on the device (hundreds of millions of elements; the
    # two shapes used last are kept, kept.py);
    # routing and activations once per batch size. Seeds fix both, so reruns see the same data.
    @property
    def kept(self) -> KeptWeights:
        """The weights kept per shape (kept.py: the two used last, within a share of memory)."""
        if self._kept is None:
            import torch

            total = (torch.cuda.get_device_properties(torch.device(self.device)).total_memory
                     if self.device == "cuda" else 0)
            self._kept = KeptWeights(int(WEIGHTS_SHARE * total))
        return self._kept

    def _weights(self, shape: TuneShape) -> dict[str, Any]:
        w = self.kept.get(shape, "weights")
        if w is None:
            import torch

            from tilefit.kernels.triton_moe import ops

            n, k = shape.nk
            self.kept.make_room(shape, shape.experts * n * k * BITS[shape.dtype] // 8)
            g = torch.Generator(device=self.device).manual_seed(self.seed)
            b = (torch.randn(shape.experts, n, k, generator=g, device=self.device) / 4).to(half_dtype(shape))
            w = {"b": b, "b_scale": None}
            if shape.dtype == "fp8-block":
                w["b"], w["b_scale"] = ops.quantize_fp8_blocks(b)
            self.kept.put(shape, "weights", w)
        return w

    def _problem(self, shape: TuneShape, batch: int) -> dict[str, Any]:
        """The current weights, `batch`'s activations and an output buffer (one problem at a
        time: the output and the weights are the large parts)."""
        key = ("batch", shape, batch)
        if key in self._inputs:
            return self._inputs[key]
        import torch

        for old in [k for k in self._inputs if k[0] == "batch"]:
            del self._inputs[old]
        p = {**self._batch_inputs(shape, batch), **self._weights(shape)}
        p["c"] = torch.empty(batch * shape.topk, shape.nk[0], dtype=half_dtype(shape), device=self.device)
        self._inputs[key] = p
        return p

    def _batch_inputs(self, shape: TuneShape, batch: int) -> dict[str, Any]:
        """Routing and activations of one batch size, kept for the last ACTIVATIONS_KEPT."""
        key = (shape, batch)
        kept = self._activations.pop(key, None)
        if kept is None:
            import torch

            from tilefit.kernels.triton_moe import ops

            ids, weights = routing(shape, batch, self.seed)
            k = shape.nk[1]
            g = torch.Generator(device="cpu").manual_seed(self.seed + 1)
            a_rows = batch if shape.gemm == "gemm1" else batch * shape.topk
            a = (torch.randn(a_rows, k, generator=g) / k ** 0.5).to(half_dtype(shape)).to(self.device)
            kept = {"ids": ids.to(self.device), "ids_cpu": ids, "w_cpu": weights,
                    "topk_weights": weights.reshape(-1).float().to(self.device),
                    "a": a, "a_scale": None}
            if shape.dtype == "fp8-block":
                kept["a"], kept["a_scale"] = ops.quantize_fp8_groups(a)
            while len(self._activations) >= ACTIVATIONS_KEPT:
                del self._activations[next(iter(self._activations))]
            self._aligns = {ak: al for ak, al in self._aligns.items() if ak[:2] in self._activations}
        self._activations[key] = kept  # the newest last
        return kept

    def rotated_weights(self, shape: TuneShape) -> list[tuple[Any, Any]]:
        """(weights, scales) copies for graph timing, sized at batch 1 (the fewest bytes touched):
        enough copies that one pass over them touches L2_MULTIPLE x the L2 size, within
        ROTATE_MAX_BYTES. Copy 0 is the problem's own tensor."""
        rotated = self.kept.get(shape, "rotated")
        if rotated is None:
            import torch

            from tilefit.tune.perfmodel import active_experts

            w = self._weights(shape)
            b, scale = w["b"], w["b_scale"]
            whole = b.numel() * b.element_size()
            touched = max(1.0, active_experts(shape, 1)) * whole / shape.experts
            l2 = int(getattr(torch.cuda.get_device_properties(b.device), "L2_cache_size", 0))
            want = max(1, -(-int(L2_MULTIPLE * l2) // int(touched))) if l2 else 1
            copies = max(1, min(want, ROTATE_MAX_BYTES // max(1, whole)))
            self.kept.make_room(shape, (copies - 1) * whole)
            rotated = self.kept.put(shape, "rotated", [(b, scale)] + [
                (b.clone(), None if scale is None else scale.clone()) for _ in range(copies - 1)])
        return rotated

    def stats(self) -> dict[str, int]:
        """For WorkerPool.stats: `own_compiles` (own_compiles.py), where they are counted."""
        return {"own_compiles": own_compiles.count(KERNEL)} if self._watching else {}

    def _launch(self, config: Any, shape: TuneShape, batch: int, weights: Any = None) -> Any:
        from tilefit.kernels.triton_moe import ops
        from tilefit.kernels.triton_moe.align import moe_align

        if self._watching is False:
            self._watching = own_compiles.watch(KERNEL) or None  # None: Triton cannot tell
        p = self._problem(shape, batch)
        b, b_scale = weights if weights is not None else (p["b"], p["b_scale"])
        akey = (shape, batch, config.block_m)
        if akey not in self._aligns:
            self._aligns[akey] = moe_align(p["ids"], shape.experts, config.block_m)
        align = self._aligns[akey]
        gemm1 = shape.gemm == "gemm1"

        def launch() -> Any:
            return ops.grouped_gemm(p["a"], b, p["c"], align, config,
                                    a_rows_per_token=shape.topk if gemm1 else 1,
                                    topk_weights=None if gemm1 else p["topk_weights"],
                                    a_scale=p["a_scale"], b_scale=b_scale,
                                    row_scale=self.scales == "row", swap_ab=swapped)
        swapped = self._swapped(config, shape)
        return launch

    def _swapped(self, config: Any, shape: TuneShape) -> bool:
        from tilefit.kernels.triton_moe.smem import swapped

        return swapped(config, shape.dtype, self.swap_ab)

    def run(self, config: Any, shape: TuneShape, batch: int) -> float:
        return self._time(config, shape, batch, self.warmup_ms, self.rep_ms, MIN_REPLAYS,
                          self.graph_ms, GRAPH_LAUNCHES)

    def run_many(self, configs: list[Any], shape: TuneShape, batch: int) -> list[float]:
        """`run` of each config, the configs timed in turns (gpu_timing.py says why)."""
        if self.timing(shape, batch) == GRAPH:
            copies = self.rotated_weights(shape)
            groups = [[self._launch(c, shape, batch, w) for w in copies] for c in configs]
            return replay_together_us(groups, self.graph_ms, MIN_REPLAYS, GRAPH_LAUNCHES)
        return events_together_us([self._launch(c, shape, batch) for c in configs],
                                  self.warmup_ms, self.rep_ms)

    def probe(self, config: Any, shape: TuneShape, batch: int) -> float:
        """`run` on the search's shorter budget (the module docstring says why)."""
        return self._time(config, shape, batch, self.probe_warmup_ms, self.probe_rep_ms,
                          PROBE_MIN_REPLAYS, self.probe_graph_ms,
                          self.probe_launches)

    def _time(self, config: Any, shape: TuneShape, batch: int, warmup_ms: float, rep_ms: float,
              min_replays: int, graph_ms: float, graph_launches: int) -> float:
        import torch
        from triton.testing import do_bench

        if self.timing(shape, batch) == GRAPH:
            # Graph replays rotating over the weight copies: microseconds per launch.
            launches = [self._launch(config, shape, batch, w) for w in self.rotated_weights(shape)]
            return replay_us(launches, graph_ms, min_replays, graph_launches)
        launch = self._launch(config, shape, batch)
        launch()  # compile (a cache hit after the CPU pool) and surface launch errors untimed
        torch.cuda.synchronize()
        return 1000.0 * float(do_bench(launch, warmup=warmup_ms, rep=rep_ms, return_mode="median"))

    def check(self, config: Any, shape: TuneShape, batch: int) -> str | None:
        """The kernel's output for `batch`'s routing against a float32 reference (reference.py)."""
        p = self._problem(shape, batch)
        p["c"].zero_()
        self._launch(config, shape, batch)()
        return compare_rows(p, shape)
