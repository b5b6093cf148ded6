"""FlashInfer autotuner lines. Up to 0.6.7 it logs one WARNING per failed tactic ("Skipping tactic
... due to failure while profiling: <error>", the error's backtrace on the following lines); from
0.6.8 those move to DEBUG and one INFO line per op says "Skipped N unsupported tactic(s)"."""

from __future__ import annotations

from tilefit.diagnose.events import BENIGN, MARKER, PROGRESS, TACTIC_SKIPPED, Rule

E = "flashinfer"

RULES = (
    Rule("skipping-tactic", E, TACTIC_SKIPPED, BENIGN, "Skipping tactic",
         "2025-10-06 20:04:12,301 - WARNING - autotuner.py:484 - flashinfer.jit: [Autotuner]: Skipping "
         "tactic <flashinfer.fused_moe.core.get_cutlass_fused_moe_module.<locals>.MoERunner object at "
         "0x7f2c5d1e3a90> 14, due to failure while profiling: [TensorRT-LLM][ERROR] Assertion failed: "
         "Failed to initialize cutlass TMA WS grouped gemm. Error: Error Internal",
         pattern=r"Skipping tactic (?P<runner>.{0,300}?) (?P<tactic>-?\d{1,9}|\([^()]{0,80}\)),? due to "
                 r"failure(?: while profiling)?:? ?(?P<error>.{0,400})",
         window=40),
    Rule("skipped-unsupported", E, TACTIC_SKIPPED, BENIGN, "Skipped ",
         "2026-05-01 17:59:08,205 - INFO - autotuner.py:833 - flashinfer.jit: [Autotuner]: Skipped 4 "
         "unsupported tactic(s) for trtllm::fused_moe::gemm1 (enable debug logs to see details)",
         pattern=r"Skipped (?P<count>\d{1,9}) unsupported tactic\(s\)(?: for (?P<op>\S{1,120}))?"),
    Rule("tuning-progress", E, PROGRESS, MARKER, "AutoTuner]: Tuning ",
         "[AutoTuner]: Tuning trtllm::fused_moe::gemm1:  50%|#####     | 5/10 [00:01<00:01, 4.2profile/s]",
         pattern=r"Tuning (?P<op>[^\s:]{1,120}):", fields=(("phase", "FlashInfer autotuning"),)),
)
