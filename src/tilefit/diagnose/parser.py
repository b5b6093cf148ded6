"""Streaming log reader: bytes in, candidate lines out, in constant memory.

`LineScanner.feed()` takes chunks of any size. The rule set's gate regex is searched over each
chunk as a whole, so ordinary lines never reach Python code; only lines that contain a rule's
needle (and the lines inside a window a rule asked for, such as a backtrace) are decoded
(UTF-8 with replacement), stripped of ANSI colour codes and CR, split at carriage returns
(progress bars redraw in place) and handed to the callback. Lines longer than `max_line` bytes
are cut to their head and tail. Line numbers count LF-terminated lines from 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tilefit.diagnose.prefixes import strip_prefix

__all__ = ["CHUNK", "MAX_LINE", "LineScanner", "normalize", "strip_prefix", "detail_fields",
           "is_backtrace_frame", "tile_from_enum", "tile_from_text"]

CHUNK = 1 << 20
MAX_LINE = 64 << 10

# process(line_number, segments, gated) -> how many following lines it wants to see regardless of
# the gate (negative: close the window). `gated` says whether the line contains a needle.
Processor = Callable[[int, list[str], bool], int]
# frames(first_line_number, raw): a run of backtrace frames inside a window, handed over at once as
# the bytes of its lines (each LF-terminated; no CR or ESC in them, see FRAME_RUN).
FrameSink = Callable[[int, bytes], None]

# A run of backtrace frames, as is_backtrace_frame reads them, in bytes (a frame here is always one
# there): "2       0x7f3c2a6f1e9d void f<...>() + 1645", "  File ...", "  at ...", "x.cu:12 ...".
# Lines with CR, ESC or over 16,000 bytes take the line-by-line path.
_FRAME_HEAD = (rb"[ \t]{0,40}(?:#?[0-9]{1,6}[ \t]{1,40}0x[0-9a-fA-F]{1,16}|at |\.\.\.|File |"
               rb"[!-~]{1,300}\.(?:cu|h|hpp|inl|cpp):[0-9]{1,7})")
FRAME_RUN = re.compile(rb"(?:" + _FRAME_HEAD + rb"[^\n\r\x1b]{0,16000}\n){1,64}")
# The same with any byte but LF after a frame's head: the regex engine skips those 3x faster than
# it tests a class, and a run holding no CR or ESC (two memchr calls tell) is FRAME_RUN's run.
_FRAME_RUN_ANY = re.compile(rb"(?:" + _FRAME_HEAD + rb".{0,16000}\n){1,64}")

# str's \s on ASCII text (\x1c-\x1f are whitespace to str.strip and to str patterns, not to bytes).
_WS = b" \t\n\r\f\v\x1c\x1d\x1e\x1f"
# is_backtrace_frame's pattern (_FRAME) for ASCII bytes: on an ASCII line the two agree.
_FRAME_ASCII = re.compile(rb"[%s]*(?:#?[0-9]+[%s]+0x[0-9a-fA-F]+|at |\.\.\.|File |[^%s]+\.(?:cu|h|hpp|inl|cpp):[0-9])"
                          % (_WS, _WS, _WS))

_NUMBER = re.compile(r"\d+")
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def normalize(raw: bytes) -> list[str]:
    """Decode one raw line into its display segments (CR-separated redraws), cleaned."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        return [s for s in text.split("\r") if s.strip()]
    return [text] if text.strip() else []


class LineScanner:
    """Feeds lines that matter to `process`; keeps at most one chunk plus one capped line.

    A line longer than `max_line` bytes is judged by its head and its tail (half of `max_line`
    each, joined by " ... "), whether it arrived in one chunk or in a thousand: the same bytes give
    the same verdict under `--follow` as in a file. Such a line matters when its clipped text holds
    a needle or it falls inside a window."""

    def __init__(self, gate: re.Pattern[bytes], process: Processor, *, max_line: int = MAX_LINE,
                 frames: FrameSink | None = None, gates: dict[Any, re.Pattern[bytes]] | None = None,
                 needs: Callable[[], Any] | None = None, frames_only: bool = False):
        self.gate = gate          # every needle
        self.process = process
        self.frames = frames
        # The processor reads nothing inside a window but frames and gated lines: it answers any
        # other line by closing the window. Such a line then closes it unread (no decoding, no call).
        self.frames_only = frames_only
        # Outside windows the processor may need fewer needles (RuleSet.gates, Tracker.needs).
        self._gates, self._needs = gates, needs
        self._search = gate.search
        self._needed = None
        self._regate()
        self.max_line = max_line
        self._half = max_line // 2
        self.lines = 0           # complete lines consumed so far
        self.bytes = 0
        self._carry = b""        # the unterminated tail of the previous chunk (at most max_line)
        self._skipping = False   # inside an over-long line: its head is in _carry, ...
        self._tail = b""         # ... and its last `_half` bytes so far here
        self._window = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.bytes += len(data)
        if self._skipping:
            nl = data.find(b"\n")
            self._keep_tail(data if nl < 0 else data[:nl])
            if nl < 0:
                return
            self._end_overlong()
            data = data[nl + 1:]
        buf = self._carry + data if self._carry else data
        end = buf.rfind(b"\n")
        if end < 0:
            self._hold(buf)
            return
        self._scan(buf, end)
        self._hold(buf[end + 1:])

    def open_window(self, lines: int) -> None:
        """Hand over the next `lines` lines even without a needle (the processor may close it)."""
        self._window = max(self._window, lines)

    @property
    def mid_line(self) -> bool:
        """True when the input so far ends inside a line (no LF after the last bytes)."""
        return bool(self._carry) or self._skipping

    def close(self) -> None:
        """End of input: a final line without a newline still counts."""
        if self._skipping:
            self._end_overlong()
        elif self._carry:
            carry, self._carry = self._carry, b""
            self._line(carry, 0, len(carry))

    def _hold(self, tail: bytes) -> None:
        if len(tail) > self.max_line:
            self._carry, self._skipping, self._tail = tail[:self._half], True, b""
            self._keep_tail(tail[self._half:])
        else:
            self._carry = tail

    def _keep_tail(self, piece: bytes) -> None:
        if len(piece) >= self._half:
            self._tail = piece[-self._half:]
        else:
            self._tail = (self._tail + piece)[-self._half:]

    def _end_overlong(self) -> None:
        clipped = self._carry + b" ... " + self._tail
        self._carry, self._tail, self._skipping = b"", b"", False
        self._clipped(clipped)

    def _regate(self) -> None:
        if self._needs is not None and self._gates is not None:
            needed = self._needs()
            if needed != self._needed:
                self._needed, self._search = needed, self._gates[needed].search

    def _clipped(self, clipped: bytes) -> None:
        """An over-long line, already cut to head + tail: it matters only when the cut text holds a
        needle or a window is open."""
        hit = self._search(clipped)
        if hit is None and self._window <= 0:
            self.lines += 1
            return
        if self._window > 0:
            self._window -= 1
        self._emit(clipped, 0, len(clipped), gated=hit is not None)

    def _line(self, buf: bytes, start: int, stop: int, *, gated: bool = True) -> None:
        """One line buf[start:stop] (without its LF), over-long ones clipped first."""
        if stop - start > self.max_line:
            self._clipped(buf[start:start + self._half] + b" ... " + buf[stop - self._half:stop])
        else:
            self._emit(buf, start, stop, gated=gated)

    def _scan(self, buf: bytes, end: int) -> None:
        """Process the complete lines buf[:end+1] (buf[end] is the last LF)."""
        pos = 0
        self._regate()  # the processor's needs change only when it is called (_emit, _frame_run)
        while pos <= end:
            if self._window > 0:
                if self.frames is not None:
                    run = _FRAME_RUN_ANY.match(buf, pos, end + 1)
                    if run is not None and (buf.find(b"\r", pos, run.end()) >= 0
                                            or buf.find(b"\x1b", pos, run.end()) >= 0):
                        run = FRAME_RUN.match(buf, pos, end + 1)
                    if run is not None:
                        pos = self._frame_run(buf, pos, run.end())
                        continue
                nl = buf.find(b"\n", pos, end + 1)
                if nl - pos > self.max_line:
                    self._line(buf, pos, nl)
                else:
                    self._window -= 1
                    gated = self._search(buf, pos, nl) is not None
                    if not gated and self.frames_only and _no_frame(buf[pos:nl]):
                        self.lines += 1
                        self._window = 0
                    else:
                        self._emit(buf, pos, nl, gated=gated)
                pos = nl + 1
                continue
            m = self._search(buf, pos, end)
            if m is None:
                self.lines += buf.count(b"\n", pos, end + 1)
                return
            start = buf.rfind(b"\n", pos, m.start()) + 1
            if start < pos:
                start = pos
            nl = buf.find(b"\n", m.end() - 1, end + 1)
            self.lines += buf.count(b"\n", pos, start)
            self._line(buf, start, nl)
            pos = nl + 1

    def _frame_run(self, buf: bytes, start: int, stop: int) -> int:
        """Hand a run of frame lines buf[start:stop] (at most the window's count) to `frames`;
        returns where the next line starts."""
        count = buf.count(b"\n", start, stop)
        if count > self._window:
            count, stop = self._window, start
            for _ in range(count):
                stop = buf.index(b"\n", stop) + 1
        self.frames(self.lines + 1, buf[start:stop])  # type: ignore[misc]
        self._regate()
        self.lines += count
        self._window -= count
        return stop

    def _emit(self, buf: bytes, start: int, stop: int, *, gated: bool = True) -> None:
        """Hand one line (buf[start:stop], at most about max_line bytes) to the processor."""
        self.lines += 1
        raw = buf[start:stop]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        segments = normalize(raw)
        want = self.process(self.lines, segments, gated) if segments else 0
        self._regate()
        if want > self._window:
            self._window = want
        elif want < 0:
            self._window = 0


# ---- detail: the failing tile, the arch and the epilogue, from error and backtrace lines ---------

_CUTE_TILE = re.compile(r"cute::(?:tuple|Shape)<\s*cute::(?:C|Int)<(\d+)>,\s*cute::(?:C|Int)<(\d+)>,"
                        r"\s*cute::(?:C|Int)<(\d+)>\s*>")
_ARCH = re.compile(r"cutlass::arch::Sm(\d{2,3})\b|\bsm_?(\d{2,3})[af]?\b|/(\d{2,3})[af]/|"
                   r"for arch (\d{2,3})\b|compute capability:? (\d{1,2})\.(\d)")
_FP4 = re.compile(r"__nv_fp4_e2m1|float_e2m1_t|nvfp4|NVFP4|\bfp4\b")
_FP8 = re.compile(r"__nv_fp8_e4m3|float_e4m3_t|fp8_w8a8|\bfp8\b")


def detail_fields(text: str) -> dict[str, object]:
    """What a backtrace or error line says about the failing kernel: its first tile shape
    (TileShape precedes ClusterShape in the launcher's template arguments), arch, data type and
    whether the epilogue is the fused FINALIZE one."""
    out: dict[str, object] = {}
    if "cute::" in text:
        m = _CUTE_TILE.search(text)
        if m:
            out["tile"] = "x".join(m.groups())
    m = _ARCH.search(text) if ("Sm" in text or "sm" in text or "arch" in text or "/1" in text
                               or "capability" in text) else None
    if m:
        g = m.groups()
        cc = g[0] or g[1] or g[2] or g[3] or (g[4] + g[5] if g[4] else None)
        if cc:
            out["arch"] = f"sm{cc}"
    if "fp4" in text or "FP4" in text or "e2m1" in text:
        if _FP4.search(text):
            out["dtype_hint"] = "fp4"
    elif ("fp8" in text or "e4m3" in text) and _FP8.search(text):
        out["dtype_hint"] = "fp8"
    # TmaWarpSpecializedGroupedGemmInput::EpilogueFusion is {NONE, ACTIVATION, GATED_ACTIVATION,
    # FINALIZE}; a demangled backtrace prints a template argument of it as "(...EpilogueFusion)3".
    if "FINALIZE" in text or "EpilogueFusion)3" in text:
        out["finalize"] = True
    if "gemm2" in text:
        out["gemm"] = "gemm2"
    elif "gemm1" in text:
        out["gemm"] = "gemm1"
    return out


_FRAME = re.compile(r"^\s*(?:#?\d+\s+0x[0-9a-fA-F]+|at |\.\.\.|File |\S+\.(?:cu|h|hpp|inl|cpp):\d+)")


def _no_frame(raw: bytes) -> bool:
    """Whether a raw line (without its LF) normalizes to one segment that is no backtrace frame,
    told from its bytes; False when unsure (not ASCII, CR or ESC in it, blank)."""
    return (raw.isascii() and b"\r" not in raw and b"\x1b" not in raw and bool(raw.strip(_WS))
            and _FRAME_ASCII.match(raw) is None)


def is_backtrace_frame(text: str) -> bool:
    """A C++ backtrace frame ('2       0x7f3c2a6f1e9d void f<...>() + 1645') or its close kin."""
    return _FRAME.match(text) is not None


def tile_from_enum(value: str) -> str | None:
    """TensorRT-LLM's CutlassTileConfig enum packs M, N, K as M*10^6 + N*10^3 + K: 128128256.
    Its K is in bytes (CtaShape128x128x256B), kept as a 'B' suffix until the data type is known."""
    try:
        v = int(value)
    except ValueError:
        return None
    m, n, k = v // 1_000_000, (v // 1000) % 1000, v % 1000
    return f"{m}x{n}x{k}B" if m and n and k else None


def tile_from_text(text: str) -> str | None:
    nums = _NUMBER.findall(text)
    return "x".join(nums[:3]) if len(nums) >= 3 else None
