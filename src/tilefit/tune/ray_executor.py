"""Scale-out: the run's compile and benchmark requests on a Ray cluster, behind the interface of
`pools.WorkerPool` (call / map / size / restarts / close), selected by `tilefit tune --ray`.

Compiles are CPU tasks (num_cpus=1); timing is one actor per GPU of the cluster (num_gpus=1).
Each task and actor drives a local `Worker` process, so a segfault, hang or poisoned context is
caught by the same code as on one host and becomes the same result value (the journal of a Ray
run reads like a local one). A compile task whose process Ray itself loses (killed, node gone,
or handed a worker that a cancel is still taking down) runs once more, on another worker; lost
twice it becomes Crashed, as does a request to an actor that dies. One that outlives the driver's
deadline is killed and becomes a Timeout (Ray never retries a cancelled task).
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tilefit.errors import MissingDependency, UsageError
from tilefit.tune.results import Crashed, LaunchFailed, Timeout
from tilefit.tune.targets.base import TargetSpec, TuneShape
from tilefit.tune.pools import RequestPool
from tilefit.tune.workers import Worker

INSTALL_HINT = "pip install 'tilefit[ray]'"
# Past the request's own timeout, how long the driver waits before it gives a task or actor up:
# the local Worker inside may first spend up to its start timeout building the target.
START_TIMEOUT_S = 120.0
GRACE_S = START_TIMEOUT_S + 30.0
CANCEL_SETTLE_S = 30.0


@dataclass(frozen=True)
class RayOptions:
    """How the run uses the cluster. The defaults are what `--ray ADDRESS` asks for."""

    address: str = "auto"  # "auto": the cluster this host belongs to; else host:port or ray://...
    compile_tasks: int | None = None  # in flight at once; None: the cluster's CPUs the actors leave
    bench_actors: int | None = None  # None: one per GPU of the cluster
    actor_gpus: float = 1.0  # 0: actors that need no GPU (CPU targets and tests)
    # One CPU per actor by default: the timing process needs a core of its own to launch kernels.
    actor_cpus: float = 1.0
    grace_s: float = GRACE_S


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingDependency(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


@contextmanager
def connected(address: str) -> Iterator[Any]:
    """The `ray` module, connected to the cluster at `address`. A process already connected
    (a test's local cluster, a notebook) keeps its connection; one made here is closed after."""
    ray = import_ray()
    _check_reachable(address)
    owned = not ray.is_initialized()
    if owned:
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UsageError(f"--ray {address}: cannot connect to a Ray cluster ({first}); start "
                             f"one with `ray start --head` on this host, or give its address") from None
    try:
        yield ray
    finally:
        if owned:
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """A host:port (or ray://host:port) that nothing answers on is bad input, said at once:
    Ray itself retries a wrong address for minutes."""
    import socket

    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit() or not host:
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5.0).close()
    except OSError as e:
        raise UsageError(f"--ray {address}: no Ray cluster answers there ({e.strerror or e}); "
                         f"check the head node's address (`ray status` on it), or use --ray auto "
                         f"on a host of the cluster") from None


# -- what runs on the cluster ------------------------------------------------------------------
# One local Worker per Ray worker process, kept between tasks: a compile costs one pipe
# round trip, not a process start. Ray runs one task at a time in a worker process.
_LOCAL: dict[str, Worker] = {}


def _compile_task(spec: TargetSpec, op: str, config: Any, shape: TuneShape, batch: int | None,
                  timeout: float) -> tuple[Any, int]:
    """(reply, worker restarts it caused) of one request, in the task's cached Worker."""
    key = repr(spec)
    worker = _LOCAL.get(key)
    if worker is None:
        for old in _LOCAL.values():
            old.stop()
        _LOCAL.clear()
        worker = _LOCAL[key] = Worker(spec, start_timeout=START_TIMEOUT_S)
    before = worker.restarts
    reply = worker.call(op, config, shape, batch, timeout)
    return reply, worker.restarts - before


class _BenchHost:
    """The benchmark actor: a local Worker on the GPU Ray gave this actor (CUDA_VISIBLE_DEVICES
    is set by Ray and inherited by the Worker's process)."""

    def __init__(self, spec: TargetSpec):
        self.worker = Worker(spec, start_timeout=START_TIMEOUT_S)

    def call(self, op: str, config: Any, shape: TuneShape, batch: int | None,
             timeout: float) -> tuple[Any, int]:
        before = self.worker.restarts
        reply = self.worker.call(op, config, shape, batch, timeout)
        return reply, self.worker.restarts - before

    def stop(self) -> None:
        self.worker.stop()


def _settle(ray: Any, ref: Any, op: str, timeout: float, grace: float) -> tuple[Any, int, bool]:
    """(reply, restarts, lost): wait for one request; `lost` means its process is gone or must go."""
    ready, _ = ray.wait([ref], timeout=timeout + grace)
    if not ready:
        return Timeout(timeout, op), 1, True
    try:
        reply, restarts = ray.get(ref)
    except ray.exceptions.RayTaskError as e:  # our own code failed there (e.g. tilefit missing)
        cause = e.cause if getattr(e, "cause", None) is not None else e
        text = f"{type(cause).__name__}: {cause}".strip()[:2000]
        return LaunchFailed(f"Ray worker could not serve the request: {text}"), 0, False
    except ray.exceptions.RayError:  # the task's process or the actor died under it
        return Crashed(None, None, op), 1, True
    return reply, restarts, False


class _RayPool(RequestPool):
    """What both Ray pools share: restart counting."""

    def __init__(self, ray: Any, spec: TargetSpec, timeout: float, grace: float):
        self.ray, self.spec, self.timeout, self.grace = ray, spec, timeout, grace
        self._restarts = 0
        self._lock = threading.Lock()

    def _count(self, restarts: int) -> None:
        if restarts:
            with self._lock:
                self._restarts += restarts

    @property
    def restarts(self) -> int:
        return self._restarts


class RayCompilePool(_RayPool):
    """Compile requests as CPU tasks, at most `size` in flight (so a queued task's wait for a
    free CPU does not count against its timeout)."""

    def __init__(self, ray: Any, spec: TargetSpec, size: int, *, timeout: float,
                 grace: float = GRACE_S):
        super().__init__(ray, spec, timeout, grace)
        self.size = max(1, size)
        self._slots = threading.Semaphore(self.size)
        # A compile is a pure function of its request: one that Ray loses is safe to run again.
        self._task = ray.remote(num_cpus=1, max_retries=1)(_compile_task)

    def call(self, op: str, config: Any, shape: TuneShape, batch: int | None) -> Any:
        with self._slots:
            ref = self._task.remote(self.spec, op, config, shape, batch, self.timeout)
            reply, restarts, lost = _settle(self.ray, ref, op, self.timeout, self.grace)
            if lost:
                self.ray.cancel(ref, force=True)  # a hung task's process goes, and its Worker
                # The slot frees once the cancel has landed, so the next task is not handed a
                # worker still going down.
                self.ray.wait([ref], timeout=CANCEL_SETTLE_S)
        self._count(restarts)
        return reply


class RayBenchPool(_RayPool):
    """Benchmark requests on `size` actors, one request per actor at a time; an actor that dies
    or hangs is killed and replaced."""

    def __init__(self, ray: Any, spec: TargetSpec, size: int, *, gpus: float, timeout: float,
                 cpus: float = 1.0, grace: float = GRACE_S):
        super().__init__(ray, spec, timeout, grace)
        self.size = max(1, size)
        self._cls = ray.remote(num_cpus=cpus, num_gpus=gpus, max_restarts=0)(_BenchHost)
        self.actors = [self._cls.remote(spec) for _ in range(self.size)]
        self._idle: queue.Queue[int] = queue.Queue()
        for i in range(self.size):
            self._idle.put(i)

    def call(self, op: str, config: Any, shape: TuneShape, batch: int | None) -> Any:
        i = self._idle.get()
        try:
            ref = self.actors[i].call.remote(op, config, shape, batch, self.timeout)
            reply, restarts, lost = _settle(self.ray, ref, op, self.timeout, self.grace)
            if lost:
                self.ray.kill(self.actors[i])
                self.actors[i] = self._cls.remote(self.spec)
            self._count(restarts)
            return reply
        finally:
            self._idle.put(i)

    def close(self) -> None:
        super().close()
        stops = [a.stop.remote() for a in self.actors]
        self.ray.wait(stops, num_returns=len(stops), timeout=10)
        for a in self.actors:
            self.ray.kill(a)


def _plan(ray: Any, options: RayOptions) -> tuple[int, int]:
    """(compile tasks in flight, benchmark actors) for the cluster as it is now."""
    res = ray.cluster_resources()
    cpus, gpus = int(res.get("CPU", 0)), res.get("GPU", 0.0)
    if options.bench_actors is not None:
        actors = options.bench_actors
    elif options.actor_gpus > 0:
        actors = int(gpus // options.actor_gpus)
        if actors == 0:
            raise UsageError(f"--ray {options.address}: the Ray cluster has no GPUs to time on "
                             f"(resources: {cpus} CPUs); start its nodes with GPUs visible")
    else:
        actors = 1
    compile_tasks = options.compile_tasks or max(1, cpus - math.ceil(actors * options.actor_cpus))
    return compile_tasks, actors


@contextmanager
def ray_pools(spec: TargetSpec, options: RayOptions, *, compile_timeout: float,
              run_timeout: float) -> Iterator[tuple[RayCompilePool, RayBenchPool]]:
    """The (compile, benchmark) pools of one run on the cluster `options.address` names."""
    with connected(options.address) as ray:
        compile_tasks, actors = _plan(ray, options)
        with RayCompilePool(ray, spec, compile_tasks, timeout=compile_timeout,
                            grace=options.grace_s) as cpool, \
                RayBenchPool(ray, spec, actors, gpus=options.actor_gpus, cpus=options.actor_cpus,
                             timeout=run_timeout, grace=options.grace_s) as bpool:
            yield cpool, bpool


def _gpu_name() -> str | None:
    from tilefit.tune.device import local_gpus

    return local_gpus()[1]


def cluster_gpu_name(address: str) -> str | None:
    """The driver-reported name of a GPU on the cluster (for the engines' file names), asked of
    a one-GPU task: the host running `tilefit tune --ray` may have no GPU of its own."""
    with connected(address) as ray:
        if ray.cluster_resources().get("GPU", 0) < 1:
            return None
        ref = ray.remote(num_gpus=1, max_retries=0)(_gpu_name).remote()
        ready, _ = ray.wait([ref], timeout=GRACE_S)
        return ray.get(ready[0]) if ready else None
