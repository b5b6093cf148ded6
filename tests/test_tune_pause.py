"""A quiet block pauses the local compile workers (pools.WorkerPool.pause, evaluator.quiet):
it starts at once while a long compile is in flight, the worker and the child process its compile
runs (Triton's ptxas) are stopped inside it, and the compile ends with its own result after it.
A worker that hangs, dies or is (re)started around a pause does not hang the pool, and a pool
that cannot pause (Ray's) is waited on as before."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from tilefit.tune.evaluator import Evaluator
from tilefit.tune.journal import Journal
from tilefit.tune.results import Crashed, Ok, Timeout
from tilefit.tune.targets.base import MOE_SPACE, TargetSpec
from tilefit.tune.targets.fake import FakeTarget
from tilefit.tune.pools import RequestPool, WorkerPool
from tune_faults_spec import GOOD, HANG, SHAPE, faulty_spec

linux = pytest.mark.skipif(not sys.platform.startswith("linux"),
                           reason="reads process states from /proc (Linux)")


def _spec(**kw) -> TargetSpec:
    return TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", grid="distinct", **kw)


def _state(pid: int) -> str | None:
    """The process's state letter ('T': stopped), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def _child_of(pid: int, wait_s: float = 20.0) -> int:
    """The pid of a process whose parent is `pid` (the compile's `sleep`), once there is one."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                            return int(entry)
                except (FileNotFoundError, ProcessLookupError):
                    pass
        time.sleep(0.02)
    raise AssertionError(f"process {pid} started no child within {wait_s} s")


def _stopped(pid: int, wait_s: float = 1.0) -> bool:
    """Whether `pid` is stopped within `wait_s` (a signal is acted on when the process next runs:
    the pause waits for its worker, not for the worker's children)."""
    deadline = time.monotonic() + wait_s
    while _state(pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    return _state(pid) == "T"


def _gone(pid: int, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while _state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.02)
    return _state(pid) in (None, "Z")


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(reply=fn(), at=time.monotonic()))
    t.start()
    return t, out


class _Bench:
    size, restarts = 1, 0

    def call(self, op, config, shape, batch):
        return Ok(10.0)


def _evaluator(journal, pool) -> Evaluator:
    return Evaluator("fake", FakeTarget(grid="distinct"), journal, pool, _Bench(), [],
                     lambda e, d: None)


def _journal(tmp_path) -> Journal:
    return Journal(tmp_path / "j.jsonl", resume=False, context={}, from_dict=MOE_SPACE.from_dict)


@linux
def test_quiet_starts_at_once_and_stops_the_compile_and_its_child(tmp_path):
    spec = _spec(compile_child_s=2.0)
    with _journal(tmp_path) as j, WorkerPool(spec, [None], timeout=20) as pool:
        assert pool.call("check", GOOD, SHAPE, 1) is None  # the process is up; no compile yet
        worker = pool.workers[0]._proc.pid
        ev = _evaluator(j, pool)
        compiling, out = _in_thread(lambda: ev.compiled(SHAPE, GOOD))
        child = _child_of(worker)  # the compile's `sleep 2.0` runs: ~2 s of compile left
        asked = time.monotonic()
        with ev.quiet():
            entered = time.monotonic()
            # A worker caught in vfork (its child not yet exec'd) acts on the stop once the exec
            # is done: the pause gives it 0.5 s, a loaded machine can take longer (state D).
            inside = (_stopped(worker, 5.0), _stopped(child))
            time.sleep(0.3)
            held = (_state(worker), _state(child), compiling.is_alive())
        compiling.join(20)
        ev.close()
    assert entered - asked < 1.0, "the quiet block waited for the compile in flight"
    assert inside == (True, True) and held == ("T", "T", True)
    assert out["reply"] == Ok(0.0)
    assert j.lookup("fake", SHAPE.key(), None, GOOD) == Ok(0.0)


def test_time_paused_does_not_count_against_the_timeout():
    """A 0.6 s compile paused for 1.2 s under a 1 s timeout still ends well; a hung one paused
    for a while is still killed as a Timeout, and the next request gets a fresh worker."""
    with WorkerPool(faulty_spec(compile_sleep_s=0.6), [None], timeout=1.0) as pool:
        assert pool.call("check", GOOD, SHAPE, 1) is None
        compiling, out = _in_thread(lambda: pool.call("compile", GOOD, SHAPE, None))
        time.sleep(0.2)
        with pool.pause() as paused:
            time.sleep(1.2)
        compiling.join(20)
        assert paused and out["reply"] is None

        started = time.monotonic()
        hung, out = _in_thread(lambda: pool.call("compile", HANG, SHAPE, None))
        time.sleep(0.2)
        with pool.pause():
            time.sleep(0.5)
        hung.join(20)
        assert out["reply"] == Timeout(1.0, "compile")
        assert out["at"] - started >= 1.4  # 1 s of running time, plus the pause
        assert pool.call("compile", GOOD, SHAPE, None) is None
        assert pool.restarts == 1


@linux
def test_a_worker_killed_while_stopped_is_a_crash_and_its_child_goes_too():
    with WorkerPool(_spec(compile_child_s=30.0), [None], timeout=60) as pool:
        assert pool.call("check", GOOD, SHAPE, 1) is None
        worker = pool.workers[0]._proc.pid
        compiling, out = _in_thread(lambda: pool.call("compile", GOOD, SHAPE, None))
        child = _child_of(worker)
        with pool.pause():
            assert _stopped(worker, 5.0) and _stopped(child)  # (state D in vfork: see above)
            os.kill(worker, signal.SIGKILL)  # as the kernel's OOM killer would
            compiling.join(5)
            assert not compiling.is_alive(), "a dead stopped worker hung its request"
            assert out["reply"] == Crashed(signal.SIGKILL, None, "compile")
            assert _gone(child), "the compile's child outlived its stopped worker"
        assert pool.call("check", GOOD, SHAPE, 1) is None  # a fresh worker answers
        assert pool.restarts == 1


def test_closing_a_paused_pool_does_not_wait_on_stopped_workers():
    """Each stopped worker would take close()'s 2 s grace before it is killed."""
    pool = WorkerPool(_spec(), [None, None], timeout=20)
    assert pool.map("check", [(GOOD, SHAPE, 1)] * 2) == [None, None]
    procs = [w._proc for w in pool.workers]
    with pool.pause():
        started = time.monotonic()
        pool.close()
        closed = time.monotonic() - started
    assert closed < 3.0, f"close() of a paused pool took {closed:.1f} s"
    assert [p.exitcode for p in procs] == [0, 0]  # each read "stop" and left


@linux
def test_a_worker_started_in_a_pause_starts_after_it_or_holds_still_once_ready():
    with WorkerPool(_spec(), [None], timeout=20) as pool:
        worker = pool.workers[0]
        with pool.pause():
            asked, out = _in_thread(lambda: pool.call("check", GOOD, SHAPE, 1))
            time.sleep(0.5)
            assert worker.starts == 0 and asked.is_alive()
        asked.join(20)
        assert out["reply"] is None and worker.starts == 1

    with WorkerPool(_spec(), [None], timeout=20) as pool:
        worker = pool.workers[0]
        asked, out = _in_thread(lambda: pool.call("check", GOOD, SHAPE, 1))
        while worker.starts == 0:  # spawned, not ready yet (Python still starting)
            time.sleep(0.005)
        with pool.pause():
            deadline = time.monotonic() + 20
            while not worker._ready and time.monotonic() < deadline:
                time.sleep(0.02)
            assert _stopped(worker._proc.pid) and asked.is_alive()
        asked.join(20)
        assert out["reply"] is None


class _CannotPause(RequestPool):
    """A compile pool as Ray's: RequestPool's own pause, which cannot; its compiles take 0.5 s."""

    size, restarts = 1, 0

    def __init__(self):
        self.ended: list[float] = []

    def call(self, op, config, shape, batch):
        time.sleep(0.5)
        self.ended.append(time.monotonic())
        return None


def test_a_pool_that_cannot_pause_is_waited_on(tmp_path):
    from tilefit.tune.ray_executor import RayBenchPool, RayCompilePool

    assert RayCompilePool.pause is RequestPool.pause is RayBenchPool.pause
    with _journal(tmp_path) as j:
        pool = _CannotPause()
        ev = _evaluator(j, pool)
        compiling, out = _in_thread(lambda: ev.compiled(SHAPE, GOOD))
        time.sleep(0.1)
        with ev.quiet():
            entered = time.monotonic()
        compiling.join(5)
        ev.close()
    assert pool.ended and entered >= pool.ended[0]
    assert out["reply"] == Ok(0.0)


def test_a_gpu_pool_does_not_pause():
    with WorkerPool(_spec(), [0], timeout=20) as pool:
        with pool.pause() as paused:
            assert not paused


@linux
def test_a_pause_landing_in_a_workers_vfork_does_not_hang():
    """Python's subprocess starts ptxas with vfork: the worker then waits in the kernel until its
    child execs, and stops only after that, while the child, in the worker's group, stops at once
    and never execs. A pause that waited for the worker itself to stop hung there for good (found
    in review: 19 of 384 pauses of a process spawning in a loop, Linux 6.x)."""
    import subprocess

    from tilefit.tune.workers import Worker

    loop = "import subprocess\nwhile True:\n    subprocess.run(['true'])\n"
    spawner = subprocess.Popen([sys.executable, "-c", loop], process_group=0)
    worker = Worker(_spec())
    worker._proc, worker._ready = spawner, True
    in_vfork = 0
    try:
        deadline = time.monotonic() + 20
        while in_vfork < 2 and time.monotonic() < deadline:
            pausing, _ = _in_thread(worker.pause)
            pausing.join(5)
            assert not pausing.is_alive(), "a pause waited for a worker stuck in vfork"
            in_vfork += _state(spawner.pid) == "D"
            worker.resume()
            time.sleep(0.002)
    finally:
        os.killpg(spawner.pid, signal.SIGKILL)  # ends a hung pause's wait too
        spawner.wait()
    if not in_vfork:
        pytest.skip("no pause landed in the worker's vfork within 20 s")
