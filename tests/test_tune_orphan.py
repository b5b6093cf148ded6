"""A tuning worker whose parent was SIGKILLed exits without a word: its reply meets a closed pipe
(BrokenPipeError) and that is the signal to go, not a traceback on the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import REPO

PARENT = """
import os, signal, sys, time
from tilefit.tune.workers import Worker
from tilefit.tune.targets.base import TargetSpec, TuneShape
from tilefit.kernels.triton_moe.config import MoEConfig

w = Worker(TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", compile_sleep_s=0.3))
w._start()
print(w._proc.pid, flush=True)
shape = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
w._conn.send(("compile", MoEConfig(64, 128, 64, 16, 4, 3).as_dict(), shape.as_dict(), None))
os.kill(os.getpid(), signal.SIGKILL)  # the tuner dies while its worker compiles
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_orphaned_worker_exits_quietly():
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)
    worker_pid = int(proc.stdout.readline())
    start = time.monotonic()
    err = proc.stderr.read()  # EOF once the worker, which shares this stderr, is gone too
    proc.wait(timeout=30)
    assert time.monotonic() - start < 10
    assert err == "", err
    for _ in range(50):  # the worker is gone (or a zombie nobody reaps), not lingering
        if not _running(worker_pid):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"worker {worker_pid} outlived its parent")


PAUSED_PARENT = """
import os, signal, time
from tilefit.tune.workers import Worker
from tilefit.tune.targets.base import TargetSpec, TuneShape
from tilefit.kernels.triton_moe.config import MoEConfig

w = Worker(TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", compile_child_s=60))
w._start()
shape = TuneShape("gemm1", 32, 6144, 2048, 8, "bf16", 256)
w._conn.send(("compile", MoEConfig(64, 128, 64, 16, 4, 3).as_dict(), shape.as_dict(), None))
child = None
while child is None:  # the compile's `sleep 60`, as Triton's compile runs ptxas
    for e in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(open(f"/proc/{e}/stat").read().rsplit(")", 1)[1].split()[1]) == w._proc.pid:
                child = int(e)
        except (OSError, ValueError):
            pass
w.pause()
print(w._proc.pid, child, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the tuner dies inside a quiet block
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_a_paused_worker_and_its_child_end_with_the_tuner():
    """A stopped worker cannot run its parent watch; its process group, orphaned with a stopped
    member, gets SIGHUP + SIGCONT from the kernel (POSIX) and ends, the compile's child too."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_PARENT], stdout=subprocess.PIPE,
                            env=env, text=True)
    worker, child = map(int, proc.stdout.readline().split())
    proc.wait(timeout=30)
    for _ in range(50):
        if not (_running(worker) or _running(child)):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"paused worker {worker} or its child {child} outlived the tuner")
