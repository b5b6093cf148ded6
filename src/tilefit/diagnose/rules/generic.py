"""Rules every engine shares: Python tracebacks, CUDA and NCCL errors, the kernel's OOM killer,
crashes, exit codes, logged ERROR lines, the autotuner's start/end lines (FlashInfer's autotuner
is TensorRT-LLM's, ported; both print them) and uvicorn's readiness lines (sglang, vLLM and
trtllm-serve all serve through uvicorn)."""

from __future__ import annotations

from tilefit.diagnose.events import (
    BENIGN, CRASHED, CUDA_ERROR, CUDA_OOM, ERROR, EXCEPTION, EXIT, FATAL, ILLEGAL_ACCESS,
    ILLEGAL_INSTRUCTION, KILLED, LOGGED_ERROR, MARKER, NCCL, PROGRESS, READY, TRACEBACK, Rule,
)

E = "generic"

# The final line of a traceback: a dotted exception name, then an optional message. It is matched
# against the line with its rank/timestamp/level prefix removed (see parser.strip_prefix).
_ALLOC = r"Tried to allocate (?P<alloc>\d{1,9}(?:\.\d{1,4})? [KMGT]iB)|$"  # size of a CUDA OOM
_EXC = (r"^(?P<exc>(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*)?(?:Error|Exception|Exit|Interrupt|Failure))"
        r"(?::\s*(?P<error>.*))?$")

RULES = (
    Rule("traceback", E, TRACEBACK, MARKER, "Traceback (most recent call last)",
         "[2025-10-06 20:07:41 TP0] Traceback (most recent call last):"),
    Rule("exception-line", E, EXCEPTION, BENIGN, "Error",
         "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356",
         pattern=_EXC, body=True),
    Rule("exception-line-exc", E, EXCEPTION, BENIGN, "Exception",
         "Exception: Capture cuda graph failed", pattern=_EXC, body=True),
    Rule("torch-oom", E, CUDA_OOM, ERROR, "OutOfMemory",
         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
         "capacity of 94.97 GiB of which 1.06 GiB is free.",
         pattern=_ALLOC),
    Rule("cuda-oom-text", E, CUDA_OOM, ERROR, "CUDA out of memory",
         "CUDA out of memory. Tried to allocate 512.00 MiB",
         pattern=_ALLOC),
    Rule("cuda-error-oom", E, CUDA_OOM, ERROR, "CUDA error: out of memory",
         "RuntimeError: CUDA error: out of memory"),
    Rule("illegal-access", E, ILLEGAL_ACCESS, ERROR, "CUDA error: an illegal memory access",
         "RuntimeError: CUDA error: an illegal memory access was encountered"),
    Rule("illegal-address-enum", E, ILLEGAL_ACCESS, ERROR, "ErrorIllegalAddress",
         "Failed: Cuda error /workspace/csrc/moe.cu:123 'cudaErrorIllegalAddress'"),
    Rule("illegal-instruction", E, ILLEGAL_INSTRUCTION, ERROR, "CUDA error: an illegal instruction",
         "torch.AcceleratorError: CUDA error: an illegal instruction was encountered"),
    Rule("illegal-instruction-enum", E, ILLEGAL_INSTRUCTION, ERROR, "ErrorIllegalInstruction",
         "CUDA runtime error: cudaErrorIllegalInstruction at moe_kernels.cu:910"),
    Rule("xid-illegal-instruction", E, ILLEGAL_INSTRUCTION, ERROR, "Illegal Instruction",
         "NVRM: Xid (PCI:0000:01:00): 13, Graphics SM Warp Exception: Illegal Instruction Parameter"),
    Rule("cuda-error", E, CUDA_ERROR, ERROR, "CUDA error: ",
         "RuntimeError: CUDA error: unspecified launch failure",
         pattern=r"CUDA error: (?P<error>[^.\n]{0,200})"),
    Rule("nccl-error", E, NCCL, ERROR, "NCCL error",
         "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
         "NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3",
         pattern=r"NCCL error(?: in: \S{1,300})?,? ?(?P<error>[^(]{0,200})"),
    Rule("nccl-watchdog", E, NCCL, ERROR, "Watchdog caught collective operation timeout",
         "[rank3]:[E1006 20:15:02.123456 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
         "operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
         "Timeout(ms)=600000) ran for 600083 milliseconds before timing out."),
    Rule("nccl-warn", E, LOGGED_ERROR, BENIGN, "NCCL WARN",
         "node1:2345:2400 [3] NCCL INFO misc/socket.cc:50 -> 3 NCCL WARN Net : Connection closed by remote peer"),
    # The shell's job report, a bare "Killed" (the shell of a container), the kernel's OOM killer.
    # Not any line with the word: "Killed 3 idle connections" is no process death.
    Rule("oom-killer", E, KILLED, FATAL, "Killed",
         "/bin/bash: line 1:  2291 Killed                  python3 -m sglang.launch_server",
         pattern=r"^\s*Killed\s*$|(?<!\d)\d{1,9} Killed  |Killed process \d"),
    Rule("sigkill", E, KILLED, FATAL, "SIGKILL",
         "torch.distributed.elastic.multiprocessing.api:[WARNING] Sending process 2291 closing signal SIGKILL",
         pattern=r"(?:Signal 9 \(SIGKILL\) received|signal SIGKILL|killed by SIGKILL)"),
    Rule("segfault", E, CRASHED, FATAL, "Segmentation fault",
         "Segmentation fault (core dumped)"),
    Rule("aborted", E, CRASHED, FATAL, "Aborted",
         "Aborted (core dumped)", pattern=r"(?:^|\s)Aborted(?: \(core dumped\))?\s*$"),
    Rule("fatal-python", E, CRASHED, FATAL, "Fatal Python error",
         "Fatal Python error: Aborted", pattern=r"Fatal Python error: (?P<error>.*)$"),
    Rule("exit-code", E, EXIT, FATAL, "xit",
         "torch.distributed.elastic.multiprocessing.api: exitcode  : -9 (pid: 2291)",
         pattern=r"(?i:\bexit(?:ed)?(?: with)?(?: {0,3}code| {0,3}status)) {0,4}[:=]? {0,4}(?P<code>-?\d{1,12})"),
    Rule("logged-error", E, LOGGED_ERROR, BENIGN, "ERROR",
         "(EngineCore_DP0 pid=4123) ERROR 10-06 20:07:41 [core.py:708] EngineCore failed to start.",
         pattern=r"(?:^|[\s\[\]-])ERROR(?:[\s\]:-]|$)"),
    Rule("uvicorn-startup", E, READY, MARKER, "Application startup complete",
         "(APIServer pid=4000) INFO:     Application startup complete."),
    Rule("uvicorn-running", E, READY, MARKER, "Uvicorn running on",
         "[2025-10-06 20:09:03] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)"),
    Rule("autotune-process", E, PROGRESS, MARKER, "Autotuning process ",
         "2025-10-06 20:04:05,002 - INFO - autotuner.py:262 - flashinfer.jit: [Autotuner]: Autotuning "
         "process starts ...", pattern=r"Autotuning process (?P<step>starts|ends)",
         fields=(("phase", "autotuning"),)),
)
