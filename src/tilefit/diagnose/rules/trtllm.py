"""TensorRT-LLM lines: its own autotuner's per-tactic failures, and the C++ and Python loggers'
error lines ([TensorRT-LLM][ERROR], [TRT-LLM] [E]) whose backtraces follow on the next lines."""

from __future__ import annotations

from tilefit.diagnose.events import BENIGN, LOGGED_ERROR, TACTIC_SKIPPED, Rule

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
    Rule("py-error", E, LOGGED_ERROR, BENIGN, "TRT-LLM] [E]",
         "[10/06/2025-20:07:41] [TRT-LLM] [E] Failed to initialize executor on rank 0: CUDA out of memory"),
)
