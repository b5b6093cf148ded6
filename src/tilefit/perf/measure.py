"""Measured MoE-layer time per layout: one process per GPU, real expert GEMMs at the model's true
per-GPU sizes, and the layout's collective through torch.distributed.

Each rank builds its local experts' weights (random, bf16), routes the same seeded uniform top-k
batch as every other rank, then times with CUDA events: the grouped GEMMs (our Triton kernel) and,
after a barrier, the collective (all_reduce of [B, H]). The busiest rank's GEMM time plus the
collective is the layer time. With fewer local GPUs than a layout needs, the busiest rank's GEMMs
are measured alone and the collective is left out (reported as not measured).
"""

from __future__ import annotations

import os
import socket
import statistics
from dataclasses import dataclass
from typing import Any

from tilefit.errors import MissingDependency, UsageError


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


@dataclass(frozen=True, slots=True)
class MeasuredRow:
    batch: int
    gemm_us: float  # busiest rank, median over reps
    comm_us: float | None  # None when the collective was not run
    ranks: int


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


def _layer_fn(spec: MeasureSpec, rank: int, device: Any) -> Any:
    """A callable (x, topk_ids, topk_weights) -> [B, H] running this rank's share of the layer."""
    import torch

    local = spec.experts // spec.ep
    i_tp = spec.width // spec.tp
    ep_rank = rank // spec.tp  # ranks 0..tp-1 share the first expert group, and so on
    g = torch.Generator(device="cpu").manual_seed(1000 + rank)
    dtype = torch.bfloat16 if spec.backend == "triton" else torch.float32
    w1 = (torch.randn((local, 2 * i_tp, spec.hidden), generator=g) / spec.hidden ** 0.5).to(device, dtype)
    w2 = (torch.randn((local, spec.hidden, i_tp), generator=g) / i_tp ** 0.5).to(device, dtype)
    first = ep_rank * local

    def local_ids(topk_ids: Any) -> Any:
        lid = topk_ids - first
        return torch.where((lid >= 0) & (lid < local), lid, torch.full_like(lid, -1))

    if spec.backend == "torch":
        from tilefit.kernels.triton_moe.ops import reference_moe

        def run(x: Any, ids: Any, w: Any) -> Any:
            lid = local_ids(ids)
            return reference_moe(x, w1, w2, torch.where(lid >= 0, w, torch.zeros_like(w)), lid.clamp(min=0))
        return run

    from tilefit.hw.catalog import arch_for_cc
    from tilefit.kernels.triton_moe import FAMILY
    from tilefit.kernels.triton_moe.ops import fused_moe

    arch = arch_for_cc(*torch.cuda.get_device_capability(device))
    if arch is None:
        raise UsageError(f"no arch entry for compute capability {torch.cuda.get_device_capability(device)}")

    def run(x: Any, ids: Any, w: Any) -> Any:
        b = x.shape[0]
        c1 = FAMILY.default_config(arch, "bf16", M=b, E=spec.experts, N=2 * i_tp, K=spec.hidden, topk=spec.top_k)
        c2 = FAMILY.default_config(arch, "bf16", M=b, E=spec.experts, N=spec.hidden, K=i_tp, topk=spec.top_k)
        if c2.block_m != c1.block_m:
            c2 = type(c2)(c1.block_m, c2.block_n, c2.block_k, c2.group_m, c2.num_warps, c2.num_stages)
        return fused_moe(x, w1, w2, w, local_ids(ids), c1, c2, expert_parallel=spec.ep > 1)
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
        layer = _layer_fn(spec, rank, device)
        dtype = torch.bfloat16 if cuda else torch.float32
        rows = []
        for b in spec.batches:
            ids, w = _routing(b, spec, device, busiest_first=world < spec.tp * spec.ep)
            x = torch.randn((b, spec.hidden), device=device, dtype=dtype)
            out = layer(x, ids, w)
            for _ in range(spec.warmup):
                layer(x, ids, w)
            gemm = statistics.median(_time_us(lambda: layer(x, ids, w), device, spec.reps))
            comm = None
            if world > 1:
                dist.barrier()
                comm = statistics.median(_time_us(lambda: dist.all_reduce(out), device, spec.reps))
            rows.append((b, gemm, comm))
        queue.put((rank, rows, None))
    except Exception as e:  # reported by the parent as data
        queue.put((rank, [], f"{type(e).__name__}: {e}"))
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()


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
    per_batch: dict[int, list[tuple[float, float | None]]] = {}
    for _, rows, _ in results:
        for b, gemm, comm in rows:
            per_batch.setdefault(b, []).append((gemm, comm))
    out = []
    for b in spec.batches:
        vals = per_batch[b]
        comms = [c for _, c in vals if c is not None]
        out.append(MeasuredRow(b, max(g for g, _ in vals), max(comms) if comms else None, world))
    return out
