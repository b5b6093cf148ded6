"""`tilefit diagnose`: read a server or tuning log and say what happened, why, and what to do.

Bytes flow parser (LineScanner: gate, decode, window) -> verdict (Tracker: rules -> events ->
failure classes, pending errors, readiness) -> explain (fit engines, remedies). `diagnose_stream`
does it for a whole stream; `Diagnoser` does it incrementally (for `--follow`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, BinaryIO

# Told the number of bytes just read, as a read goes (a progress display; see Diagnoser.read_file).
Progress = Callable[[int], None]

from tilefit.diagnose.events import DETAIL_LINES
from tilefit.diagnose.explain import Explanation, explain
from tilefit.diagnose.parser import CHUNK, LineScanner
from tilefit.diagnose.rules import RuleSet, default_rules
from tilefit.diagnose.verdict import (
    FATAL, HEALTHY, IN_PROGRESS, RECOVERED, UNKNOWN, VERDICTS, Diagnosis, FailureClass, Tracker,
)

__all__ = ["Diagnoser", "Diagnosis", "Explanation", "FailureClass", "diagnose_stream", "diagnose_bytes",
           "diagnose_file",
           "resolve_target", "VERDICTS", "HEALTHY", "RECOVERED", "FATAL", "IN_PROGRESS", "UNKNOWN"]


def resolve_target(gpu: str | None = None, arch: str | None = None) -> tuple[str | None, str | None]:
    """(gpu key, arch name) from --gpu/--arch; unknown names raise UsageError with suggestions.
    No local-GPU fallback: a log usually comes from another machine."""
    from tilefit.hw.catalog import resolve_target as resolve

    g, a = resolve(gpu, arch, required=False, detect_local=False)
    return (g.key if g else None), (a.name if a else None)


class Diagnoser:
    """Incremental diagnosis: `feed` bytes as they arrive, `result` at any time."""

    def __init__(self, *, gpu: str | None = None, arch: str | None = None, rules: RuleSet | None = None,
                 family_loader: Any = None):
        self.gpu, self.arch = gpu, arch
        self.family_loader = family_loader
        self._start(rules or default_rules())
        self.closed = False
        self._counts: tuple[int, int] | None = None  # (lines, bytes) when read by read_file

    def _start(self, rules: RuleSet) -> None:
        """Fresh reading state (tracker and line scanner) for `rules`."""
        self.tracker = Tracker(rules)
        self.scanner = LineScanner(rules.gate, self.tracker.process, frames=self.tracker.frames,
                                   gates=rules.gates, needs=self.tracker.needs)

    def feed(self, data: bytes) -> None:
        self.scanner.feed(data)

    def close(self) -> None:
        if not self.closed:
            self.scanner.close()
            self.closed = True

    def read_file(self, path: str, *, workers: int | None = None, progress: Progress | None = None) -> None:
        """Read a whole regular file; a large one is gated by `workers` processes (default: see
        parallel.default_workers), with the same result as feeding it serially. `progress`, when
        given, is told the bytes read as the reading goes (they add up to the file's size)."""
        from tilefit.diagnose.parallel import PIECE, default_workers, scan_file

        workers = default_workers() if workers is None else workers
        if workers > 1 and os.path.getsize(path) >= 4 * PIECE:
            from concurrent.futures.process import BrokenProcessPool

            try:
                self._counts = scan_file(path, self.tracker.process, workers=workers,
                                         detail_lines=DETAIL_LINES, gate=self.tracker.rules.gate,
                                         progress=progress)
                self.closed = True
                return
            except (BrokenProcessPool, ImportError, NotImplementedError, PermissionError):
                # No process pool here (a sandbox without semaphores, a killed worker): start
                # over serially with fresh state.
                self._start(self.tracker.rules)
        with open(path, "rb") as f:
            self.read_stream(f, progress=progress)

    def read_stream(self, stream: BinaryIO, chunk: int = CHUNK, *, progress: Progress | None = None) -> None:
        """Feed `stream` to its end in chunks (constant memory), then close; `progress` is told
        each chunk's size."""
        read = stream.read
        while data := read(chunk):
            self.feed(data)
            if progress is not None:
                progress(len(data))
        self.close()

    def result(self, *, explain_it: bool = True) -> Diagnosis:
        """The diagnosis of what was fed so far (an unterminated last line counts once closed)."""
        arch, gpu, source = self.arch, self.gpu, ("given" if self.arch else None)
        lines, nbytes = self._counts or (self.scanner.lines, self.scanner.bytes)
        d = self.tracker.finish(lines, nbytes, arch=arch, gpu=gpu, arch_source=source)
        if d.gpu is None and d.arch is None and "device" in d.hints:
            d.gpu, d.arch, d.arch_source = _gpu_from_device(str(d.hints["device"]))
        if explain_it:
            d.explanations = explain(d, self.family_loader)
        return d


def diagnose_stream(stream: BinaryIO, *, gpu: str | None = None, arch: str | None = None,
                    chunk: int = CHUNK, family_loader: Any = None) -> Diagnosis:
    """Read `stream` to the end in chunks (constant memory) and diagnose it."""
    dg = Diagnoser(gpu=gpu, arch=arch, family_loader=family_loader)
    dg.read_stream(stream, chunk)
    return dg.result()


def diagnose_file(path: str, *, gpu: str | None = None, arch: str | None = None, workers: int | None = None,
                  family_loader: Any = None) -> Diagnosis:
    """Diagnose a regular file (in parallel when it is large; see Diagnoser.read_file)."""
    dg = Diagnoser(gpu=gpu, arch=arch, family_loader=family_loader)
    dg.read_file(path, workers=workers)
    return dg.result()


def diagnose_bytes(data: bytes, **kwargs: Any) -> Diagnosis:
    import io

    return diagnose_stream(io.BytesIO(data), **kwargs)


def _gpu_from_device(device: str) -> tuple[str | None, str | None, str | None]:
    """A vLLM/SGLang config-file device name (NVIDIA_H200) -> catalog GPU, when it is one."""
    from tilefit.errors import UsageError
    from tilefit.hw.catalog import get_gpu

    try:
        g = get_gpu(device.replace("_", " "))
    except UsageError:
        return None, None, None
    return g.key, g.arch.name, "device name in log"
