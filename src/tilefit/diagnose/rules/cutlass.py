"""CUTLASS lines, as TensorRT-LLM's MoE launchers (inside FlashInfer) and plain CUTLASS programs
print them: a TMA warp-specialized grouped GEMM that failed to initialize (the launch asked for more
shared memory than the arch allows), tile configs with no dispatch case, and the example programs'
`Got cutlass error`. The failing tile itself is read from the backtrace lines that follow
(see parser.detail_fields)."""

from __future__ import annotations

from tilefit.diagnose.events import BENIGN, CUTLASS_INIT, ERROR, UNSUPPORTED_TILE, Rule

E = "cutlass"

RULES = (
    Rule("tma-ws-init", E, CUTLASS_INIT, BENIGN, "Failed to initialize cutlass TMA WS grouped gemm",
         "RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: Failed to initialize cutlass TMA WS "
         "grouped gemm. Error: Error Internal (/flashinfer/data/csrc/nv_internal/tensorrt_llm/kernels/"
         "cutlass_kernels/moe_gemm/launchers/moe_gemm_tma_ws_launcher.inl:1093)",
         pattern=r"Error: (?P<status>Error(?: [A-Za-z]{1,24}){1,6})(?![A-Za-z])", window=40),
    Rule("unsupported-tile-config", E, UNSUPPORTED_TILE, BENIGN, "Unsupported tile shape config",
         "RuntimeError: [TensorRT-LLM][ERROR] Unsupported tile shape config 128128256 for MoE gemm. "
         "(/flashinfer/data/csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/"
         "moe_gemm_template_dispatch_tma_ws.h:512)",
         pattern=r"Unsupported tile shape config (?P<tile_enum>\d{1,12})", window=40),
    Rule("unsupported-tile-cluster", E, UNSUPPORTED_TILE, BENIGN, "Unsupported tile (",
         "[TensorRT-LLM][ERROR] Assertion failed: Unsupported tile (128, 256, 128) and cluster (1, 1, 1) "
         "shape combination for arch 120.",
         pattern=r"Unsupported tile \((?P<tile_text>[^)]{0,40})\) and cluster \((?P<cluster>[^)]{0,40})\) "
                 r"shape combination for arch (?P<arch_cc>\d{2,3})", window=40),
    Rule("got-cutlass-error", E, CUTLASS_INIT, ERROR, "Got cutlass error",
         "Got cutlass error: Error Internal at: 412",
         pattern=r"Got cutlass error: (?P<status>[A-Za-z]{1,24}(?: [A-Za-z]{1,24}){0,6}) at: (?P<at>\d{1,9})"),
)
