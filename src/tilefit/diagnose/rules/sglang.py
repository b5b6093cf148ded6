"""SGLang server lines: readiness, weight loading, CUDA-graph capture, and the scheduler's death
(`Scheduler hit an exception`, then the launcher's `Received sigquit from a child process`)."""

from __future__ import annotations

from tilefit.diagnose.events import (
    CUDA_OOM, ENGINE_DIED, ERROR, FATAL, MARKER, PROGRESS, READY, Rule,
)

E = "sglang"

RULES = (
    Rule("init-distributed", E, PROGRESS, MARKER, "Init torch distributed ",
         "[2025-10-06 20:01:15 TP0] Init torch distributed begin.",
         pattern=r"Init torch distributed (?P<step>begin|ends)", fields=(("phase", "starting the workers"),)),
    Rule("ready", E, READY, MARKER, "The server is fired up and ready to roll",
         "[2025-10-06 20:09:05] The server is fired up and ready to roll!"),
    Rule("load-weight", E, PROGRESS, MARKER, "Load weight ",
         "[2025-10-06 20:03:11 TP0] Load weight begin. avail mem=94.21 GB",
         pattern=r"Load weight (?P<step>begin|end)", fields=(("phase", "loading weights"),)),
    Rule("capture-begin-end", E, PROGRESS, MARKER, "Capture cuda graph ",
         "[2025-10-06 20:05:22 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. "
         "avail mem=3.66 GB",
         pattern=r"Capture cuda graph (?P<step>begin|end|bs)", fields=(("phase", "CUDA-graph capture"),)),
    Rule("capture-batches", E, PROGRESS, MARKER, "Capturing batches",
         "Capturing batches (bs=512 avail_mem=3.10 GB):   0%|          | 0/52 [00:04<?, ?it/s]",
         pattern=r"Capturing batches \(bs=(?P<bs>\d{1,9})", fields=(("phase", "CUDA-graph capture"),)),
    Rule("scheduler-exception", E, ENGINE_DIED, ERROR, "Scheduler hit an exception",
         "[2025-10-06 20:07:41 TP0] Scheduler hit an exception: Traceback (most recent call last):"),
    Rule("sigquit", E, ENGINE_DIED, FATAL, "Received sigquit",
         "[2025-10-06 20:07:42] Received sigquit from a child process. It usually means the child failed."),
    Rule("kv-pool-oom", E, CUDA_OOM, ERROR, "Not enough memory",
         "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
)
