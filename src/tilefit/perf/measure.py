"""Measured MoE-layer time per layout: one process per GPU, real expert GEMMs at the model's true
per-GPU sizes, and the layout's collectives through torch.distributed.

Each rank builds its local experts' weights (random, bf16, made on the GPU), routes the same seeded
uniform top-k batch as every other rank, then times with CUDA events, median of `reps`, the
repetitions queued while the GPU is held (so the GPU's time is measured, as under CUDA graphs, not
the host's launch latency):
  - gemm: the two grouped GEMM kernels alone (our Triton kernel, the engines' default configs),
    with the expert alignment done beforehand, as an engine's own alignment kernel would; where
    the engine writes zeros to the rows of pairs routed to other ranks' experts (`zero_rows`),
    those rows are zero-filled after each such GEMM in the engines' zero tiles (ops.zero_rows);
  - layer: the whole expert computation as tilefit runs it (alignment in torch, which reads one
    size back to the host, activation and the top-k sum included), for reference;
  - after a barrier, the collectives: all_reduce of the [B, H] output (TP, and EP with replicated
    tokens) and, under EP, dispatch + combine all_to_all_single of the top-k token copies
    (attention DP), each the median of `reps`.
The busiest rank's figures are the layout's. With fewer local GPUs than a layout needs, the busiest
rank's GEMMs are measured alone and no collective is run (reported as not measured).
"""

from __future__ import annotations

import os
import socket
import statistics
from dataclasses import dataclass
from typing import Any

from tilefit.errors import MissingDependency, UsageError


# GPU clock cycles to hold the stream per repetition while the host queues them (~200 us of host
# time per repetition at ~2 GHz: a Triton launch or an NCCL call takes tens of microseconds).
QUEUE_CYCLES_PER_REP = 400_000


@dataclass(frozen=True, slots=True)
class MeasureSpec:
    hidden: int
    width: int  # expert width I (unsharded)
    experts: int
    top_k: int
    tp: int
    ep: int
    batches: tuple[int, ...]
    warmup: int = 5
    reps: int = 20
    seed: int = 0
    backend: str = "triton"  # "triton": our kernel on CUDA; "torch": float32 reference (CPU tests)
    zero_rows: tuple[str, ...] = ()  # GEMMs that zero-fill other ranks' rows, as the engine does


@dataclass(frozen=True, slots=True)
class MeasuredRow:
    batch: int
    gemm_us: float  # the two grouped GEMM kernels, busiest rank, median over reps
    layer_us: float  # tilefit's whole expert computation (alignment, activation, sum included)
    allreduce_us: float | None  # None when no collective was run
    alltoall_us: float | None  # dispatch + combine; None unless EP with collectives
    ranks: int

    def comm_us(self, kind: str) -> float | None:
        """The measured collective of an EP communication scheme ("allreduce" | "alltoall"); TP
        layouts always all-reduce."""
        return self.alltoall_us if kind == "alltoall" and self.alltoall_us is not None else self.allreduce_us


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _routing(batch: int, spec: MeasureSpec, device: Any, *, busiest_first: bool) -> tuple[Any, Any]:
    """Seeded uniform top-k routing, the same on every rank. With `busiest_first` (one rank standing
    in for a whole layout) expert ids are rotated so that rank 0's group is the busiest one."""
    import torch

    g = torch.Generator().manual_seed(spec.seed + batch)
    ids = torch.rand((batch, spec.experts), generator=g).argsort(dim=1)[:, : spec.top_k]
    if busiest_first and spec.ep > 1:
        local = spec.experts // spec.ep
        load = torch.bincount(ids.reshape(-1) // local, minlength=spec.ep)
        ids = (ids - int(load.argmax()) * local) % spec.experts
    weights = torch.rand((batch, spec.top_k), generator=g)
    weights = weights / weights.sum(dim=1, keepdim=True)
    return ids.to(device), weights.to(device)


class _RankLayer:
    """This rank's share of the layer: its local experts' weights and the two ways of timing them."""

    def __init__(self, spec: MeasureSpec, rank: int, device: Any):
        import torch

        self.spec, self.device = spec, device
        self.local = spec.experts // spec.ep
        self.i_tp = spec.width // spec.tp
        self.first = (rank // spec.tp) * self.local  # ranks 0..tp-1 share the first expert group
        self.dtype = torch.bfloat16 if spec.backend == "triton" else torch.float32
        g = torch.Generator(device=device).manual_seed(1000 + rank)
        h = spec.hidden
        self.w1 = (torch.randn((self.local, 2 * self.i_tp, h), generator=g, device=device,
                               dtype=self.dtype) / h ** 0.5)
        self.w2 = (torch.randn((self.local, h, self.i_tp), generator=g, device=device,
                               dtype=self.dtype) / self.i_tp ** 0.5)
        self.arch = None
        self._configs: dict[int, tuple[Any, Any]] = {}
        if spec.backend == "triton":
            from tilefit.hw.catalog import arch_for_cc

            cc = torch.cuda.get_device_capability(device)
            self.arch = arch_for_cc(*cc)
            if self.arch is None:
                raise UsageError(f"no arch entry for compute capability {cc}")

    def local_ids(self, topk_ids: Any) -> Any:
        import torch

        lid = topk_ids - self.first
        return torch.where((lid >= 0) & (lid < self.local), lid, torch.full_like(lid, -1))

    def configs(self, batch: int) -> tuple[Any, Any]:
        """The engines' default configs for this batch (gemm2 takes gemm1's BLOCK_SIZE_M: one
        alignment serves both); looked up once per batch, outside the timed repetitions."""
        if batch not in self._configs:
            self._configs[batch] = self._default_configs(batch)
        return self._configs[batch]

    def _default_configs(self, batch: int) -> tuple[Any, Any]:
        from tilefit.kernels.triton_moe import FAMILY

        s = self.spec
        c1 = FAMILY.default_config(self.arch, "bf16", M=batch, E=s.experts, N=2 * self.i_tp, K=s.hidden, topk=s.top_k)
        c2 = FAMILY.default_config(self.arch, "bf16", M=batch, E=s.experts, N=s.hidden, K=self.i_tp, topk=s.top_k)
        return c1, type(c2)(c1.block_m, c2.block_n, c2.block_k, c2.group_m, c2.num_warps, c2.num_stages)

    def layer(self, x: Any, ids: Any, w: Any) -> Any:
        """[B, H] -> [B, H]: this rank's contribution to the layer output."""
        import torch

        lid = self.local_ids(ids)
        if self.spec.backend == "torch":
            from tilefit.kernels.triton_moe.ops import reference_moe

            return reference_moe(x, self.w1, self.w2, torch.where(lid >= 0, w, torch.zeros_like(w)),
                                 lid.clamp(min=0))
        from tilefit.kernels.triton_moe.ops import fused_moe

        c1, c2 = self.configs(x.shape[0])
        return fused_moe(x, self.w1, self.w2, w, lid, c1, c2, expert_parallel=self.spec.ep > 1)

    def gemms(self, x: Any, ids: Any, w: Any) -> Any:
        """A callable launching only the two grouped GEMMs, everything else prepared once."""
        import torch

        if self.spec.backend == "torch":
            return lambda: self.layer(x, ids, w)
        from tilefit.kernels.triton_moe.align import moe_align
        from tilefit.kernels.triton_moe.ops import grouped_gemm, zero_rows

        b, k = ids.shape
        c1, c2 = self.configs(b)
        align = moe_align(self.local_ids(ids), self.local, c1.block_m)
        h1 = torch.empty((b * k, 2 * self.i_tp), dtype=self.dtype, device=self.device)
        act = torch.randn((b * k, self.i_tp), dtype=self.dtype, device=self.device)
        h2 = torch.empty((b * k, self.spec.hidden), dtype=self.dtype, device=self.device)
        weights = w.reshape(-1).to(torch.float32)
        remote = torch.nonzero(self.local_ids(ids).reshape(-1) < 0).reshape(-1)
        zero1, zero2 = ("gemm1" in self.spec.zero_rows, "gemm2" in self.spec.zero_rows)

        def run() -> None:
            grouped_gemm(x, self.w1, h1, align, c1, a_rows_per_token=k)
            if zero1:
                zero_rows(h1, remote)
            grouped_gemm(act, self.w2, h2, align, c2, a_rows_per_token=1, topk_weights=weights)
            if zero2:
                zero_rows(h2, remote)
        return run


def _time_us(fn: Any, device: Any, reps: int) -> list[float]:
    import time

    import torch

    if device.type != "cuda":
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e6)
        return out
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    # Hold the GPU while the host queues every repetition, so that the events time the GPU's work
    # back to back (as under CUDA graphs) and not the host's launch latency.
    torch.cuda.synchronize(device)
    torch.cuda._sleep(QUEUE_CYCLES_PER_REP * reps)
    for s, e in zip(start, end):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) * 1e3 for s, e in zip(start, end)]


def _rank_main(rank: int, world: int, spec: MeasureSpec, port: int, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    cuda = spec.backend == "triton"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world)
    try:
        share = _RankLayer(spec, rank, device)
        rows = []
        for b in spec.batches:
            ids, w = _routing(b, spec, device, busiest_first=world < spec.tp * spec.ep)
            x = torch.randn((b, spec.hidden), device=device, dtype=share.dtype)
            out = share.layer(x, ids, w)
            gemms = share.gemms(x, ids, w)
            for _ in range(spec.warmup):
                share.layer(x, ids, w)
                gemms()
            layer = statistics.median(_time_us(lambda: share.layer(x, ids, w), device, spec.reps))
            gemm = statistics.median(_time_us(gemms, device, spec.reps))
            allreduce = alltoall = None
            if world > 1:
                allreduce = _collective_us(lambda: dist.all_reduce(out), spec, device)
                if spec.ep > 1:
                    alltoall = _alltoall_us(b, spec, world, device, share.dtype)
            rows.append((b, gemm, layer, allreduce, alltoall))
        queue.put((rank, rows, None))
    except Exception as e:  # reported by the parent as data
        queue.put((rank, [], f"{type(e).__name__}: {e}"))
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _collective_us(fn: Any, spec: MeasureSpec, device: Any) -> float:
    import torch.distributed as dist

    dist.barrier()
    for _ in range(spec.warmup):
        fn()
    dist.barrier()
    return statistics.median(_time_us(fn, device, spec.reps))


def _alltoall_us(batch: int, spec: MeasureSpec, world: int, device: Any, dtype: Any) -> float:
    """Dispatch + combine: each rank holds batch/world tokens and sends each token's top-k copies
    ([batch/world * k, H], an equal share to every rank), then gets them back."""
    import torch
    import torch.distributed as dist

    rows = max(1, -(-batch // world)) * spec.top_k
    rows += -rows % world  # all_to_all_single splits the first dimension evenly
    send = torch.randn((rows, spec.hidden), device=device, dtype=dtype)
    recv = torch.empty_like(send)

    def both() -> None:
        dist.all_to_all_single(recv, send)  # dispatch
        dist.all_to_all_single(send, recv)  # combine
    return _collective_us(both, spec, device)


def _collect(queue: Any, procs: list[Any], timeout_s: float) -> list[tuple[int, list, str | None]]:
    """Every rank's report; a rank that dies without one (segfault, OOM kill) becomes an error row
    and the others are stopped, so a broken rank never hangs the parent."""
    import queue as queue_mod
    import time

    results: dict[int, tuple[int, list, str | None]] = {}
    deadline = time.monotonic() + timeout_s
    while len(results) < len(procs):
        try:
            rank, rows, err = queue.get(timeout=0.5)
            results[rank] = (rank, rows, err)
            continue
        except queue_mod.Empty:
            pass
        dead = [r for r, p in enumerate(procs) if r not in results and p.exitcode not in (None, 0)]
        late = time.monotonic() > deadline
        if dead or late:
            for r, p in enumerate(procs):
                if r not in results:
                    why = f"exited with code {p.exitcode}" if p.exitcode not in (None, 0) else \
                        f"no result within {timeout_s:g} s"
                    results[r] = (r, [], why)
            break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    return [results[r] for r in sorted(results)]


def measure(spec: MeasureSpec, *, ranks: int | None = None, timeout_s: float = 600) -> list[MeasuredRow]:
    """Measure `spec` on `ranks` processes (default: the layout's tp*ep, which must be available)."""
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        raise MissingDependency("measuring needs torch: pip install 'tilefit[gpu]'") from None
    world = ranks or spec.tp * spec.ep
    if spec.backend == "triton":
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < world:
            raise UsageError(f"measuring needs {world} GPUs, {have} found")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, world, spec, port, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = _collect(queue, procs, timeout_s)
    errors = [f"rank {r}: {err}" for r, _, err in results if err]
    if errors:
        raise UsageError("measurement failed: " + "; ".join(errors))
    per_batch: dict[int, list[tuple[float, ...]]] = {}
    for _, rows, _ in results:
        for b, *figures in rows:
            per_batch.setdefault(b, []).append(tuple(figures))
    out = []
    for b in spec.batches:
        vals = per_batch[b]

        def busiest(i: int) -> float | None:
            got = [v[i] for v in vals if v[i] is not None]
            return max(got) if got else None
        out.append(MeasuredRow(b, busiest(0), busiest(1), busiest(2), busiest(3), world))
    return out
