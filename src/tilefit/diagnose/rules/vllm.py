"""vLLM server lines: engine start, model loading, CUDA-graph capture, the API server, the
engine core's death, and the fused-MoE default-config warning (no tuned file for this GPU)."""

from __future__ import annotations

from tilefit.diagnose.events import DEVICE_NAME_FIELD, ENGINE_DIED, FATAL, HINT, MARKER, PROGRESS, Rule

E = "vllm"

RULES = (
    Rule("engine-init", E, PROGRESS, MARKER, "LLM engine (v",
         "(EngineCore_DP0 pid=4123) INFO 10-06 20:01:10 [core.py:76] Initializing a V1 LLM engine (v0.11.0) "
         "with config: model='Qwen/Qwen3-30B-A3B', dtype=torch.bfloat16, tensor_parallel_size=1",
         fields=(("phase", "starting the engine"),)),
    Rule("model-loading", E, PROGRESS, MARKER, "Model loading took",
         "(EngineCore_DP0 pid=4123) INFO 10-06 20:03:40 [gpu_model_runner.py:2602] Model loading took "
         "61.2 GiB and 95.3 seconds", fields=(("phase", "loading weights"),)),
    Rule("kv-cache", E, PROGRESS, MARKER, "Available KV cache memory",
         "(EngineCore_DP0 pid=4123) INFO 10-06 20:04:02 [gpu_worker.py:298] Available KV cache memory: "
         "18.53 GiB", fields=(("phase", "profiling memory"),)),
    Rule("capturing-graphs", E, PROGRESS, MARKER, "Capturing CUDA graph",
         "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  45%|####5     | 30/67 [00:03<00:04,"
         "  8.91it/s]", pattern=r"(?<!\d)(?P<done>\d{1,6})/(?P<total>\d{1,6})(?!\d)", fields=(("phase", "CUDA-graph capture"),)),
    Rule("capturing-model", E, PROGRESS, MARKER, "Capturing the model for CUDA graphs",
         "(VllmWorkerProcess pid=13109) INFO 08-19 07:51:12 model_runner.py:1024] Capturing the model for "
         "CUDA graphs.", fields=(("phase", "CUDA-graph capture"),)),
    Rule("graph-capture-done", E, PROGRESS, MARKER, "Graph capturing finished",
         "(EngineCore_DP0 pid=4123) INFO 10-06 20:04:31 [gpu_model_runner.py:3480] Graph capturing "
         "finished in 29 secs, took 1.02 GiB", fields=(("phase", "CUDA-graph capture done"),)),
    Rule("api-server", E, PROGRESS, MARKER, "Starting vLLM API server",
         "(APIServer pid=4000) INFO 10-06 20:04:35 [api_server.py:1896] Starting vLLM API server 0 on "
         "http://0.0.0.0:8000", fields=(("phase", "starting the API server"),)),
    Rule("engine-init-failed", E, ENGINE_DIED, FATAL, "Engine core initialization failed",
         "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
         pattern=r"^(?:[\w.]+: )?Engine core initialization failed", body=True),
    Rule("proc-died", E, ENGINE_DIED, FATAL, "died unexpectedly",
         "(APIServer pid=4000) ERROR 10-06 20:07:43 [core_client.py:564] Engine core proc EngineCore_DP0 "
         "died unexpectedly, shutting down client."),
    Rule("default-moe-config", E, HINT, MARKER, "Using default MoE config",
         "(EngineCore_DP0 pid=4123) WARNING 10-06 20:04:10 [fused_moe.py:727] Using default MoE config. "
         "Performance might be sub-optimal! Config file not found at ['/vllm/model_executor/layers/"
         "fused_moe/configs/E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json']",
         pattern=DEVICE_NAME_FIELD, fields=(("hint", "default-moe-config"),)),
)
