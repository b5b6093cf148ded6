"""How a launch is timed on the GPU: replays of a captured CUDA graph (decode batch sizes, no host
launch in the figure) and CUDA events around each launch with the L2 cleared first (as
triton.testing.do_bench), each for one config or for several configs taken in turns.

In turns: the configs' graph replays (or launches) alternate, a pass over all of them at a time,
in a rotated order, so a change of the GPU's clock hits every config alike. On the H200, at batch
4096, one config read ~401 or ~438 us from one re-timing round to the next, and configs timed one
after the other then ranked by which state each one met (benchmarks/RESULTS.md, session 6).
Imports torch only inside the functions: the module is imported where no GPU is.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

Launch = Callable[[], Any]
MAX_REPLAYS = 200
L2_CLEAR_BYTES = 256 << 20  # as do_bench: more than any current GPU's L2


def _graph(launches: Sequence[Launch], graph_launches: int) -> tuple[Any, int]:
    """(graph, launches captured): `launches` repeated to `graph_launches` or more."""
    import torch

    # One launch outside capture compiles (a cache hit) and surfaces a launch error there. One is
    # enough: `launches` are one config on copies of the same tensors (the same specialisation),
    # and the others cost their kernel time again (at batch 256, 2.5 ms of a probe's ~15 ms).
    launches[0]()
    torch.cuda.synchronize()
    passes = max(1, -(-graph_launches // len(launches)))
    # Captured on a side stream as torch.cuda.graph does, but without its synchronize and
    # emptying of the caching allocator first (nothing here allocates while capturing, and the
    # graph's private pool goes with it): 0.3-0.7 ms of a probe's 8-15 ms on the H200
    # (benchmarks/bench_probe_cost.py, session 7: capture 0.8-1.6 ms, without emptying 0.5-0.9).
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.capture_begin()
        try:
            for _ in range(passes):
                for launch in launches:
                    launch()
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, passes * len(launches)


def replay_us(launches: Sequence[Launch], budget_ms: float, min_replays: int,
              graph_launches: int) -> float:
    """Microseconds per launch: the median over replays (at least `min_replays`, about
    `budget_ms` in all) of one captured CUDA graph of `launches` repeated to `graph_launches` or
    more; the first replay, which warms the graph's launch path, is left out."""
    import torch

    graph, count = _graph(launches, graph_launches)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: list[float] = []
    while len(times) < min_replays or (sum(times) < budget_ms and len(times) < MAX_REPLAYS):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    return 1000.0 * statistics.median(times[1:]) / count


def replay_together_us(groups: Sequence[Sequence[Launch]], budget_ms: float, min_replays: int,
                       graph_launches: int) -> list[float]:
    """`replay_us` of each group of launches (one config's), the groups' replays in turns: each
    group replayed at least `min_replays` times and for about `budget_ms` of its own time; the
    first pass warms every graph and is left out."""
    import torch

    graphs = [_graph(launches, graph_launches) for launches in groups]
    times: list[list[float]] = [[] for _ in graphs]
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in graphs]
    rep = 0
    while rep < min_replays or (min(sum(t[1:]) for t in times) < budget_ms and rep < MAX_REPLAYS):
        for j in _rotated(len(graphs), rep):
            start, end = events[j]
            start.record()
            graphs[j][0].replay()
            end.record()
            end.synchronize()
            times[j].append(start.elapsed_time(end))
        rep += 1
    out = [1000.0 * statistics.median(t[1:]) / count for t, (_, count) in zip(times, graphs)]
    del graphs
    return out


def events_together_us(launches: Sequence[Launch], warmup_ms: float, rep_ms: float,
                       min_reps: int = 5) -> list[float]:
    """Microseconds per launch of each of `launches` (one config each), as do_bench times one: L2
    cleared before every launch, CUDA events around it, the median; the launches in turns, each
    repeated as often as do_bench would repeat the typical (median) one in `rep_ms`."""
    import torch

    for launch in launches:  # compile (a cache hit) and surface launch errors untimed
        launch()
    torch.cuda.synchronize()
    clear = torch.empty(L2_CLEAR_BYTES // 4, dtype=torch.int32, device="cuda")
    estimate = []
    for launch in launches:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            launch()
        end.record()
        end.synchronize()
        estimate.append(max(1e-3, start.elapsed_time(end) / 3))
    # One count for all (they take turns): the typical config's do_bench count.
    typical = statistics.median(estimate)
    for _ in range(max(1, int(warmup_ms / typical))):
        for launch in launches:
            launch()
    reps = max(min_reps, int(rep_ms / typical))
    starts = [[torch.cuda.Event(enable_timing=True) for _ in range(reps)] for _ in launches]
    ends = [[torch.cuda.Event(enable_timing=True) for _ in range(reps)] for _ in launches]
    for i in range(reps):
        for j in _rotated(len(launches), i):
            clear.zero_()
            starts[j][i].record()
            launches[j]()
            ends[j][i].record()
    torch.cuda.synchronize()
    return [1000.0 * statistics.median(s.elapsed_time(e) for s, e in zip(starts[j], ends[j]))
            for j in range(len(launches))]


def _rotated(n: int, shift: int) -> list[int]:
    """0..n-1 starting at `shift` (mod n): no config always first after the host's gap."""
    k = shift % max(1, n)
    return list(range(k, n)) + list(range(k))
