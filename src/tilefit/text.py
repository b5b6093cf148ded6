"""Plain-text building blocks every renderer shares (cli/output.py draws them on a terminal, the
library's own renderers print them plain): a table as data, cell formatting, byte sizes, and the
escaping of terminal control characters. Nothing here knows about commands or terminals.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Union


@dataclass(frozen=True, slots=True)
class Table:
    """A table as data: rendered aligned in plain text, or as a rich table on a terminal.
    `align` holds one 'l' or 'r' per column (default: numbers right, text left)."""

    headers: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    align: str | None = None

    @classmethod
    def of(cls, headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> Table:
        return cls(tuple(headers), tuple(tuple(r) for r in rows), align)

    def alignment(self) -> str:
        if self.align is not None:
            return self.align
        return "".join(
            "r" if self.rows and all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
                                     for r in self.rows) else "l"
            for i in range(len(self.headers)))

    def cells(self) -> list[list[str]]:
        return [[escape_control(format_cell(c)) for c in row] for row in self.rows]

    def plain(self) -> str:
        cells, align = self.cells(), self.alignment()
        widths = [len(h) for h in self.headers]
        for row in cells:
            for i, c in enumerate(row):
                widths[i] = max(widths[i], len(c))

        def line(values: Sequence[str]) -> str:
            parts = [v.rjust(w) if a == "r" else v.ljust(w) for v, w, a in zip(values, widths, align)]
            return "  ".join(parts).rstrip()

        out = [line(list(self.headers)), line(["-" * w for w in widths])]
        out.extend(line(row) for row in cells)
        return "\n".join(out)


Block = Union[str, Table]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, align: str | None = None) -> str:
    """A plain aligned text table (see `Table`; renderers that `show` blocks pass a Table instead)."""
    return Table.of(headers, rows, align).plain()


def format_cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.2f}" if abs(value) >= 10 else f"{value:.3g}"
    if value is None:
        return "-"
    return str(value)


def human_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{int(n):,} B"


# --- control characters -------------------------------------------------------------------------

# C0 controls except tab and newline, DEL, and the C1 range (U+0080-U+009F, 8-bit CSI among them).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NAMES = {"\x1b": "^[", "\x07": "^G", "\x08": "^H", "\r": "^M", "\x7f": "^?"}


def escape_control(text: str) -> str:
    """Text with every terminal control character made visible (ESC -> '^[', BEL -> '^G',
    backspace -> '^H', others as \\xNN): a log line can then show an escape sequence but never
    run it. Tabs and newlines are kept."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: _NAMES.get(m.group(), f"\\x{ord(m.group()):02x}"), text)
