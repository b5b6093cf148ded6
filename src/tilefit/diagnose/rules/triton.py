"""Triton lines: the launch-time shared-memory check (OutOfResources), compiler crashes (MLIR pass
failures, `PassManager::run failed`), and the fused-MoE tuning scripts people run (vLLM's
benchmark_moe.py --tune, SGLang's tuning_fused_moe_triton.py), which print per-batch-size progress
and write the best config at the very end."""

from __future__ import annotations

from tilefit.diagnose.events import (
    DEVICE_NAME_FIELD, ERROR, EXCEPTION, HINT, MARKER, PROGRESS, READY, TRITON_CRASH,
    TRITON_OOR, Rule,
)
from tilefit.diagnose.lineshape import BENCHMARK_PHASE

E = "triton"

RULES = (
    Rule("out-of-resources", E, TRITON_OOR, ERROR, "Hardware limit: ",
         "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 147456, "
         "Hardware limit: 101376. Reducing block sizes or `num_stages` may help.",
         pattern=r"(?P<resource>[a-z]{1,12}(?: [a-z]{1,12}){0,2}), Required: (?P<required>\d{1,12}), "
                 r"Hardware limit: (?P<limit>\d{1,12})"),
    # Re-raised without "out of resource:", or cut before the limit.
    Rule("out-of-resources-name", E, TRITON_OOR, ERROR, "OutOfResources",
         "triton.runtime.errors.OutOfResources: shared memory, Required: 147456, Hardware limit: 101376",
         pattern=r"OutOfResources:(?: out of resource:)? ?(?P<resource>[a-z]{1,12}(?: [a-z]{1,12}){0,2})?"
                 r"(?:, Required: (?P<required>\d{1,12}))?"),
    # The tuning scripts run each batch size as a Ray task; a task that died re-raises here.
    Rule("ray-task-error", E, EXCEPTION, ERROR, "RayTaskError",
         "ray.exceptions.RayTaskError(RuntimeError): ray::BenchmarkWorker.tune() (pid=2279, ip=10.0.0.2, "
         "actor_id=4c2f, repr=<benchmark_moe.BenchmarkWorker object at 0x7f8e>)",
         pattern=r"RayTaskError(?:\((?P<inner>\w{1,80})\))?"),
    Rule("passmanager", E, TRITON_CRASH, ERROR, "PassManager::run failed",
         "RuntimeError: PassManager::run failed"),
    Rule("compilation-error", E, TRITON_CRASH, ERROR, "CompilationError",
         "triton.compiler.errors.CompilationError: at 42:18:"),
    Rule("mlir-failures", E, HINT, MARKER, "Failures have been detected while processing an MLIR",
         "/vllm/model_executor/layers/fused_moe/fused_moe.py:312:0: error: Failures have been detected "
         "while processing an MLIR pass pipeline", fields=(("hint", "mlir-failure"),)),
    Rule("mlir-pipeline", E, HINT, MARKER, "Pipeline failed while executing",
         "/vllm/model_executor/layers/fused_moe/fused_moe.py:312:0: note: Pipeline failed while executing "
         "[`TritonGPUPipeline` on 'builtin.module' operation]: reproducer generated at `/tmp/repro.mlir`",
         pattern=r"executing \[`(?P<mlir_pass>[^`]{1,120})`", fields=(("hint", "mlir-failure"),)),
    Rule("tune-start", E, PROGRESS, MARKER, "Start tuning over",
         "Start tuning over 1920 configurations...",
         pattern=r"Start tuning over (?P<configs>\d{1,9}) configurations", fields=(("phase", "tuning sweep"),)),
    Rule("tune-batch-done", E, PROGRESS, MARKER, "Completed tuning for batch_size=",
         "Mon Oct  6 20:31:07 2025] Completed tuning for batch_size=16",
         pattern=r"batch_size=(?P<bs>\d{1,9})", fields=(("phase", "tuning sweep"),)),
    # Without --tune the same scripts time the configs they would run and print, batch by batch,
    # "Batch size: N, config: {...}" then "Kernel time: X us" (vLLM's benchmark_moe.py and SGLang's
    # tuning_fused_moe_triton.py, the benchmark branch of main()).
    Rule("bench-kernel-time", E, PROGRESS, MARKER, "Kernel time: ",
         "Kernel time: 31.70 us", pattern=r"Kernel time: (?P<us>\d{1,9}(?:\.\d{1,4})?) us",
         fields=(("phase", BENCHMARK_PHASE),)),
    Rule("tune-written", E, READY, MARKER, "Writing best config to",
         "Writing best config to E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition,"
         "dtype=fp8_w8a8,block_shape=[128,128].json...",
         pattern=DEVICE_NAME_FIELD, fields=(("phase", "tuning done"),)),
    Rule("triton-autotune", E, PROGRESS, MARKER, "Triton autotuning for function",
         "Triton autotuning for function fused_moe_kernel finished after 41.20s; best config selected: "
         "BLOCK_SIZE_M: 64, BLOCK_SIZE_N: 128, BLOCK_SIZE_K: 128, GROUP_SIZE_M: 1, num_warps: 4, "
         "num_ctas: 1, num_stages: 3", fields=(("phase", "Triton autotuning"),)),
)
