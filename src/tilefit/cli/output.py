"""One output helper for every command: data as JSON, or text for people, and errors in either form.

A renderer hands `show` a sequence of blocks (plain strings and `Table`s). When stdout is not a
terminal the blocks print as fixed plain text (aligned tables, no colour, no wrapping), so piped
output and golden files never depend on a terminal or a library version. On a terminal, rich
(imported only then) draws the tables, wraps to the terminal width and colours verdicts and
severities, unless NO_COLOR is set. Every line passes `escape_control` first: text read from logs
cannot move the cursor, ring the bell or rewrite what was printed.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

# The plain-text pieces live below the CLI so the library's renderers share them; commands import
# them from here with the rest of the output helpers.
from tilefit.text import Block, Table, escape_control, human_bytes, table  # noqa: F401


def print_json(data: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    json.dump(data, out, indent=2, sort_keys=False)
    out.write("\n")


def info(message: str) -> None:
    print(escape_control(message), file=sys.stderr)


# --- the terminal ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Terminal:
    """What the output stream can show: colour, and a width to wrap to (None: not a terminal,
    print plain text as it is)."""

    color: bool
    width: int | None

    @classmethod
    def detect(cls, stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> Terminal:
        import os
        import shutil

        stream = stream or sys.stdout
        env = os.environ if environ is None else environ
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        if not tty:
            return cls(False, None)
        # NO_COLOR (no-color.org): any non-empty value turns colour off; TERM=dumb has none.
        color = not env.get("NO_COLOR") and env.get("TERM") != "dumb"
        return cls(color, max(40, shutil.get_terminal_size().columns))


PLAIN = Terminal(False, None)

# Verdicts and severities, and the colour each gets on a terminal (rich style names).
_STYLES = {
    "NO-GO": "bold red", "FATAL": "bold red", "fatal": "bold red", "EXCEEDS": "red",
    "NO DISPATCH": "red", "UNSUPPORTED": "yellow", "disagrees": "bold red",
    "GO-WITH-WARNINGS": "bold yellow", "WARNING": "yellow", "in-progress": "yellow", "unknown": "yellow",
    "GO": "bold green", "fits": "green", "recovered": "green", "healthy": "green", "agrees": "green",
    "INFO": "cyan",
}
_WORDS = re.compile(r"(?<![\w-])(" + "|".join(sorted(map(re.escape, _STYLES), key=len, reverse=True))
                    + r")(?![\w-])")


def _styled(text: str) -> Any:
    from rich.text import Text

    out = Text(text)
    for m in _WORDS.finditer(text):
        out.stylize(_STYLES[m.group(1)], m.start(1), m.end(1))
    return out


def show(*blocks: Block, term: Terminal | None = None, file: TextIO | None = None) -> None:
    """Print blocks on stdout: plain text when it is not a terminal, rich when it is."""
    file = file or sys.stdout
    term = term or Terminal.detect(file)
    if term.width is None:
        file.write(plain(*blocks) + "\n")
        return
    _show_rich(blocks, term, file)


def plain(*blocks: Block) -> str:
    """The blocks as the fixed plain text that pipes and golden files see."""
    return "\n".join(b.plain() if isinstance(b, Table) else escape_control(b) for b in blocks)


def _show_rich(blocks: Sequence[Block], term: Terminal, file: TextIO) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table as RichTable

    width = term.width or 100
    console = Console(file=file, width=width, no_color=not term.color, highlight=False, markup=False,
                      emoji=False, force_terminal=True, color_system="standard" if term.color else None)
    for block in blocks:
        if isinstance(block, Table):
            t = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
            align = block.alignment()
            last_text = max((i for i, a in enumerate(align) if a == "l"), default=-1)
            for i, (h, a) in enumerate(zip(block.headers, align)):
                t.add_column(h, justify="right" if a == "r" else "left",
                             overflow="fold", no_wrap=i != last_text)
            for row in block.cells():
                t.add_row(*(_styled(c) for c in row))
            console.print(t)
            continue
        hang = None
        lines = escape_control(block).split("\n")
        for i, line in enumerate(lines):
            if i + 1 < len(lines) and line.strip() and _RULE.match(lines[i + 1]):
                hang = lines[i + 1].rindex(" -") + 1 if " -" in lines[i + 1] else 0  # a plain table starts
            elif not line.strip():
                hang = None
            if hang is None:
                _print_wrapped(console, line, width)
            else:
                _print_row(console, line, width, hang)


def _print_wrapped(console: Any, line: str, width: int) -> None:
    """One line, wrapped at word boundaries: continuation lines hang four spaces deeper."""
    indent = len(line) - len(line.lstrip(" "))
    body = _styled(line[indent:])
    room = max(20, width - indent - 4)
    first, *rest = body.wrap(console, room) if body.cell_len > width - indent else [body]
    console.print(_indented(first, indent), soft_wrap=True)
    for piece in rest:
        console.print(_indented(piece, indent + 4), soft_wrap=True)



# The rule under a plain table's header (`table()`'s output inside a text block).
_RULE = re.compile(r"^-+(?:  +-+)*$")


def _print_row(console: Any, line: str, width: int, hang: int) -> None:
    """A row of a plain table: its last column (free text) wraps under itself; when the fixed
    columns alone are wider than the terminal, the row is cut at the edge instead."""
    if len(line) <= width or _RULE.match(line):  # a rule is cut at the edge
        console.print(_styled(line[:width]), soft_wrap=True)
        return
    if hang > width - 20:
        console.print(_styled(line[:width - 1] + "\u2026"), soft_wrap=True)
        return
    first, *rest = _styled(line[hang:]).wrap(console, width - hang)
    console.print(_joined(line[:hang], first), soft_wrap=True)
    for piece in rest:
        console.print(_indented(piece, hang), soft_wrap=True)


def _joined(head: str, tail: Any) -> Any:
    tail.rstrip()
    return _styled(head) + tail


def _indented(text: Any, spaces: int) -> Any:
    from rich.text import Text

    text.rstrip()  # the wrap leaves the breaking space at the end of a line
    return Text(" " * spaces) + text


# --- errors ---------------------------------------------------------------------------------------

def wants_json(argv: Sequence[str]) -> bool:
    """True when the command line asks for JSON (checked on the raw argv, so that errors found
    while parsing it are JSON too)."""
    return "--json" in argv


def fail(message: str, code: int, *, json_out: bool, prefix: str = "tilefit: error: ") -> int:
    """Report a failure: one line on stderr and, for --json, {"error": {"code", "message"}} on
    stdout so that a script reading stdout sees the failure as data. Returns `code`."""
    print(escape_control(prefix + message), file=sys.stderr)
    if json_out:
        try:
            print_json({"error": {"code": code, "message": message}})
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):  # nobody left reading stdout
            pass
    return code


# --- help -----------------------------------------------------------------------------------------

class HelpFormatter(argparse.HelpFormatter):
    """argparse's help with defaults printed the way a user types them ('1,64,1024', not
    '(1, 64, 1024)'), and pre-laid-out paragraphs (the examples, indented) kept as written."""

    def _expand_help(self, action: argparse.Action) -> str:
        if isinstance(action.default, (tuple, list)):
            action = copy.copy(action)
            action.default = ",".join(map(str, action.default)) or "none"
        return super()._expand_help(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for para in text.split("\n\n"):
            if para.startswith(" ") or "\n" in para.strip("\n"):
                paragraphs.append("\n".join(indent + line for line in para.strip("\n").splitlines()))
            else:
                paragraphs.append(super()._fill_text(para, width, indent))
        return "\n\n".join(paragraphs)
