"""tune/pools.py: a finalist's re-timing or output check ("run", "check") gets the next free worker
before the searches' probes waiting for it; requests of one kind keep their arrival order."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tilefit.kernels.triton_moe.config import MoEConfig
from tilefit.tune.pools import URGENT, Trace, WorkerPool, _Turns
from tilefit.tune.targets.base import TargetSpec, TuneShape

SHAPE = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
CONFIG = MoEConfig(16, 64, 128, 1, 4, 4)


def test_turns_serve_urgent_waiters_first_then_arrival_order():
    turns = _Turns(["gpu"])
    worker = turns.take(False)  # busy: everyone below waits
    order: list[str] = []
    threads = []
    for name, urgent in (("probe-1", False), ("probe-2", False), ("run-1", True),
                         ("probe-3", False), ("check-1", True)):
        def wait(name=name, urgent=urgent):
            w = turns.take(urgent)
            order.append(name)
            turns.give(w)
        t = threading.Thread(target=wait)
        t.start()
        threads.append(t)
        time.sleep(0.05)  # arrive in this order
    turns.give(worker)
    for t in threads:
        t.join(5)
    assert order == ["run-1", "check-1", "probe-1", "probe-2", "probe-3"]


def test_a_retiming_overtakes_the_queued_probes_on_one_gpu_worker():
    assert URGENT == {"run", "run_many", "check"}
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", run_sleep_s=0.2)
    done: list[str] = []
    with WorkerPool(spec, [None], timeout=30) as pool:
        pool.call("probe", CONFIG, SHAPE, 1)  # the worker is up before the race starts
        threads = []
        for name, op in (("probe-a", "probe"), ("probe-b", "probe"), ("probe-c", "probe"),
                         ("retime", "run")):
            t = threading.Thread(target=lambda n=name, o=op: (pool.call(o, CONFIG, SHAPE, 1),
                                                              done.append(n)))
            t.start()
            threads.append(t)
            time.sleep(0.05)  # probe-a runs; b, c and the re-timing wait
        for t in threads:
            t.join(30)
    assert done[0] == "probe-a" and done[1] == "retime", done
    assert done[2:] == ["probe-b", "probe-c"]


def test_a_waiter_interrupted_in_its_turn_leaves_no_ticket_behind():
    """Ctrl-C reaches the main thread, which waits for a worker when it runs the searches in
    turns (or a layer's only search): its ticket must leave the queue, or every later request
    (the prefetch threads close() joins, the workers' stop) waits behind it for good."""
    turns = _Turns(["gpu"])
    worker = turns.take(False)  # busy
    wait = turns._cv.wait

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    turns._cv.wait = interrupted
    try:
        turns.take(True)
    except KeyboardInterrupt:
        pass
    turns._cv.wait = wait
    turns.give(worker)
    got: list[str] = []
    later = threading.Thread(target=lambda: got.append(turns.take(False)))
    later.start()
    later.join(2)
    assert got == ["gpu"], "a later request waited behind the interrupted one's ticket"
    if later.is_alive():  # unblock it for the test run's exit
        turns._waiting.clear()
        turns.give("gpu")


def test_warm_starts_every_worker_before_its_first_request(tmp_path):
    """WorkerPool.warm: each worker process starts at once and runs the target's warm(shape, gpu)
    (a timing worker with gpu=True), with no request sent."""
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", warm_dir=str(tmp_path))
    with WorkerPool(spec, [None, None], timeout=30) as cpu, WorkerPool(spec, [0], timeout=30) as gpu:
        cpu.warm(SHAPE)
        gpu.warm(SHAPE)
        deadline = time.monotonic() + 60
        while len(list(tmp_path.iterdir())) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        marks = sorted(p.name.split("-", 1)[1] for p in tmp_path.iterdir())
        assert marks == ["cpu-gemm1", "cpu-gemm1", "gpu-gemm1"]
        pids = {int(p.name.split("-")[0]) for p in tmp_path.iterdir()}
        assert pids == {w._proc.pid for w in cpu.workers + gpu.workers}
        assert cpu.call("probe", CONFIG, SHAPE, 1) is not None  # a warmed worker serves as before


def test_a_pool_closed_while_warming_waits_for_the_warm_up_and_stops_its_workers():
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget")
    pool = WorkerPool(spec, [None, None], timeout=30)
    pool.warm(SHAPE)
    pool.close()  # at once: the warm-ups are in flight
    assert all(w._proc is None for w in pool.workers)
    assert not any(t.is_alive() for t in pool._warming)


def test_close_asks_every_worker_to_stop_before_waiting_for_any():
    """A compile worker takes about half a second to exit after compiling: asked one after the
    other, 16 of them held the end of a run for seconds."""
    calls: list[tuple[str, int]] = []

    class Stub:
        def __init__(self, i):
            self.i = i

        def ask_stop(self):
            calls.append(("ask", self.i))

        def stop(self, asked=False):
            assert asked
            calls.append(("wait", self.i))

    pool = WorkerPool(TargetSpec.of("tilefit.tune.targets.fake:FakeTarget"), [None] * 3, timeout=5)
    pool.workers = [Stub(i) for i in range(3)]
    pool.close()
    assert calls == [("ask", 0), ("ask", 1), ("ask", 2), ("wait", 0), ("wait", 1), ("wait", 2)]


def test_a_closed_pool_leaves_no_process_behind(tmp_path):
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget")
    with WorkerPool(spec, [None, None, None], timeout=30) as pool:
        for _ in range(3):
            pool.call("probe", CONFIG, SHAPE, 1)
        procs = [w._proc for w in pool.workers if w._proc is not None]
    assert procs and all(not p.is_alive() for p in procs)


def test_a_refused_journal_starts_no_worker(tmp_path):
    """The workers start once the journal is open: a run refused for its journal (one there
    already, no --resume) ends at once, with no process started and none waited for."""
    from tilefit.errors import UsageError
    from tilefit.tune.run import JOURNAL, TuneRequest, tune

    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / JOURNAL).write_text("{}\n")
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", warm_dir=str(marks))
    with pytest.raises(UsageError, match="--resume"):
        tune(TuneRequest(spec, (SHAPE,), (1,), tmp_path, "h200", "NVIDIA H200", compile_workers=2))
    assert list(marks.iterdir()) == []


def test_a_warm_up_that_raises_prints_no_traceback_and_the_request_meets_it(monkeypatch):
    """A worker that cannot start (here: its spawn raises) fails the warm-up quietly, in its
    thread; the first request meets the same error in its caller."""
    hooked: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)
    pool = WorkerPool(TargetSpec.of("tilefit.tune.targets.fake:FakeTarget"), [None], timeout=5)

    def broken(*args):
        raise RuntimeError("no spawn")

    monkeypatch.setattr(pool.workers[0], "call", broken)
    pool.warm(SHAPE)
    for thread in pool._warming:
        thread.join()
    assert hooked == []
    with pytest.raises(RuntimeError, match="no spawn"):
        pool.call("probe", CONFIG, SHAPE, 1)
    pool.close()


def test_a_trace_closed_under_a_late_request_drops_its_line(tmp_path):
    trace = Trace(tmp_path / "t.jsonl")
    trace.record("gpu", "probe", SHAPE, 1, 0.0, 0.0, 0.0)
    trace.close()
    trace.record("gpu", "warm", SHAPE, None, 0.0, 0.0, 0.0)  # a warm-up that outlived close
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 1
