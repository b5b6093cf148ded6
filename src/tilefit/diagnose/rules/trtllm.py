"""TensorRT-LLM lines: its own autotuner's per-tactic failures, and the C++ and Python loggers'
error lines ([TensorRT-LLM][ERROR], [TRT-LLM] [E]) whose backtraces follow on the next lines."""

from __future__ import annotations

from tilefit.diagnose.events import (
    ACTIVITY, BENIGN, ENGINE_DIED, FATAL, LOGGED_ERROR, MARKER, NO_CONFIG, PROGRESS, TACTIC_SKIPPED, Rule,
)

E = "trtllm"

RULES = (
    Rule("autotuner-profile-failed", E, TACTIC_SKIPPED, BENIGN, "Failed when profiling runner=",
         "[10/06/2025-20:04:12] [TRT-LLM] [W] [Autotuner] Failed when profiling runner="
         "<tensorrt_llm._torch.custom_ops.torch_custom_ops.MoERunner object at 0x7f3a1c2b5e10>, "
         "tactic=14, shapes=[torch.Size([256, 3072]), torch.Size([128, 6144, 1536])]. "
         "Set TLLM_LOG_LEVEL=DEBUG for more details.",
         pattern=r"runner=(?P<runner>.{0,300}?), tactic=(?P<tactic>-?\d{1,9}|\([^()]{0,80}\))", window=40),
    Rule("cpp-error", E, LOGGED_ERROR, BENIGN, "TensorRT-LLM][ERROR]",
         "[TensorRT-LLM][ERROR] Assertion failed: Failed to initialize cutlass TMA WS grouped gemm. "
         "Error: Error Internal (/src/moe_gemm_tma_ws_launcher.inl:1093)", window=40),
    # Any info line of TensorRT-LLM's Python logger ("[TRT-LLM] [I]") or C++ logger
    # ("[TensorRT-LLM][INFO]") shows the engine at work: evidence that it is starting, never proof
    # that an error before it was survived.
    Rule("py-info", E, PROGRESS, MARKER, "[TRT-LLM] [I]",
         "[05/27/2025-21:12:36] [TRT-LLM] [I] Creating CUDA graph instances for 196 batch sizes.",
         fields=(("activity", True),), tier=ACTIVITY),
    Rule("cpp-info", E, PROGRESS, MARKER, "[TensorRT-LLM][INFO]",
         "[TensorRT-LLM][INFO] Loaded engine size: 15448 MiB", fields=(("activity", True),),
         tier=ACTIVITY),
    # The defaults the Triton backend fills in while a model instance initialises, logged as
    # warnings by the same C++ logger ("[TensorRT-LLM][WARNING] max_beam_width is not specified,
    # will use default value of 1", "kv_cache_onboard_blocks not set, defaulting to true"): the
    # engine at work. Other warnings are not (the GEMM profiler's "Have not found any valid GEMM
    # config" is its own class, and comes before runs that go on and runs that abort alike).
    Rule("cpp-default-notice", E, PROGRESS, MARKER, "[TensorRT-LLM][WARNING]",
         "[TensorRT-LLM][WARNING] max_beam_width is not specified, will use default value of 1",
         pattern=r"\[TensorRT-LLM\]\[WARNING\] \w{1,80} (?:is not specified, will|not set, defaulting)",
         fields=(("activity", True),), tier=ACTIVITY),
    # Triton Inference Server loading a model: each backend logs its TRITONBACKEND_ModelInitialize /
    # ModelInstanceInitialize entry points (the backend API of triton-inference-server/backend;
    # tensorrtllm_backend's libtensorrtllm.cc, the python backend's python_be.cc), glog-prefixed.
    Rule("triton-server-model-init", E, PROGRESS, MARKER, "TRITONBACKEND_Model",
         'I0130 02:01:55.151129 527 libtensorrtllm.cc:114] "TRITONBACKEND_ModelInitialize: '
         'tensorrt_llm (version 1)"', fields=(("activity", True),), tier=ACTIVITY),
    Rule("version", E, PROGRESS, MARKER, "TensorRT-LLM version: ",
         "[TensorRT-LLM] TensorRT-LLM version: 0.20.0rc3",
         pattern=r"TensorRT-LLM version: (?P<trtllm_version>\d{1,3}\.\d{1,3}[\w.+-]{0,40})",
         fields=(("phase", "starting the engine"),)),
    # The same banner (tensorrt_llm/__init__.py) spelt without the hyphen in later releases: "[TensorRT-LLM]
    # TensorRT LLM version: 1.2.0rc2" (NVIDIA/TensorRT-LLM#9680; the file at commit c40f115).
    Rule("version-unhyphenated", E, PROGRESS, MARKER, "TensorRT LLM version: ",
         "[TensorRT-LLM] TensorRT LLM version: 1.2.0rc2",
         pattern=r"TensorRT LLM version: (?P<trtllm_version>\d{1,3}\.\d{1,3}[\w.+-]{0,40})",
         fields=(("phase", "starting the engine"),)),
    Rule("executor-init-failed", E, ENGINE_DIED, FATAL, "Failed to initialize executor",
         "[05/27/2025-21:12:36] [TRT-LLM] [E] Failed to initialize executor on rank 3: [TensorRT-LLM][ERROR] "
         "CUDA runtime error in cudaMemsetAsync(...): an illegal memory access was encountered"),
    Rule("no-valid-config", E, NO_CONFIG, BENIGN, "Have not found any valid",
         "[TensorRT-LLM][WARNING] Have not found any valid GEMM config for shape (m=1, n=4096, k=4096). "
         "Will try to use default or fail at runtime"),
    Rule("py-error", E, LOGGED_ERROR, BENIGN, "TRT-LLM] [E]",
         "[10/06/2025-20:07:41] [TRT-LLM] [E] Failed to initialize executor on rank 0: CUDA out of memory"),
)
