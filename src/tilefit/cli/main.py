"""Entry point: builds the argument parser from the command modules and maps errors to exit codes.

Each command module exposes `register(subparsers)`, which adds its parser and sets `func`
to a callable `(args) -> int`. Command modules are imported here, but each keeps its own heavy
imports inside the function that runs it, so `tilefit --help` and `tilefit plan` stay fast.
`main` is the one guard: a TilefitError is one line and its code; anything unexpected is one line,
exit 70 and a traceback file, so a script never mistakes a crash for a finding (exit 1).
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from tilefit import __version__
from tilefit.errors import TilefitError, UsageError

# Exit codes (STYLE.md): 0 ok, 1 a finding, 2 bad usage/input/IO, 3 diagnose: no verdict yet,
# 70 a bug in tilefit (EX_SOFTWARE of BSD's sysexits.h), 130 interrupted (128 + SIGINT).
EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 70, 130


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are UsageErrors (one line, exit 2, JSON with --json), and whose
    help prints defaults as typed and keeps the examples' layout (output.HelpFormatter)."""

    def __init__(self, *args, **kwargs) -> None:
        from tilefit.cli.output import HelpFormatter

        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


# Each command and the module that registers it, in the order of `tilefit --help`.
COMMANDS = {"check": "check_cmd", "plan": "plan_cmd", "fit": "fit_cmd", "compare": "compare_cmd",
            "diagnose": "diagnose_cmd", "tune": "tune_cmd", "report": "report_cmd", "gpus": "catalog_cmds",
            "models": "catalog_cmds"}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command` alone: a run of one command imports only its
    own module (`tilefit diagnose` then forks its readers from a process without the planner's
    modules: 3 MB less memory in the process tree, 0.1 s less start-up)."""
    from tilefit.cli import examples

    parser = _Parser(prog="tilefit", description="Shared-memory-exact planning and tuning of MoE GEMMs.")
    parser.add_argument("--version", action="version", version=f"tilefit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    names = [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for name in names:
        importlib.import_module(f"tilefit.cli.{name}").register(sub)
    examples.attach(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every outcome is an exit code, and only 70 means tilefit itself failed."""
    from tilefit.cli.output import fail, wants_json

    argv = list(sys.argv[1:] if argv is None else argv)
    json_out = wants_json(argv)
    try:
        return _run(argv)
    except TilefitError as e:
        return fail(str(e), e.exit_code, json_out=json_out)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        if _stdout_is_broken():  # `tilefit ... | head`: the reader had enough
            return EXIT_OK
        return _internal_error(json_out)
    except Exception:
        return _internal_error(json_out)


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    code = int(args.func(args))
    sys.stdout.flush()  # here, not at interpreter exit, so a closed pipe is seen by the guard
    return code


def _stdout_is_broken() -> bool:
    """True when stdout's reader is gone (the pipe's write end polls as an error); stdout then
    points at /dev/null so the interpreter's own flush at exit does not raise again."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        events = poller.poll(0)
    except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor (tests)
        return False
    if not any(ev & (select.POLLERR | select.POLLHUP) for _, ev in events):
        return False
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass
    return True


def crash_dir() -> Path:
    """Where tracebacks of internal errors go: TILEFIT_CACHE_DIR's crashes/ (default
    ~/.cache/tilefit/crashes), or the temp folder when that cannot be created."""
    try:
        from tilefit.settings import settings

        folder = settings().cache_dir / "crashes"
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    except (OSError, TilefitError):
        return Path(tempfile.gettempdir())


def _internal_error(json_out: bool) -> int:
    """One line naming the exception and the file that holds its traceback (and the JSON error
    object on stdout under --json); exit 70."""
    from tilefit.cli.output import fail

    kind, value, _ = sys.exc_info()
    name = kind.__name__ if kind is not None else "Exception"
    message = " ".join(str(value).split())[:300]
    try:
        fd, path = tempfile.mkstemp(prefix=f"tilefit-crash-{time.strftime('%Y%m%dT%H%M%S')}-",
                                    suffix=".txt", dir=crash_dir())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"tilefit {__version__}\nargv: {sys.argv!r}\n\n{traceback.format_exc()}")
        where = f"details in {path}"
    except OSError as e:
        where = f"no details written ({e.strerror or e})"
    return fail(f"{name}: {message}; {where} (a bug in tilefit: please report it with that file)",
                EXIT_INTERNAL, json_out=json_out, prefix="tilefit: internal error: ")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
