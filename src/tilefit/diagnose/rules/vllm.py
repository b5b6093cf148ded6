"""vLLM server lines: engine start, model loading, CUDA-graph capture, the API server, serving
statistics, the engine core's and workers' death, and the fused-MoE default-config warning (no tuned
file for this GPU). Spellings read from the vLLM 0.11.0 wheel: v1/engine/core.py ("EngineCore failed
to start.", "EngineCore encountered a fatal error."), v1/executor/multiproc_executor.py ("WorkerProc
hit an exception.", "WorkerProc failed to start.", "Worker proc %s died unexpectedly"),
v1/engine/utils.py ("Engine core initialization failed."), v1/metrics/loggers.py ("Avg prompt
throughput:"), entrypoints/openai/api_server.py ("Starting vLLM API server %d on %s"). Newer vLLM
prints "Starting vLLM server on ..." (seen in public logs; no newer wheel was read here).
Lines carry a process tag, "(EngineCore_DP0 pid=4123)" or "(EngineCore pid=77)": see prefixes.py."""

from __future__ import annotations

from tilefit.diagnose.events import (
    ACTIVITY, DEVICE_NAME_FIELD, ENGINE_DIED, FATAL, HINT, MARKER, PROGRESS, READY, SERVING, Rule,
)

E = "vllm"

RULES = (
    # Any INFO line of vLLM's logger shows a vLLM process at work: evidence that it is starting,
    # never proof that an error before it was survived (vLLM logs its shutdown at INFO too).
    Rule("info", E, PROGRESS, MARKER, "INFO ",
         "(EngineCore_DP0 pid=4039410) INFO 10-07 17:36:28 [gpu_model_runner.py:2753] Loading model from scratch...",
         pattern=r"(?<!\w)INFO \d\d-\d\d \d\d:\d\d:\d\d",
         fields=(("activity", True),), tier=ACTIVITY),
    Rule("engine-init", E, PROGRESS, MARKER, "LLM engine (v",
         "(EngineCore_DP0 pid=4123) INFO 10-06 20:01:10 [core.py:76] Initializing a V1 LLM engine (v0.11.0) "
         "with config: model='Qwen/Qwen3-30B-A3B', dtype=torch.bfloat16, tensor_parallel_size=1",
         pattern=r"LLM engine \(v(?P<vllm_version>\d{1,3}\.\d{1,3}\.\d{1,3}[\w.+-]{0,40})\)|$",
         fields=(("phase", "starting the engine"),)),
    Rule("model-loading", E, PROGRESS, MARKER, "Model loading took",
         "(EngineCore_DP0 pid=4123) INFO 10-06 20:03:40 [gpu_model_runner.py:2602] Model loading took "
         "61.2 GiB and 95.3 seconds", fields=(("phase", "loading weights"),)),
    Rule("loading-weights", E, PROGRESS, MARKER, "Loading weights took",
         "(EngineCore pid=1639) INFO 04-25 03:33:08 [default_loader.py:384] Loading weights took 74.58 seconds",
         fields=(("phase", "loading weights"),)),
    Rule("kv-cache", E, PROGRESS, MARKER, "Available KV cache memory",
         "(EngineCore_DP0 pid=4123) INFO 10-06 20:04:02 [gpu_worker.py:298] Available KV cache memory: "
         "18.53 GiB", fields=(("phase", "profiling memory"),)),
    Rule("kv-cache-size", E, PROGRESS, MARKER, "GPU KV cache size",
         "(EngineCore_DP0 pid=4123) INFO 10-06 20:04:02 [kv_cache_utils.py:1087] GPU KV cache size: 1,001,232 "
         "tokens", fields=(("phase", "profiling memory"),)),
    Rule("capturing-graphs", E, PROGRESS, MARKER, "Capturing CUDA graph",
         "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  45%|####5     | 30/67 [00:03<00:04,"
         "  8.91it/s]", pattern=r"(?<!\d)(?P<done>\d{1,6})/(?P<total>\d{1,6})(?!\d)|$", body=True,
         fields=(("phase", "CUDA-graph capture"),)),
    Rule("capturing-model", E, PROGRESS, MARKER, "Capturing the model for CUDA graphs",
         "(VllmWorkerProcess pid=13109) INFO 08-19 07:51:12 model_runner.py:1024] Capturing the model for "
         "CUDA graphs.", fields=(("phase", "CUDA-graph capture"),)),
    Rule("graph-capture-done", E, PROGRESS, MARKER, "Graph capturing finished",
         "(EngineCore_DP0 pid=4123) INFO 10-06 20:04:31 [gpu_model_runner.py:3480] Graph capturing "
         "finished in 29 secs, took 1.02 GiB", fields=(("phase", "CUDA-graph capture done"),)),
    Rule("init-engine-took", E, PROGRESS, MARKER, "(profile, create kv cache, warmup model) took",
         "(EngineCore_DP0 pid=4123) INFO 10-06 20:04:33 [core.py:210] init engine (profile, create kv cache, "
         "warmup model) took 31.52 seconds", fields=(("phase", "engine started"),)),
    Rule("api-server", E, PROGRESS, MARKER, "Starting vLLM API server",
         "(APIServer pid=4000) INFO 10-06 20:04:35 [api_server.py:1896] Starting vLLM API server 0 on "
         "http://0.0.0.0:8000", fields=(("phase", "starting the API server"),)),
    Rule("server-on", E, PROGRESS, MARKER, "Starting vLLM server on",
         "(APIServer pid=4000) INFO 04-25 03:35:01 [api_server.py:2011] Starting vLLM server on "
         "http://0.0.0.0:8000", fields=(("phase", "starting the API server"),)),
    # Engine statistics are logged only by a running engine (idle ones print zeros).
    Rule("engine-stats", E, READY, MARKER, "Avg prompt throughput",
         "(APIServer pid=4000) INFO 10-06 20:10:05 [loggers.py:123] Engine 000: Avg prompt throughput: "
         "0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, "
         "GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%", fields=(("phase", "serving"),), tier=SERVING),
    # The engine core's and workers' death: (rule, needle, pattern, an example line).
    *(Rule(name, E, ENGINE_DIED, FATAL, needle, example, pattern=pattern) for name, needle, pattern, example in (
        ("enginecore-failed", "EngineCore failed to start", None,
         "(EngineCore_DP0 pid=4123) ERROR 10-06 20:07:41 [core.py:708] EngineCore failed to start."),
        ("enginecore-fatal", "EngineCore encountered a fatal error", None,
         "(EngineCore_DP0 pid=4123) ERROR 10-06 20:07:41 [core.py:710] EngineCore encountered a fatal error."),
        ("workerproc", "WorkerProc ", r"WorkerProc (?:hit an exception|failed to start|initialization failed)",
         "(Worker_TP0 pid=1013) ERROR 01-14 18:57:02 [multiproc_executor.py:671] WorkerProc hit an exception."),
        # vLLM 0.7's V1 engine core loop (seen in public logs of 0.7.3; 0.11.0 logs "EngineCore
        # encountered a fatal error." instead).
        ("enginecore-exception", "EngineCore hit an exception", None,
         "ERROR 02-24 22:11:40 core.py:294] EngineCore hit an exception: Traceback (most recent call last):"),
        ("engine-init-failed", "Engine core initialization failed", None,
         "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"),
        ("proc-died", "Engine core proc ", r"died unexpectedly",
         "(APIServer pid=4000) ERROR 10-06 20:07:43 [core_client.py:564] Engine core proc EngineCore_DP0 "
         "died unexpectedly, shutting down client."),
        # dump_engine_exception (logging_utils/dump_input.py, vllm 0.9.0-0.33.0): the engine core
        # logs its input and scheduler state at ERROR when a model step raises, then re-raises;
        # run_engine_core ends the engine ("EngineCore encountered a fatal error.", v1/engine/core.py).
        ("engine-dump", "Dumping ", r"Dumping (?:input data|scheduler output for model execution|scheduler stats)",
         "(EngineCore_DP0 pid=2647451) ERROR 05-20 10:42:56 [dump_input.py:81] Dumping scheduler stats: "
         "SchedulerStats(num_running_reqs=809, num_waiting_reqs=0)"),
        ("worker-died", "Worker proc ", r"died unexpectedly",
         "(EngineCore_DP0 pid=4123) ERROR 10-06 20:07:43 [multiproc_executor.py:155] Worker proc VllmWorker-1 "
         "died unexpectedly, shutting down executor."),
    )),
    # A vLLM worker's or engine core's process tag: the engine at work (evidence of a run only).
    Rule("process-tag", E, PROGRESS, MARKER, " pid=",
         "(Worker_TP4_EP4 pid=892) [aiter] import [module_gemm_a8w8_blockscale] under /aiter/jit/module.so",
         pattern=r"^\((?:EngineCore|VllmWorker|Worker_|RayWorkerWrapper)[\w-]{0,40}(?: rank=\d{1,6})? pid=\d",
         fields=(("activity", True),), tier=ACTIVITY),
    Rule("default-moe-config", E, HINT, MARKER, "Using default MoE config",
         "(EngineCore_DP0 pid=4123) WARNING 10-06 20:04:10 [fused_moe.py:727] Using default MoE config. "
         "Performance might be sub-optimal! Config file not found at ['/vllm/model_executor/layers/"
         "fused_moe/configs/E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json']",
         pattern=DEVICE_NAME_FIELD + "|$", fields=(("hint", "default-moe-config"),)),
)
