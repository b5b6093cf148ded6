"""Entry point: builds the argument parser from the command modules and maps errors to exit codes.

Each command module exposes `register(subparsers)`, which adds its parser and sets `func`
to a callable `(args) -> int`. Command modules are imported here, but each keeps its own heavy
imports inside the function that runs it, so `tilefit --help` and `tilefit plan` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tilefit import __version__
from tilefit.errors import TilefitError, UsageError

# Exit codes (STYLE.md): 0 ok, 1 a finding, 2 bad usage/input/IO, anything else a bug.
EXIT_OK, EXIT_FINDING, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are UsageErrors (one line, exit 2, JSON with --json), and whose
    help prints defaults as typed and keeps the examples' layout (output.HelpFormatter)."""

    def __init__(self, *args, **kwargs) -> None:
        from tilefit.cli.output import HelpFormatter

        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    from tilefit.cli import (catalog_cmds, check_cmd, compare_cmd, diagnose_cmd, examples, fit_cmd, plan_cmd,
                             tune_cmd)

    parser = _Parser(prog="tilefit", description="Shared-memory-exact planning and tuning of MoE GEMMs.")
    parser.add_argument("--version", action="version", version=f"tilefit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (check_cmd, plan_cmd, fit_cmd, compare_cmd, diagnose_cmd, tune_cmd, catalog_cmds):
        module.register(sub)
    examples.attach(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from tilefit.cli.output import fail, wants_json

    argv = list(sys.argv[1:] if argv is None else argv)
    json_out = wants_json(argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return int(args.func(args))
    except TilefitError as e:
        return fail(str(e), e.exit_code, json_out=json_out)
    except BrokenPipeError:  # `tilefit ... | head`
        return EXIT_OK
    except KeyboardInterrupt:
        print("tilefit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
