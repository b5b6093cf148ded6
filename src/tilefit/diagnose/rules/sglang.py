"""SGLang server lines: readiness, serving, start-up progress, CUDA-graph capture, and death
(`<Manager> hit an exception`, `Initialization failed.`, then the launcher's `Received sigquit from a
child process`). Spellings read from the sglang 0.5.23 wheel (srt/distributed/bootstrap.py,
model_executor/model_runner.py, model_runner_components/cuda_graph_setup.py,
scheduler_components/metrics_reporter.py, entrypoints/http_server.py and engine.py); the older
spellings (`Init torch distributed begin.`, `Capture cuda graph begin.`) are kept for older logs.
Only `The server is fired up and ready to roll!` means ready: uvicorn's lines come before warmup."""

from __future__ import annotations

from tilefit.diagnose.events import (
    ACTIVITY, CUDA_OOM, DEVICE_NAME_FIELD, ENGINE_DIED, ERROR, FATAL, HINT, MARKER, PROGRESS, READY, SERVING, Rule,
)

E = "sglang"

RULES = (
    # The scheduler's rank prefix "[2025-12-26 08:58:40 DP1 TP5 EP5] ": the engine at work (evidence
    # of a run only, never of an error survived).
    Rule("rank-prefix", E, PROGRESS, MARKER, " TP",
         "[2025-12-26 08:58:40 DP1 TP5 EP5] Entering DeepGEMM JIT Pre-Compile session.",
         pattern=r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [DTEP]P\d{1,5}){1,6}\]",
         fields=(("activity", True),), tier=ACTIVITY),
    Rule("init-distributed", E, PROGRESS, MARKER, "Init torch distributed ",
         "[2025-10-06 20:01:15 TP0] Init torch distributed begin.",
         pattern=r"Init torch distributed (?P<step>begin|ends)", fields=(("phase", "starting the workers"),)),
    # sglang <= 0.1: "[gpu_id=0] Init nccl begin."
    Rule("init-nccl", E, PROGRESS, MARKER, "Init nccl ",
         "[gpu_id=0] Init nccl begin.", pattern=r"Init nccl (?P<step>begin|end)",
         fields=(("phase", "starting the workers"),)),
    Rule("init-parallel", E, PROGRESS, MARKER, "Init parallel ",
         "[2026-10-30 10:01:15 TP0] Init parallel begin.",
         pattern=r"Init parallel (?P<step>begin|ends)", fields=(("phase", "starting the workers"),)),
    Rule("ready", E, READY, MARKER, "The server is fired up and ready to roll",
         "[2025-10-06 20:09:05] The server is fired up and ready to roll!"),
    # The scheduler's metrics lines are printed only while it serves requests.
    Rule("decode-batch", E, READY, MARKER, "Decode batch",
         "[2025-10-06 20:09:30 DP0 TP0] Decode batch. #running-req: 12, #token: 8832, token usage: 0.02, "
         "cuda graph: True, gen throughput (token/s): 512.31, #queue-req: 0, ",
         pattern=r"Decode batch\b.{0,40}#running-req", fields=(("phase", "serving"),), tier=SERVING),
    Rule("prefill-batch", E, READY, MARKER, "Prefill batch",
         "[2025-10-06 20:09:29 DP0 TP0] Prefill batch. #new-seq: 1, #new-token: 512, #cached-token: 0, "
         "token usage: 0.00, #running-req: 0, #queue-req: 0, ",
         pattern=r"Prefill batch\b.{0,40}#new-(?:seq|token)", fields=(("phase", "serving"),), tier=SERVING),
    Rule("load-weight", E, PROGRESS, MARKER, "Load weight ",
         "[2025-10-06 20:03:11 TP0] Load weight begin. avail mem=94.21 GB",
         pattern=r"Load weight (?P<step>begin|end)", fields=(("phase", "loading weights"),)),
    Rule("memory-pool", E, PROGRESS, MARKER, "Memory pool end",
         "[2025-10-06 20:03:12 TP0] Memory pool end. avail mem=8.93 GB",
         fields=(("phase", "allocating the KV cache"),)),
    Rule("capture-begin-end", E, PROGRESS, MARKER, "Capture cuda graph ",
         "[2025-10-06 20:05:22 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. "
         "avail mem=3.66 GB",
         pattern=r"Capture cuda graph (?P<step>begin|end|bs)", fields=(("phase", "CUDA-graph capture"),)),
    # 0.5.14+: "Capture {role} CUDA graph begin." (role: decode, draft decode, draft extend, ...)
    Rule("capture-role", E, PROGRESS, MARKER, "CUDA graph begin",
         "[2026-10-30 10:05:22 TP0] Capture decode CUDA graph begin. This can take up to several minutes.",
         pattern=r"Capture (?P<role>[\w ]{1,40}?) CUDA graph (?P<step>begin)",
         fields=(("phase", "CUDA-graph capture"),)),
    Rule("capture-batches", E, PROGRESS, MARKER, "Capturing batches",
         "Capturing batches (bs=512 avail_mem=3.10 GB):   0%|          | 0/52 [00:04<?, ?it/s]",
         pattern=r"Capturing batches \(bs=(?P<bs>\d{1,9})", fields=(("phase", "CUDA-graph capture"),)),
    # "<Manager> hit an exception": the manager's loop ended on the exception. Names from the sglang
    # 0.5.23 wheel (managers/*.py) plus TpModelWorkerClient (older sglang's overlap worker); vLLM's
    # "WorkerProc hit an exception." is in vllm.py.
    *(Rule(f"{name}-exception", E, ENGINE_DIED, FATAL, f"{name} hit an exception",
           f"[2025-10-06 20:07:41 TP0] {name} hit an exception: Traceback (most recent call last):")
      for name in ("Scheduler", "TpModelWorkerClient", "DetokenizerManager", "TokenizerManager",
                   "DataParallelController", "MultiDetokenizerRouter")),
    Rule("init-failed", E, ENGINE_DIED, FATAL, "Initialization failed.",
         "[2024-11-26 14:25:58] Initialization failed. warmup error: Traceback (most recent call last):"),
    Rule("sigquit", E, ENGINE_DIED, FATAL, "Received sigquit",
         "[2025-10-06 20:07:42] Received sigquit from a child process. It usually means the child failed."),
    # fused_moe_triton found no tuned config file for this GPU (printed while loading the model).
    Rule("default-moe-config", E, HINT, MARKER, "Using default MoE kernel config",
         "[2026-05-15 20:31:38] Using default MoE kernel config. Performance might be sub-optimal! Config file "
         "not found at /sglang/srt/layers/moe/fused_moe_triton/configs/E=128,N=768,device_name=NVIDIA_H200.json",
         pattern=DEVICE_NAME_FIELD + "|$", fields=(("hint", "default-moe-config"),)),
    Rule("kv-pool-oom", E, CUDA_OOM, ERROR, "Not enough memory",
         "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
)
