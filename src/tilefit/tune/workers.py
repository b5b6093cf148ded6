"""Isolated worker processes: whatever a config does to its process, the run goes on.

Each `Worker` is one spawned process that builds the target from its spec and answers requests
(compile / run / check) over a pipe. The parent waits with a deadline: a hang is killed (Timeout),
a dead process (segfault, abort, os._exit) becomes Crashed(signal), an exception becomes a result
value, and an error the target calls fatal (a poisoned CUDA context) retires the process. The
next request starts a fresh process (pools of them: tune/pools.py). A compile worker leads a
process group of its own (Triton's compile runs ptxas as its child), so its compile can be stopped
in place while the GPU is timed (`pause`, SIGSTOP/SIGCONT of the group) and a hung one killed with
its children.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from typing import Any

from tilefit.tune.results import (CompileFailed, Crashed, LaunchFailed, Ok, Result, Timeout,
                                  parse_out_of_resources)
from tilefit.tune.targets.base import TargetSpec, TuneShape

# Exit code a worker uses when it retires itself after a fatal error.
_RETIRE = 3
COMPILE_NICENESS = 10
STOP_WAIT_S = 0.5  # a pause's wait for a compile worker to stop, at most (see _stop_group)
_MESSAGE_CHARS = 2000


def _classify(op: str, error: BaseException) -> Result:
    text = f"{type(error).__name__}: {error}"
    fit = parse_out_of_resources(text)
    if fit is not None:
        return fit
    text = text.strip()[:_MESSAGE_CHARS]
    return CompileFailed(text) if op == "compile" else LaunchFailed(text)


def _exit_with_parent() -> None:
    """A thread that ends this process once its parent is gone (SIGKILLed tuner, cancelled Ray
    task): a hung compile must not outlive the run as an orphan."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(_RETIRE)

    threading.Thread(target=watch, name="tilefit-parent-watch", daemon=True).start()


def _send(conn: Any, message: tuple[Any, ...]) -> None:
    """Reply to the parent; a closed pipe means the parent is gone (killed, or it killed us as
    hung and moved on), so this process ends quietly instead of printing a BrokenPipeError."""
    try:
        conn.send(message)
    except OSError:  # BrokenPipeError, ConnectionResetError
        os._exit(_RETIRE)


def _worker_main(conn: Any, spec: TargetSpec, device: int | None) -> None:
    """Child process: build the target once, then serve requests until told to stop."""
    _exit_with_parent()
    # Ctrl-C reaches the tuner's process group (a GPU worker's); the parent decides what stops,
    # and a worker that raised KeyboardInterrupt would only print a traceback per process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if device is None:
        # A compile worker yields the CPU to the GPU workers: a timing worker that waits for a core
        # lets the GPU idle inside its CUDA events, and small kernels then measure slow.
        os.nice(COMPILE_NICENESS)
        # Its own process group, before "ready": the parent's pause and kill signal the group, so
        # they reach the ptxas that Triton's compile runs as a child. Should the parent die while
        # the group is stopped, the group is orphaned with a stopped member and the kernel sends it
        # SIGHUP + SIGCONT (POSIX), which ends it: the parent watch cannot run while stopped.
        os.setpgid(0, 0)
    else:
        # `device` indexes the GPUs this process was allowed to see (the parent's list, if any).
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        os.environ["CUDA_VISIBLE_DEVICES"] = visible[device] if device < len(visible) else str(device)
    try:
        target = spec.build()
    except BaseException as e:  # report, then exit: every request to this worker fails alike
        _send(conn, ("init-failed", f"{type(e).__name__}: {e}"[:_MESSAGE_CHARS]))
        return
    _send(conn, ("ready", None))
    while True:
        try:
            op, config_dict, shape_dict, batch = conn.recv()
        except (EOFError, OSError):
            return
        if op == "stop":
            return
        fatal = False
        began = time.monotonic()
        try:
            shape = TuneShape(**shape_dict)
            config: Any = None  # none for "warm" and "stats"
            if op == "run_many":
                config = tuple(target.config_from_dict(d) for d in config_dict["group"])
            elif config_dict is not None:
                config = target.config_from_dict(config_dict)
            reply: Any = None
            if op == "warm":  # started ahead of its first request: ready what that will need
                if hasattr(target, "warm"):
                    target.warm(shape, device is not None)
            elif op == "stats":  # the target's counters for this process (WorkerPool.stats)
                reply = dict(target.stats()) if hasattr(target, "stats") else {}
            elif op == "compile":
                target.compile(config, shape)
            elif op == "run":
                reply = Ok(float(target.run(config, shape, batch)))
            elif op == "run_many":  # several configs timed in turns (a re-timing round)
                reply = [Ok(float(t)) for t in target.run_many(list(config), shape, batch)]
            elif op == "probe":  # a search's ranking timing; the target's `run` if it has none
                reply = Ok(float(getattr(target, "probe", target.run)(config, shape, batch)))
            elif op == "check":
                reply = target.check(config, shape, batch)
            else:
                raise ValueError(f"unknown request {op!r}")
        except Exception as e:  # failure is data
            reply = _classify(op, e)
            fatal = bool(target.is_fatal(e))
        # The worker's own time with the reply: the parent's clock also counts the pipe, its own
        # threads and a (re)start of this process (the trace shows both, tune/pools.py).
        _send(conn, ("reply" if not fatal else "retiring", reply, time.monotonic() - began))
        if fatal:
            conn.close()
            os._exit(_RETIRE)


class Worker:
    """One isolated process, restarted on demand after a crash, hang or fatal error. A compile
    worker can be paused (its process group stopped) and resumed from another thread while a
    request is in flight; its time stopped does not count against the request's timeout."""

    def __init__(self, spec: TargetSpec, device: int | None = None, *, start_timeout: float = 120.0):
        self.spec = spec
        self.device = device
        self.start_timeout = start_timeout
        self.starts = 0
        self._proc: Any = None
        self._conn: Any = None
        self._ctx = mp.get_context("spawn")
        # Guards the process's pause state against the calling thread's start / kill / reap.
        self._state = threading.Condition()
        self._ready = False  # the process said "ready": it leads its own group (compile worker)
        self._paused = False  # asked to hold still: stopped now, or once ready, or not started
        self._stopped_at: float | None = None  # when SIGSTOP was sent, while the group is stopped
        self._held_s = 0.0  # seconds spent stopped before, in all
        self.last_work_s: float | None = None  # the last reply's time in the process (None: none)

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    @property
    def alive(self) -> bool:
        """Whether its process is running now (a request to a dead one would start another)."""
        return self._proc is not None and self._proc.is_alive()

    @property
    def pausable(self) -> bool:
        """Compile workers only: a GPU worker shares its parent's group, and a kernel stopped
        mid-timing would be a wrong figure, not a quiet host."""
        return self.device is None

    def _signal(self, sig: int) -> None:
        """`sig` to the process and its children: its group once it leads one (no group has this
        id before), else the process alone (a GPU worker; a compile worker before its setpgid)."""
        pid = self._proc.pid
        for send in (os.killpg, os.kill):
            try:
                return send(pid, sig)
            except ProcessLookupError:
                pass

    def _stop_group(self) -> None:  # with self._state held
        if self._stopped_at is None:
            self._signal(signal.SIGSTOP)
            self._stopped_at = time.monotonic()
            # Back once it is stopped (a signal is acted on when the process next runs): a parent
            # that dies before that leaves a group with no stopped member, which the kernel's
            # orphan SIGHUP skips. But not for good: a worker inside vfork (Python's subprocess
            # starting ptxas) stops only once its child execs, and the child, in the group, is
            # stopped already; the worker idles in the kernel till then, and the group has a
            # stopped member, so the block can go on (SIGCONT drops the worker's pending stop).
            pid, deadline = self._proc.pid, time.monotonic() + STOP_WAIT_S
            flags = os.WSTOPPED | os.WEXITED | os.WNOWAIT | os.WNOHANG  # WNOWAIT: reap none
            try:
                while os.waitid(os.P_PID, pid, flags) is None and time.monotonic() < deadline:
                    time.sleep(0.001)
            except ChildProcessError:  # reaped already
                pass

    def _continue_group(self) -> None:  # with self._state held
        if self._stopped_at is not None:
            self._signal(signal.SIGCONT)
            self._held_s += time.monotonic() - self._stopped_at
            self._stopped_at = None

    def pause(self) -> None:
        """Stop the process where it is (a compile in flight included), until `resume`. One
        starting is stopped once ready, and none is started meanwhile (see `_start`)."""
        with self._state:
            self._paused = True
            if self._proc is not None and self._ready:
                self._stop_group()

    def resume(self) -> None:
        with self._state:
            self._paused = False
            if self._proc is not None:
                self._continue_group()
            self._state.notify_all()

    def _held_now(self) -> float:
        with self._state:
            now = time.monotonic() - self._stopped_at if self._stopped_at is not None else 0.0
            return self._held_s + now

    def _start(self) -> Result | None:
        with self._state:
            while self._paused:  # a fresh process would load the CPU through the whole pause
                self._state.wait()
        self.starts += 1
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, self.spec, self.device),
                                 daemon=True)
        proc.start()
        child.close()
        with self._state:
            self._proc, self._conn, self._ready = proc, parent, False
        if not parent.poll(self.start_timeout):
            self._kill()
            return Timeout(self.start_timeout, "start")
        try:
            kind, detail = parent.recv()
        except (EOFError, OSError):
            return self._reap("start")
        if kind != "ready":
            self._kill()
            return LaunchFailed(f"worker could not build the target: {detail}")
        with self._state:
            self._ready = True
            if self._paused:  # a pause came while it started: it holds still from now on
                self._stop_group()
        return None

    def _replied(self, timeout: float) -> bool:
        """Whether a reply came within `timeout` seconds of the process running: a pause (a
        quiet block, seconds) must not make a compile of a few seconds a Timeout."""
        start, held = time.monotonic(), self._held_now()
        while True:
            left = timeout - (time.monotonic() - start) + (self._held_now() - held)
            if self._conn.poll(max(0.0, left)):
                return True
            if left <= 0:
                return False

    def call(self, op: str, config: Any, shape: TuneShape, batch: int | None,
             timeout: float) -> Any:
        """Send one request; the reply, or a Timeout / Crashed / LaunchFailed value."""
        self.last_work_s = None
        if self._proc is None or not self._proc.is_alive():
            failed = self._start()
            if failed is not None:
                return failed
        try:
            # To a stopped process too: the request waits in the pipe until it continues.
            self._conn.send((op, config.as_dict() if config is not None else None,
                             shape.as_dict(), batch))
            if not self._replied(timeout):
                self._kill()
                return Timeout(timeout, op)
            kind, reply, self.last_work_s = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            return self._reap(op)
        if kind == "retiring":  # a fatal error retires the process after its reply
            self._proc.join(5)
            self._kill()
        return reply

    def _forget(self) -> Any:
        """The process, detached from this worker (dead or dying): a later pause or resume
        leaves it alone, and its time stopped so far still counts as held."""
        with self._state:
            proc = self._proc
            if proc is not None:
                self._continue_group()  # for the count: SIGCONT is moot to a killed group
            self._proc, self._ready = None, False
            return proc

    def _reap(self, phase: str) -> Crashed:
        proc = self._proc
        if proc is None:  # stopped from another thread (a pool closed under a request)
            return Crashed(None, None, phase)
        proc.join(5)
        self._kill()  # one that hangs on, or what is left of its group (a ptxas, maybe stopped)
        code = proc.exitcode
        if code is not None and code < 0:
            return Crashed(-code, None, phase)
        return Crashed(None, code, phase)

    def _kill(self) -> None:
        with self._state:
            if self._proc is not None:
                # SIGKILL: a hung compiler or kernel gets no say; a stopped one dies as well, and
                # so does the ptxas a compile worker ran, which would outlive it otherwise.
                self._signal(signal.SIGKILL)
        proc = self._forget()
        if proc is not None:
            proc.join(5)

    def ask_stop(self) -> None:
        """Tell the process to leave, without waiting (`stop` waits): a pool asks all its workers
        first, so they leave at once (a compile worker took 0.5 s to exit after compiling)."""
        self.resume()  # a stopped process could not read "stop"
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(("stop", None, None, None))
            except (OSError, BrokenPipeError):
                pass

    def stop(self, asked: bool = False) -> None:
        """End the process: asked to leave (unless `asked` already), given 2 s, then killed."""
        if not asked:
            self.ask_stop()
        if self._proc is not None:
            self._proc.join(2)
        self._kill()
