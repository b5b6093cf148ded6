"""The streaming reader: chunk boundaries, line numbers, CRLF, ANSI, invalid UTF-8, 1 MB lines,
truncated final lines, interleaved ranks, and fuzzed bytes that must never raise."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilefit.diagnose import Diagnoser, diagnose_bytes, diagnose_stream
from tilefit.diagnose import events as ev
from tilefit.diagnose.parser import LineScanner, normalize, strip_prefix
from tilefit.diagnose.render import as_dict, human
from tilefit.diagnose.rules import default_rules

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"


def summary(d):
    return (d.verdict, d.cause, d.lines, d.decisive.line if d.decisive else None,
            [(f.kind, f.count, f.first_line, f.last_line, tuple(f.tiles)) for f in d.failures])


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_chunk_size_does_not_change_the_result(chunk):
    data = (LOGS / "sglang_sm120_tactics_oom.log").read_bytes()
    whole = diagnose_bytes(data)
    assert summary(diagnose_stream(io.BytesIO(data), chunk=chunk)) == summary(whole)


def test_line_numbers_match_a_plain_count():
    seen = []
    lines = [b"plain line", b"Killed", b"", b"another", b"Killed"]
    sc = LineScanner(default_rules().gate, lambda n, segs, gated: seen.append((n, segs)) or 0)
    sc.feed(b"\n".join(lines) + b"\n")
    sc.close()
    assert [n for n, _ in seen] == [2, 5] and sc.lines == 5


def test_crlf_and_ansi_are_cleaned():
    assert normalize(b"\x1b[31mERROR\x1b[0m 10-06 20:01:02 [x.py:1] boom\r") == ["ERROR 10-06 20:01:02 [x.py:1] boom"]
    crlf = (LOGS / "vllm_healthy_crlf_ansi.log").read_bytes()
    assert b"\r\n" in crlf and b"\x1b[" in crlf
    d = diagnose_bytes(crlf)
    assert d.verdict == "healthy" and d.ready.text == "INFO:     Application startup complete."


def test_carriage_return_redraws_are_separate_segments():
    assert normalize(b"a 1/3\rb 2/3\rc 3/3") == ["a 1/3", "b 2/3", "c 3/3"]


def test_invalid_utf8_is_replaced_not_fatal():
    d = diagnose_bytes(b"\xff\xfe garbage \xc3\x28 Segmentation fault (core dumped)\n")
    assert d.cause == ev.CRASHED and "\ufffd" in d.decisive.text


def test_megabyte_lines_are_capped_and_still_matched():
    big = b"x" * (1 << 20)
    ready = b"[2025-10-06 20:05:17] The server is fired up and ready to roll!\n"
    data = big + b" Segmentation fault (core dumped)\n" + big + b"\n" + ready
    for chunk in (1 << 16, 1 << 20, 3 << 20):
        d = diagnose_stream(io.BytesIO(data), chunk=chunk)
        assert d.lines == 3 and d.verdict == "recovered" and d.ready.line == 3, chunk
        assert len(d.failures[0].message) <= 240


def test_a_line_longer_than_the_cap_across_chunks_keeps_its_head():
    data = b"Segmentation fault " + b"y" * (300 << 10) + b"\nnext\n"
    d = diagnose_stream(io.BytesIO(data), chunk=4096)
    assert d.cause == ev.CRASHED and d.decisive.line == 1 and d.lines == 2


def test_truncated_final_line_counts_once_closed():
    dg = Diagnoser()
    dg.feed(b"[2025-10-06 20:05:13] INFO:     Application startup complete.\nKil")
    dg.feed(b"led")
    assert dg.result().verdict == "healthy"  # the unterminated line is not judged yet
    dg.close()
    d = dg.result()
    assert d.verdict == "fatal" and d.decisive.line == 2 and d.lines == 2


def test_prefixes_give_rank_and_time():
    body, rank, t = strip_prefix("[2025-10-06 20:05:22 DP0 TP3] Capture cuda graph begin.")
    assert (body, rank) == ("Capture cuda graph begin.", "DP0 TP3") and t is not None
    body, rank, t = strip_prefix("(Worker_PP1_TP0 pid=812) ERROR 10-06 20:01:45 [core.py:718]   File \"x\"")
    assert rank == "Worker_PP1_TP0" and body == "  File \"x\"" and t is not None
    assert strip_prefix("[rank3]:[E1006 20:15:02.1 x.cpp:632] boom")[1] == "rank3"
    _, _, t1 = strip_prefix("[10/06/2025-20:05:22] [TRT-LLM] [W] hello")
    _, _, t2 = strip_prefix("[2025-10-06 20:05:22 TP0] hello")
    assert t1 == t2


def test_interleaved_ranks_keep_each_error_with_its_rank():
    lines = []
    for i in range(50):
        lines.append(f"[2025-10-06 20:04:{i % 60:02d} TP{i % 4}] Capture cuda graph bs [1, 2, 4]")
    oom = "[2025-10-06 20:04:20 TP2] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    lines.insert(20, oom)
    d = diagnose_bytes(("\n".join(lines) + "\n").encode())
    # TP2 logged progress after its OOM (line 23 is TP2's next line), so it lived on.
    assert d.verdict == "in-progress" and d.failure(ev.CUDA_OOM).survived == 1
    lines = lines[:21]  # the log stops right after TP2's OOM; only another rank speaks after it
    lines.append("[2025-10-06 20:04:21 TP3] Capture cuda graph bs [1, 2, 4]")
    d = diagnose_bytes(("\n".join(lines) + "\n").encode())
    assert d.verdict == "fatal" and d.decisive.rank == "TP2"


FRAGMENTS = [
    b"Killed", b"Traceback (most recent call last):", b"  File \"x.py\", line 1, in f",
    b"RuntimeError: PassManager::run failed", b"\x1b[31m", b"\r", b"\r\n", b"\n", b"\xff\xfe",
    b"[2025-10-06 20:05:22 TP0] ", b"(EngineCore_DP0 pid=1) ", b"Skipping tactic <r> 7, due to failure: ",
    b"cute::tuple<cute::C<128>, cute::C<256>, cute::C<128> >", b"Hardware limit: 101376",
    b"out of resource: shared memory, Required: 147456, Hardware limit: 101376",
    b"The server is fired up and ready to roll!", b"exitcode : -9", b"Unsupported tile shape config 99",
    b"Unsupported tile (", b"cutlass::arch::Sm120", b"Capturing batches (bs=", b"ERROR", b"Error",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=64)), max_size=60),
       st.integers(min_value=1, max_value=97))
def test_fuzz_never_raises(parts, chunk):
    data = b"".join(parts)
    d = diagnose_stream(io.BytesIO(data), chunk=chunk)
    assert d.verdict in ("healthy", "recovered", "fatal", "in-progress", "unknown")
    assert d.lines == data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    human(d)
    as_dict(d)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=4096))
def test_random_bytes_never_raise(data):
    d = diagnose_bytes(data)
    human(d)


@pytest.mark.parametrize("piece", [997, 4096, 65536])
def test_parallel_reader_matches_the_serial_one(tmp_path, piece):
    from tilefit.diagnose.parallel import scan_file
    from tilefit.diagnose.verdict import DETAIL_LINES, Tracker

    names = sorted(p.name for p in LOGS.glob("*.log"))
    data = b"".join((LOGS / n).read_bytes() for n in names) + b"Killed " + b"z" * (70 << 10) + b"\ntail"
    path = tmp_path / "all.log"
    path.write_bytes(data)
    serial = diagnose_bytes(data)
    tracker = Tracker(default_rules())
    lines, nbytes = scan_file(str(path), tracker.process, workers=2, detail_lines=DETAIL_LINES,
                              gate=tracker.rules.gate, piece=piece)
    par = tracker.finish(lines, nbytes)
    assert (lines, nbytes) == (serial.lines, serial.bytes) == (data.count(b"\n") + 1, len(data))
    assert summary(par) == summary(serial)
    assert [(f.kind, f.tiles, f.finalize_tiles, f.tactics, f.survived) for f in par.failures] == \
        [(f.kind, f.tiles, f.finalize_tiles, f.tactics, f.survived) for f in serial.failures]


def test_cli_reads_a_large_file_in_parallel_with_the_same_answer(tmp_path):
    from tilefit.diagnose import diagnose_file
    from tilefit.diagnose.parallel import PIECE

    one = (LOGS / "sglang_sm120_tactics_oom.log").read_bytes()
    path = tmp_path / "big.log"
    path.write_bytes(one * (4 * PIECE // len(one) + 1))
    serial = diagnose_file(str(path), workers=1)
    par = diagnose_file(str(path), workers=2)
    assert summary(par) == summary(serial) and par.failure(ev.TACTIC_SKIPPED).count > 160 * 50


def test_no_process_pool_falls_back_to_serial(tmp_path, monkeypatch):
    from concurrent.futures.process import BrokenProcessPool

    from tilefit.diagnose import diagnose_file, parallel
    from tilefit.diagnose.parallel import PIECE

    one = (LOGS / "sglang_sm120_tactics_recovered.log").read_bytes()
    path = tmp_path / "big.log"
    path.write_bytes(one * (4 * PIECE // len(one) + 1))

    def broken(path, process, **kw):
        process(1, ["Killed"], True)  # half-fed state that the fallback must discard
        raise BrokenProcessPool("a worker died")

    monkeypatch.setattr(parallel, "scan_file", broken)
    d = diagnose_file(str(path), workers=2)
    assert d.verdict == "recovered" and d.failure(ev.KILLED) is None


def test_parallel_reader_gates_with_the_diagnosers_own_rules(tmp_path):
    """A Diagnoser with a rule the default set lacks reads a large file in parallel exactly as it
    reads it serially: the workers gate with its rules, not the default ones."""
    from tilefit.diagnose import Diagnoser
    from tilefit.diagnose import events as ev
    from tilefit.diagnose.parallel import PIECE
    from tilefit.diagnose.rules import RuleSet, all_rules

    line = b"WORKER 3 OOMKILLED by the site watchdog\n"
    extra = ev.Rule("site-watchdog", "vllm", ev.ENGINE_DIED, ev.FATAL, "OOMKILLED", line.decode().strip())
    one = (LOGS / "sglang_sm120_tactics_recovered.log").read_bytes()
    path = tmp_path / "big.log"
    path.write_bytes(one * (4 * PIECE // len(one) + 1) + line)
    found = []
    for workers in (1, 2):
        dg = Diagnoser(rules=RuleSet((*all_rules(), extra)))
        dg.read_file(str(path), workers=workers)
        found.append(dg.result(explain_it=False).failure(ev.ENGINE_DIED) is not None)
    assert found == [True, True]


_FRAMEISH = st.lists(st.sampled_from([
    " ", "\t", "\x0b", "\x0c", "\x1c", "\x1f", "\r", "\x1b[31m", "#", "0", "7", "12", "0x", "7f3c", "g", "at ", "...",
    "File ", "x.cu", ".cu:", ".h:", ".inl:", ":", "foo", "é", "٣", "\u2003", "[", "]", "+",
]), max_size=12).map("".join)


@settings(max_examples=2000, deadline=None)
@given(_FRAMEISH)
def test_a_line_told_no_frame_from_its_bytes_is_none(text):
    """A parallel reader closes a window at a line its bytes show is no frame, without decoding it
    (parser._no_frame): exactly the ASCII, CR- and ESC-free, non-blank lines that normalize to one
    segment is_backtrace_frame rejects."""
    from tilefit.diagnose.parser import _no_frame, is_backtrace_frame

    raw = text.encode()
    segments = normalize(raw)
    if _no_frame(raw):
        assert segments == [text] and not is_backtrace_frame(text)
    elif raw.isascii() and b"\r" not in raw and b"\x1b" not in raw and text.strip():
        assert is_backtrace_frame(text)
