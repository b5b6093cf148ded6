"""Rules every engine shares: Python tracebacks, CUDA and NCCL errors, the kernel's OOM killer,
crashes, exit reports, logged ERROR/FATAL lines, the autotuner's start/end lines (FlashInfer's
autotuner is TensorRT-LLM's, ported; both print them) and the HTTP server's lines (sglang, vLLM and
trtllm-serve all serve through uvicorn; an answered request means the server is up).

Severity says what a line means for its process: FATAL lines end it (a death report, an exit code,
a traceback that reached the process's outermost frame); ERROR lines end it unless the same process
shows progress afterwards; the sticky CUDA kinds (events.STICKY) end it whatever follows.
Patterns match the stable part of a line: pasted logs are often cut mid-line.
"""

from __future__ import annotations

from tilefit.diagnose.events import (
    ASSERTION, BENIGN, CRASHED, CUDA_ERROR, CUDA_OOM, ENGINE_DIED, ERROR, EXCEPTION, EXIT, FATAL, HINT,
    ILLEGAL_ACCESS, ILLEGAL_INSTRUCTION, KILLED, LOGGED_ERROR, MARKER, NCCL, PROGRESS, READY, TRACEBACK,
    SERVING, UNCAUGHT, Rule,
)

E = "generic"

# The final line of a traceback: a dotted exception name, then an optional message. It is matched
# against the line with its rank/timestamp/level prefix removed (see prefixes.peel).
_ALLOC = r"Tried to allocate (?P<alloc>\d{1,9}(?:\.\d{1,4})? [KMGT]iB)|$"  # size of a CUDA OOM


def _not_a_tally(name: str) -> str:
    """A line that is not `<name>: <count>`: summaries of finished runs tally errors by type
    ("OutOfMemoryError: 2" in a collector's report) without any of them happening there."""
    return rf"^(?!.*\b{name}\w{{0,20}}:\s{{0,4}}\d{{1,12}}\s*$)"

_EXC = (r"^(?P<exc>(?:[A-Za-z_]\w{0,80}\.){0,8}(?:[A-Za-z_]\w{0,80})?(?:Error|Exception|Exit|Interrupt|"
        r"Failure))(?::\s{0,4}(?P<error>.{0,400}))?$")

_VERSION = (r"(?i:(?P<tool>flashinfer|sglang|vllm|tensorrt[-_ ]?llm|triton|cuda))(?:[-_]python)?"
            r"(?: API server)? (?i:version)[: =]{1,3}v?(?P<version>\d{1,3}\.\d{1,3}(?:\.\d{1,4})?"
            r"(?:[.+-]?(?:post|rc|dev|a|b)\d{1,4})?)")

RULES = (
    Rule("traceback", E, TRACEBACK, MARKER, "Traceback (most recent call last)",
         "[2025-10-06 20:07:41 TP0] Traceback (most recent call last):"),
    Rule("exception-line", E, EXCEPTION, BENIGN, "Error",
         "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356",
         pattern=_EXC, body=True),
    Rule("exception-line-exc", E, EXCEPTION, BENIGN, "Exception",
         "Exception: Capture cuda graph failed", pattern=_EXC, body=True),
    # Python prints an uncaught exception's traceback from the outermost frame: the interpreter's
    # (runpy's _run_module_as_main, a script's <module>) or a multiprocessing child's _bootstrap.
    Rule("uncaught-main", E, UNCAUGHT, FATAL, "_run_module_as_main",
         '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main'),
    Rule("uncaught-script", E, UNCAUGHT, FATAL, "<module>",
         '(APIServer pid=161582)   File "/venv/bin/vllm", line 10, in <module>',
         pattern=r"^\s{0,8}File \"[^\"]{1,400}\", line \d{1,7}, in <module>$", body=True),
    # multiprocessing prints "Process <name>:" and then the traceback of a child that died.
    Rule("child-died", E, UNCAUGHT, FATAL, "Process ",
         "(VllmWorker rank=7 pid=1030) Process SpawnProcess-1:8:",
         pattern=r"^Process [A-Za-z_][\w.-]{0,60}(?::\d{1,4})*:$", body=True),
    Rule("uncaught-child", E, UNCAUGHT, FATAL, "_bootstrap",
         '(EngineCore pid=77)   File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
         pattern=r"multiprocessing[/\\]process\.py\", line \d{1,6}, in _bootstrap$"),
    Rule("torch-oom", E, CUDA_OOM, ERROR, "OutOfMemory",
         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
         "capacity of 94.97 GiB of which 1.06 GiB is free.",
         pattern=_not_a_tally("OutOfMemory") + r"(?:.*?Tried to allocate (?P<alloc>\d{1,9}(?:\.\d{1,4})? "
                 r"[KMGT]iB)|)"),
    # "CUDA out of memory", "CUDA error: out of memory", "CUDA driver error: out of memory",
    # "cudaErrorMemoryAllocation: out of memory"
    Rule("driver-oom", E, CUDA_OOM, ERROR, "CUDA driver error: out of memory",
         "RuntimeError: CUDA driver error: out of memory"),
    Rule("alloc-enum", E, CUDA_OOM, ERROR, "ErrorMemoryAllocation",
         "RuntimeError: CUDA runtime error: cudaErrorMemoryAllocation: out of memory"),
    Rule("cuda-oom-text", E, CUDA_OOM, ERROR, "CUDA out of memory",
         "CUDA out of memory. Tried to allocate 512.00 MiB", pattern=_ALLOC),
    # Illegal memory access / instruction: (rule, kind, needle, pattern, an example line). Needles
    # start with a capital: the chunk gate stops at each occurrence of a needle's first byte, and
    # lowercase letters are everywhere in a log.
    *(Rule(name, E, kind, ERROR, needle, example, pattern=pattern) for name, kind, needle, pattern, example in (
        ("illegal-access", ILLEGAL_ACCESS, "CUDA error: an illegal memory access", None,
         "RuntimeError: CUDA error: an illegal memory access was encountered"),
        ("illegal-access-runtime", ILLEGAL_ACCESS, "CUDA runtime error", r"illegal memory access",
         "[TensorRT-LLM][ERROR] CUDA runtime error in cudaMemsetAsync(ptr, 0x0, size, stream): an illegal "
         "memory access was encountered"),
        # CUDACHECK's form (see cudacheck-exit below): the message in quotes.
        ("illegal-access-cudacheck", ILLEGAL_ACCESS, "Failed: Cuda error", r"illegal memory access",
         "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'an illegal memory access was encountered'"),
        ("illegal-instruction-cudacheck", ILLEGAL_INSTRUCTION, "Failed: Cuda error", r"illegal instruction",
         "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'an illegal instruction was encountered'"),
        ("illegal-address-enum", ILLEGAL_ACCESS, "ErrorIllegalAddress", None,
         "Failed: Cuda error /workspace/csrc/moe.cu:123 'cudaErrorIllegalAddress'"),
        ("illegal-instruction", ILLEGAL_INSTRUCTION, "CUDA error: an illegal instruction", None,
         "torch.AcceleratorError: CUDA error: an illegal instruction was encountered"),
        ("illegal-instruction-runtime", ILLEGAL_INSTRUCTION, "CUDA runtime error", r"illegal instruction",
         "[TensorRT-LLM][ERROR] CUDA runtime error in cudaStreamSynchronize(stream): an illegal instruction "
         "was encountered"),
        ("illegal-instruction-enum", ILLEGAL_INSTRUCTION, "ErrorIllegalInstruction", None,
         "CUDA runtime error: cudaErrorIllegalInstruction at moe_kernels.cu:910"),
        ("xid-illegal-instruction", ILLEGAL_INSTRUCTION, "Illegal Instruction", None,
         "NVRM: Xid (PCI:0000:01:00): 13, Graphics SM Warp Exception: Illegal Instruction Parameter"),
    )),
    Rule("cuda-error", E, CUDA_ERROR, ERROR, "CUDA error: ",
         "RuntimeError: CUDA error: unspecified launch failure",
         pattern=r"CUDA error: (?P<error>[^.\n]{0,200})"),
    Rule("misaligned", E, CUDA_ERROR, ERROR, "ErrorMisalignedAddress",
         "CUDA runtime error: cudaErrorMisalignedAddress at moe_kernels.cu:910"),
    Rule("accelerator-error", E, CUDA_ERROR, ERROR, "AcceleratorError",
         "torch.AcceleratorError: CUDA error: device-side assert triggered",
         pattern=_not_a_tally("AcceleratorError")),
    # The CUDACHECK macro of vLLM's custom all-reduce (csrc/custom_all_reduce.cuh; its format string is in
    # vllm 0.11.0's _C.abi3.so and 0.33.0's _C_stable_libtorch.abi3.so) prints "Failed: Cuda error
    # <file>:<line> '<cudaGetErrorString>'" and then calls exit(EXIT_FAILURE): the process ends there.
    Rule("cudacheck-exit", E, EXIT, FATAL, "Failed: Cuda error",
         "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'an illegal memory access was encountered'",
         pattern=r"Failed: Cuda error \S{1,300}:\d{1,7} '(?P<error>[^']{0,200})", fields=(("code", 1),)),
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
         pattern=r"^\s*Killed\s*$|(?<!\d)\d{1,9} Killed  |Killed process \d|^Killed\b"),
    Rule("actor-died", E, ENGINE_DIED, FATAL, "ActorDiedError",
         "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."),
    Rule("sigkill", E, KILLED, FATAL, "SIGKILL",
         "torch.distributed.elastic.multiprocessing.api:[WARNING] Sending process 2291 closing signal SIGKILL",
         pattern=r"\bSIGKILL\b|status=9/KILL|code=killed"),
    Rule("systemd-killed", E, KILLED, FATAL, "=killed",
         "systemd[1]: vllm.service: Main process exited, code=killed, status=9/KILL"),
    # systemd's "Failed to start x.service" (vLLM's "EngineCore failed to start." is in vllm.py).
    Rule("failed-to-start", E, ENGINE_DIED, FATAL, "Failed to start",
         "Failed to start vllm.service - vLLM OpenAI server.", pattern=r"\bFailed to start\b"),
    Rule("segfault", E, CRASHED, FATAL, "Segmentation fault",
         "Segmentation fault (core dumped)"),
    Rule("signal", E, CRASHED, FATAL, "SIG",
         "*** SIGSEGV (@0x0) received by PID 4123 (TID 0x7f3c) from PID 0; stack trace: ***",
         pattern=r"\bSIG(?:SEGV|ABRT|BUS|FPE|ILL)\b"),
    # Open MPI's signal handler (opal/util/stacktrace.c): "[host:pid] *** Process received signal
    # ***", the signal and a backtrace, then "[host:pid] *** End of error message ***"; it then
    # re-raises the signal with the default action, which ends the rank (mpirun, trtllm-serve's ranks).
    *(Rule(name, E, CRASHED, FATAL, needle, example) for name, needle, example in (
        ("mpi-signal", "*** Process received signal ***",
         "[node1:219487] *** Process received signal ***"),
        ("mpi-signal-end", "*** End of error message ***",
         "[node1:219487] *** End of error message ***"),
    )),
    # apache-tvm-ffi's SIGSEGV handler (FlashInfer's and SGLang's FFI; src/ffi/backtrace.cc l.150-164
    # in 0.1.11): the banner, a backtrace of `File "<unknown>", line 0, in ...` frames, then the
    # signal re-raised with the default action, which ends the process.
    Rule("tvm-ffi-segfault", E, CRASHED, FATAL, "Segfault encountered",
         "!!!!!!! Segfault encountered !!!!!!!"),
    Rule("core-dumped", E, CRASHED, FATAL, "(core dumped)",
         "Aborted (core dumped)"),
    Rule("aborted", E, CRASHED, FATAL, "Aborted",
         "Aborted", pattern=r"(?:^|\s)Aborted(?: \(core dumped\))?\s{0,8}$"),
    Rule("terminate", E, CRASHED, FATAL, "terminate called",
         "terminate called after throwing an instance of 'std::runtime_error'"),
    Rule("fatal-python", E, CRASHED, FATAL, "Fatal Python error",
         "Fatal Python error: Aborted", pattern=r"Fatal Python error: (?P<error>.{0,300})"),
    # TensorRT-LLM's TLLM_CHECK: thrown as an exception; fatal only when nothing catches it.
    Rule("assertion", E, ASSERTION, ERROR, "Assertion failed",
         "[TensorRT-LLM][ERROR] Assertion failed: d == a + length (/app/tensorrt_llm/cpp/tensorrt_llm/"
         "plugins/gptAttentionCommon/gptAttentionCommon.cpp:320)",
         pattern=r"Assertion failed: ?(?P<error>.{0,300})", window=40),
    Rule("exit-code", E, EXIT, FATAL, "xit",
         "torch.distributed.elastic.multiprocessing.api: exitcode  : -9 (pid: 2291)",
         pattern=r"(?i:\bexit(?:ed)?(?: early| unexpectedly)?(?: with)?(?: {0,3}code| {0,3}status))"
                 r" {0,4}[:=]? {0,4}(?P<code>-?\d{1,12})"),
    # A logger's FATAL level (glog "F1006", Go, ninfer): the program says it stops.
    Rule("fatal-level", E, ENGINE_DIED, FATAL, "FATAL",
         "2026-09-06 12:21:46.017  FATAL server failed during startup | artifact object was not consumed",
         pattern=r"(?:^|[\s\[|])FATAL(?:[\s\]:|]|$)"),
    Rule("logged-error", E, LOGGED_ERROR, BENIGN, "ERROR",
         "(EngineCore_DP0 pid=4123) ERROR 10-06 20:07:41 [core.py:708] EngineCore failed to start.",
         pattern=r"(?:^|[\s\[\]-])ERROR(?:[\s\]:-]|$)"),
    # uvicorn: sglang prints these before its own warmup is done (its ready line is "fired up"); vLLM
    # and trtllm-serve only once the engine is up. The tracker demotes them to progress for sglang.
    Rule("uvicorn-startup", E, READY, MARKER, "Application startup complete",
         "(APIServer pid=4000) INFO:     Application startup complete.", fields=(("weak", True),)),
    Rule("uvicorn-running", E, READY, MARKER, "Uvicorn running on",
         "[2025-10-06 20:09:03] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
         fields=(("weak", True),)),
    # An answered request (uvicorn's access log): the server is up, whatever the status code.
    Rule("http-served", E, READY, MARKER, " HTTP/1.",
         '[2025-10-06 20:09:07] INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
         pattern=r'"(?:GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH) /\S{0,300} HTTP/1\.[01]" \d{3}',
         fields=(("phase", "serving"),), tier=SERVING),
    # Versions a log prints ("FlashInfer version: 0.6.8", "vLLM API server version 0.11.0", "CUDA
    # Version: 12.8", "TensorRT-LLM version: 0.20.0"): tactic ids and kernel lists are per version.
    Rule("version", E, HINT, MARKER, "version",
         "(APIServer pid=4000) INFO 10-06 20:01:02 [api_server.py:1839] vLLM API server version 0.11.0",
         pattern=_VERSION, fields=(("hint", "version"),)),
    Rule("version-uc", E, HINT, MARKER, "Version",
         "| NVIDIA-SMI 570.86.15    Driver Version: 570.86.15    CUDA Version: 12.8     |",
         pattern=_VERSION, fields=(("hint", "version"),)),
    Rule("autotune-process", E, PROGRESS, MARKER, "Autotuning process ",
         "2025-10-06 20:04:05,002 - INFO - autotuner.py:262 - flashinfer.jit: [Autotuner]: Autotuning "
         "process starts ...", pattern=r"Autotuning process (?P<step>starts|ends)",
         fields=(("phase", "autotuning"),)),
)
