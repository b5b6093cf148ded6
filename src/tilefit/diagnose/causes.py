"""Why a process ended, for a fatal `Diagnosis`: one explanation that names the cause (the most
specific uncaught error, see verdict.py) and a remedy aimed at it, never at "the lines before".
Tile and Triton shared-memory causes are sized in explain.py; everything else is said here.
"""

from __future__ import annotations

from typing import Any

from tilefit.diagnose import events as ev
from tilefit.diagnose.diagnosis import Diagnosis, Explanation
from tilefit.diagnose.events import Event

TEXT = 160

# Exit codes people meet (128 + signal from a shell, -signal from Python's subprocess).
_EXIT_CODES = {
    -9: "SIGKILL: killed, most often by the kernel's OOM killer (host memory) or a supervisor",
    137: "SIGKILL: killed, most often by the kernel's OOM killer (host memory) or a supervisor",
    -11: "SIGSEGV: a segmentation fault", 139: "SIGSEGV: a segmentation fault",
    -6: "SIGABRT: an abort (a failed C++ check or an uncaught C++ exception)",
    134: "SIGABRT: an abort (a failed C++ check or an uncaught C++ exception)",
    -15: "SIGTERM: stopped by another process", 143: "SIGTERM: stopped by another process",
}


def cause(d: Diagnosis, explained: Any) -> Any:
    """The explanation of a fatal diagnosis's cause. `explained(kind)` returns explain.py's
    explanation for kinds it sizes (tiles, Triton OutOfResources), or None."""
    kind = d.cause or "fatal"
    e = d.decisive
    line = e.line if e else None
    where = _where(e)
    phase = f" during {d.phase.rsplit(', line', 1)[0]}" if d.phase else ""
    ended = ""
    if d.ended is not None and e is not None and d.ended is not e:
        ended = f" The process's end is reported at line {d.ended.line} ({_clip(d.ended.text, 90)})."
    elif d.settle:
        ended = " The log stops at it: no line shows the process end."
    skipped = d.failure(ev.TACTIC_SKIPPED)
    caught = (f" The {skipped.survived} tactic failures the autotuner skipped are not the cause."
              if skipped and skipped.survived and not (e is not None and e.kind == ev.TACTIC_SKIPPED) else "")
    tail = ended + caught
    sized = explained(kind)
    if sized is not None:
        return sized
    if kind in ev.STICKY and e is not None and e.fields.get("trap"):
        return Explanation(kind, _sticky(e, line, where, phase) + tail,
                           "the timeout line names the channel and the ranks that waited: find the rank that "
                           "stopped sending (its own log holds the first error), check the links between the "
                           "GPUs (NVLink in a node, RDMA between nodes: ibv_devinfo, NVSHMEM/IBGDA settings); "
                           "restart the process: its CUDA context cannot recover")
    if kind in ev.STICKY:
        return Explanation(kind, _sticky(e, line, where, phase) + tail,
                           "rerun with CUDA_LAUNCH_BLOCKING=1 to find the faulting kernel; if it is an "
                           "autotuned MoE tactic (FlashInfer issue #4841 on SM120), pin the default tactic "
                           "or list the failing ones in FLASHINFER_TACTICS_BLOCKLIST; restart the process: "
                           "its CUDA context cannot recover")
    if kind == ev.CUDA_OOM:
        alloc = f" (it asked for {e.fields['alloc']})" if e is not None and e.fields.get("alloc") else ""
        return Explanation(kind, f"the process ran out of GPU memory{phase} at line {line}{where}{alloc}.{tail}",
                           "leave more memory outside the KV cache: SGLang --mem-fraction-static lower "
                           "(e.g. by 0.05) or --cuda-graph-max-bs smaller; vLLM --gpu-memory-utilization "
                           "lower or --max-num-seqs smaller; or use more GPUs (tilefit plan)")
    if kind == ev.TRITON_CRASH:
        mlir = d.hints.get("mlir_pass")
        lost = (" benchmark_moe writes its config file only after every batch size, so nothing was saved."
                if d.hints.get("tool") == "benchmark_moe" else "")
        return Explanation(kind, f"Triton's compiler crashed{' in pass ' + mlir if mlir else ''} at line "
                           f"{line}; a crash is not OutOfResources, so the sweep did not skip the config "
                           f"but ended.{lost}{tail}",
                           "rerun without that config (or with another Triton version); `tilefit tune` "
                           "runs each config in an isolated worker (a crash costs only that config) and "
                           "journals every result as it goes, so a rerun resumes")
    if kind == ev.NCCL:
        return Explanation(kind, f"a collective failed or timed out at line {line}{where}; other ranks "
                           f"often fail next, so the first rank that failed holds the cause.{tail}",
                           "rerun with NCCL_DEBUG=INFO; check that every rank got past the same step")
    if kind in (ev.CUTLASS_INIT, ev.UNSUPPORTED_TILE):
        return Explanation(kind, f"a CUTLASS tile failure at line {line} was not caught by an autotuner and "
                           f"ended the process; see the tile explanations below.{tail}",
                           "let the autotuner run (it skips such tactics) or choose a tile that fits")
    if kind in (ev.EXCEPTION, ev.ASSERTION):
        return _exception(d, e, kind, line, where, tail)
    return _ending(d, e, kind, line, where, tail)


def _sticky(e: Event | None, line: int | None, where: str, phase: str) -> str:
    text = _clip(e.text) if e else ""
    if e is not None and e.kind == ev.TACTIC_SKIPPED:
        tactic = e.fields.get("tactic")
        return (f"a CUDA error inside an autotuned tactic{' ' + str(tactic) if tactic is not None else ''} at "
                f"line {line}{where}: the autotuner skipped the tactic, but a CUDA error is sticky: it "
                f"poisons the process's CUDA context and every later kernel in that process fails ({text}).")
    if e is not None and e.fields.get("trap"):
        return (f"a {e.fields['trap']} kernel stopped itself with trap(){phase} at line {line}{where} ({text}): "
                f"it prints such a timeout when a peer rank's data never arrives, then traps; a trap is a "
                f"sticky CUDA error, so the process's CUDA context is lost whatever it prints next.")
    return (f"a kernel faulted{phase} at line {line}{where} ({text}); this CUDA error is sticky: the "
            f"process's CUDA context is poisoned, so the process is lost even if it logs progress "
            f"afterwards. CUDA reports a fault at the next synchronising call, so the frame shown may not "
            f"be the faulting kernel.")


def _exception(d: Diagnosis, e: Event | None, kind: str, line: int | None, where: str, tail: str) -> Any:
    exc = (e.fields.get("exc") or e.fields.get("inner") or "exception") if e else "exception"
    message = str(e.fields.get("error") or "").strip() if e else ""
    if not message and e is not None:
        message = _clip(e.text)
    if kind == ev.ASSERTION:
        finding = f"a C++ assertion failed at line {line}{where} and nothing caught it: {_clip(message)}."
        remedy = ("the assertion names the violated condition: check the inputs it tests (engine build vs "
                  "runtime versions, shapes, plugin settings) before rerunning")
    else:
        finding = f"an uncaught {exc} at line {line}{where} ended the process: {_clip(message)}."
        remedy = f"this {exc} is the cause: fix what it says (\"{_clip(message, 100)}\")"
        if exc.endswith("RayTaskError") or "RayTaskError" in (e.text if e else ""):
            remedy = ("a tuning task died; its own exception follows the RayTaskError line: rerun without "
                      "the config it was running, or with `tilefit tune`, which isolates each config")
    return Explanation(kind, finding + tail, remedy)


def _ending(d: Diagnosis, e: Event | None, kind: str, line: int | None, where: str, tail: str) -> Any:
    """The process ended and the log shows no more specific error: say what the end line says and
    where its cause would be."""
    text = _clip(e.text) if e else ""
    look = ("its exception is not in this excerpt: it is the last line of the traceback printed with it "
            "(vLLM prints the engine core's traceback above 'Engine core initialization failed'; sglang "
            "prints it right after '... hit an exception'); diagnose an excerpt that includes it")
    if kind == ev.KILLED:
        return Explanation(kind, f"the process was killed at line {line}{where}: {text}.{tail}",
                           "a bare 'Killed' is most often the kernel's OOM killer (host memory): check "
                           "`dmesg | grep -i oom`, lower host-memory use (fewer workers, smaller "
                           "--max-model-len / swap space), or see which supervisor sent SIGKILL")
    if kind == ev.EXIT:
        code = e.fields.get("code") if e else None
        meaning = _EXIT_CODES.get(code) if isinstance(code, int) else None
        return Explanation(kind, f"a process exited with code {code}{' (' + meaning + ')' if meaning else ''} "
                           f"at line {line}{where}.{tail}",
                           f"the error that made it exit comes before line {line}; {look}" if not meaning
                           or "SIGKILL" not in meaning else "check host memory (`dmesg | grep -i oom`)")
    if kind == ev.CRASHED:
        return Explanation(kind, f"the process crashed at line {line}{where}: {text}.{tail}",
                           "a C++ abort or segfault: the lines just above it name the exception or the "
                           "signal; rerun with CUDA_LAUNCH_BLOCKING=1 if a kernel is involved")
    if kind == ev.UNCAUGHT:
        return Explanation(kind, f"a traceback starting at line {line}{where} reached the process's outermost "
                           f"frame, so the exception was never caught and the process exited.{tail}",
                           f"{look}")
    return Explanation(kind, f"the engine process ended at line {line}{where}: {text}.{tail}", look)


def _where(e: Event | None) -> str:
    return f" ({e.rank})" if e is not None and e.rank else ""


def _clip(text: str, n: int = TEXT) -> str:
    text = " ".join(str(text).split()).rstrip(".")
    return text if len(text) <= n else text[:n - 3] + "..."
