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
from tilefit.errors import TilefitError

# Exit codes (STYLE.md): 0 ok, 1 a finding, 2 bad usage/input/IO, anything else a bug.
EXIT_OK, EXIT_FINDING, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (argparse already uses 2; keep the message short)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"tilefit: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    from tilefit.cli import catalog_cmds, check_cmd, compare_cmd, diagnose_cmd, fit_cmd, plan_cmd, tune_cmd

    parser = _Parser(prog="tilefit", description="Shared-memory-exact planning and tuning of MoE GEMMs.")
    parser.add_argument("--version", action="version", version=f"tilefit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (check_cmd, plan_cmd, fit_cmd, compare_cmd, diagnose_cmd, tune_cmd, catalog_cmds):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except TilefitError as e:
        print(f"tilefit: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # `tilefit ... | head`
        return EXIT_OK
    except KeyboardInterrupt:
        print("tilefit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
