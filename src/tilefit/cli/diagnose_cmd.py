"""`tilefit diagnose LOG`: what happened in a server or tuning log, why, and what to do.

Exit codes: 0 healthy or recovered, 1 fatal, 3 still in progress or unknown, 2 bad usage.
`--follow` tails a growing file until the verdict is no longer in-progress.
"""

from __future__ import annotations

import argparse
import math
import os
import stat
import sys
import time
import zlib
from typing import Any, BinaryIO

from tilefit.cli.args import add_json_arg, add_target_args, positive_int
from tilefit.errors import UsageError

# Files smaller than this read in about a second: no bar for them.
PROGRESS_FROM = 64 << 20
EXIT_BY_VERDICT = {"healthy": 0, "recovered": 0, "fatal": 1, "in-progress": 3, "unknown": 3}


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {text!r}")
    return v


# A stream that fails mid-read: I/O errors, a truncated or corrupt .gz (zlib.error is not an OSError).
READ_ERRORS = (OSError, EOFError, zlib.error)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diagnose", help="read a server or tuning log: is it dead, why, and what to do",
        description="Diagnose an sglang / vLLM / TensorRT-LLM server log, a FlashInfer autotuner log, a "
                    "Triton tuning run (benchmark_moe, tuning_fused_moe_triton) or a CUTLASS program's "
                    "output. Exit codes: 0 healthy/recovered, 1 fatal, 3 in-progress/unknown, 2 bad usage.")
    p.add_argument("log", metavar="LOG", help="log file (plain or .gz), or - for stdin")
    add_target_args(p, gpu_help="GPU the log came from (sizes failing tiles); default: what the log names")
    add_json_arg(p)
    p.add_argument("--jobs", type=positive_int, metavar="N",
                   help="processes that read a large file (default: one per core, up to 12; at most the CPU "
                        "count)")
    p.add_argument("--follow", action="store_true",
                   help="tail a growing file until the verdict is settled: healthy/recovered at once, fatal at "
                        "a process-end line or once quiet for --settle seconds, unknown once quiet that long")
    p.add_argument("--poll", type=_seconds, default=1.0, metavar="S", help="--follow: seconds between reads")
    p.add_argument("--max-wait", type=_seconds, default=3600.0, metavar="S",
                   help="--follow: give up after this many seconds (0: no limit); default 3600")
    p.add_argument("--settle", type=_seconds, default=10.0, metavar="S",
                   help="--follow: a log that stops at an error with no exit line is fatal, and one with "
                        "nothing recognisable unknown, once quiet this long; default 10")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tilefit.diagnose import Diagnoser, resolve_target
    from tilefit.diagnose.render import as_dict, human

    gpu, arch = resolve_target(args.gpu, args.arch)
    source = "<stdin>" if args.log == "-" else args.log
    dg = Diagnoser(gpu=gpu, arch=arch)
    # Each reader is a process: more than the cores only costs memory.
    jobs = min(args.jobs, os.cpu_count() or 1) if args.jobs else None
    with _open(args.log) as stream:
        if args.follow and args.log != "-":
            _follow(dg, stream, args)
        elif args.log != "-" and getattr(stream, "raw", None) is not None:  # a plain regular file
            try:
                _read_file(dg, args.log, jobs)
            except OSError as e:
                raise UsageError(f"cannot read the log: {e}") from None
        else:
            _read_all(dg, stream)
    dg.close()
    d = dg.result()
    if args.json:
        from tilefit.cli.output import print_json

        print_json(as_dict(d, source))
    else:
        from tilefit.cli.output import show

        show(human(d, source).rstrip("\n"))  # log text escaped: it cannot drive the terminal
    return EXIT_BY_VERDICT[d.verdict]


def _open(path: str) -> Any:
    if path == "-":
        return _NoClose(sys.stdin.buffer)
    shown = path if len(path) <= 120 else path[:60] + "..." + path[-40:]
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UsageError(f"no such log file: {shown!r}; give a file path, or - to read stdin") from None
    except (OSError, ValueError) as e:  # a name too long, a NUL byte, a folder without search permission
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UsageError(f"cannot read {shown!r}: {why}; check the path") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{shown!r} is a directory; give the log file inside it")
    if not stat.S_ISREG(mode):
        # A FIFO without a writer would block open() forever; a device may never end.
        raise UsageError(f"{shown!r} is not a regular file; to read a pipe or device, "
                         f"redirect it to stdin: tilefit diagnose - < {shown}")
    try:
        if path.endswith(".gz"):
            import gzip

            return gzip.open(path, "rb")
        return open(path, "rb")  # noqa: SIM115 - closed by the caller's with-block
    except OSError as e:
        raise UsageError(f"cannot read {shown!r}: {e.strerror or e}; check its permissions") from None


class _NoClose:
    """stdin in a with-block, left open for whoever owns it."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream

    def __enter__(self) -> BinaryIO:
        return self.stream

    def __exit__(self, *exc: object) -> None:
        return None


def _read_file(dg: Any, path: str, jobs: int | None) -> None:
    """Read a regular file, with a bar on a terminal (stderr) for one large enough to take a while."""
    from tilefit.cli.progress import Bar

    size = os.path.getsize(path)
    if size < PROGRESS_FROM:
        dg.read_file(path, workers=jobs)
        return
    with Bar(f"reading {os.path.basename(path)}", size) as bar:
        dg.read_file(path, workers=jobs, progress=bar.advance if bar.live else None)


def _read_all(dg: Any, stream: BinaryIO) -> None:
    from tilefit.diagnose.parser import CHUNK

    try:
        while True:
            data = stream.read(CHUNK)
            if not data:
                return
            dg.feed(data)
    except READ_ERRORS as e:  # a corrupt or truncated .gz, an I/O error mid-file
        raise _read_error(e) from None


def _read_error(e: BaseException) -> UsageError:
    if isinstance(e, zlib.error):
        return UsageError(f"cannot read the log: the compressed data is corrupt ({e}); "
                          "decompress what is readable with `zcat` and diagnose that")
    return UsageError(f"cannot read the log: {e or 'the compressed file ends early'}")


def _follow(dg: Any, stream: BinaryIO, args: argparse.Namespace) -> None:
    """Read what is there, judge, wait, repeat. A fatal verdict needs a process-end line or a quiet
    log (--settle): a traceback may still be arriving when the first error line is read. A log with
    nothing recognisable in it is `unknown` once quiet as long."""
    from tilefit.cli.output import info
    from tilefit.diagnose.parser import CHUNK

    start = last_data = time.monotonic()
    pos = 0
    while True:
        try:
            data = stream.read(CHUNK)
        except READ_ERRORS as e:
            raise _read_error(e) from None
        if data:
            pos += len(data)
            dg.feed(data)
            last_data = time.monotonic()
            continue
        now = time.monotonic()
        d = dg.result(explain_it=False)
        if d.verdict in ("healthy", "recovered"):
            return
        quiet = now - last_data >= args.settle
        if d.verdict == "fatal" and (d.confirmed or quiet):
            return
        if d.verdict == "unknown" and quiet:
            return
        if args.max_wait and now - start >= args.max_wait:
            info(f"tilefit: stopped following after {args.max_wait:g} s; the verdict so far follows")
            return
        if getattr(stream, "raw", None) is not None and os.fstat(stream.fileno()).st_size < pos:
            raise UsageError("the log file shrank while following (rotated or truncated?); "
                             "diagnose the new file")
        time.sleep(args.poll)
