"""The parallel reader folds runs of caught tactic failures (diagnose/fold.py) and caches backtraces
by their text with addresses blanked (analyze.LineReader.run): neither may change a diagnosis."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilefit.diagnose import Diagnoser
from tilefit.diagnose.analyze import _ADDRESS
from tilefit.diagnose.events import DETAIL_LINES
from tilefit.diagnose.fold import FOLD
from tilefit.diagnose import parallel
from tilefit.diagnose.parallel import _scan_piece, scan_file
from tilefit.diagnose.parser import detail_fields
from tilefit.diagnose.render import as_dict
from tilefit.diagnose.rules import default_rules

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SM120 = [FIXTURES / "logs" / "sglang_sm120_tactics_oom.log", FIXTURES / "logs" / "sglang_sm120_tactics_recovered.log"]


def _full(d):
    return as_dict(d), [f.finalize_tiles for f in d.failures]


def _serial(data: bytes):
    dg = Diagnoser()
    dg.feed(data)
    dg.close()
    return _full(dg.result())


def _parallel(path: Path, piece: int):
    dg = Diagnoser()
    dg._counts = scan_file(str(path), dg.tracker.process, workers=2, detail_lines=DETAIL_LINES, piece=piece)
    return _full(dg.result())


def _folded(path: Path, piece: int) -> int:
    """How many failures the workers folded."""
    rules = tuple(cr.rule for cr in default_rules().rules)
    size = os.path.getsize(path)
    return sum(r[2].seen for s in range(0, size, piece)
               for r in _scan_piece(str(path), s, min(size, s + piece), DETAIL_LINES, rules)[1] if r[1] == FOLD)


@pytest.mark.parametrize("seed", [1, 2])
def test_folded_runs_read_as_the_serial_reader_reads_them(tmp_path, seed):
    """SM120 warmups (tactic failures with backtraces, back to back) shuffled among real logs with
    tracebacks, OOMs and deaths from public threads: the same diagnosis, field for field, with
    runs folded."""
    rnd = random.Random(seed)
    real = sorted((FIXTURES / "real").glob("*.log"))
    parts = [p.read_bytes() for p in SM120] * 6 + [p.read_bytes() for p in rnd.sample(real, 30)]
    rnd.shuffle(parts)
    data = b"".join(parts)
    path = tmp_path / "mixed.log"
    path.write_bytes(data)
    serial = _serial(data)
    for piece in (65536, 300_000):
        assert _parallel(path, piece) == serial
    assert _folded(path, 300_000) > 300


def test_nothing_folds_near_a_traceback_or_a_sticky_error(tmp_path):
    """A run right after a traceback starts, or one whose failures quote an illegal memory access
    (sticky: it poisons the process), is replayed line by line."""
    skip = ("2025-10-06 20:03:20,000 - WARNING - autotuner.py:484 - flashinfer.jit: [Autotuner]: Skipping tactic "
            "<MoERunner object at 0x7f2c5d1e3a90> {t}, due to failure while profiling: {why}\n"
            "1       0x7f3c2a1b{t:04x} tensorrt_llm::common::throwRuntimeError(char const*, int, char const*) + 78\n")
    plain = "".join(skip.format(t=t, why="[TensorRT-LLM][ERROR] Unsupported tile shape config 128128256") for t in range(9))
    sticky = "".join(skip.format(t=t, why="CUDA error: an illegal memory access was encountered") for t in range(9))
    for body in (plain, sticky):
        lines = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>'] + body.splitlines()
        path = tmp_path / "a.log"
        path.write_text("\n".join(lines) + "\n")
        assert _folded(path, 1 << 20) == 0
    path.write_text("x\n" * (2 * 400) + plain)
    assert _folded(path, 1 << 20) == 9 - 2  # the first and last of a run stay lines


_HEX = st.text("0123456789abcdefABCDEF", min_size=1, max_size=12)
_PIECE = st.one_of(
    st.sampled_from(["cute::C<", "cute::Int<", ">", ", ", "cutlass::arch::Sm", "sm_", "sm", "/", "a/", "f/",
                     "for arch ", "compute capability: ", ".", "fp4", "e2m1", "e4m3", "__nv_fp8_e4m3", "FINALIZE",
                     "EpilogueFusion)", "gemm", "1", "2", "3", "90", "120", "128", " + 1645", "(+", ")", "[", "]",
                     " ", "x", "_t", "float_e2m1_t", "nvfp4", "NVFP4"]),
    _HEX.map(lambda h: "0x" + h),
    _HEX,
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECE, max_size=24))
def test_blanking_addresses_keeps_every_detail(pieces):
    """The backtrace cache's key blanks hex addresses: a frame and its blanked self say the same."""
    text = "".join(pieces)
    blanked = _ADDRESS.sub(b"0x", text.encode()).decode()
    assert detail_fields(text) == detail_fields(blanked)


_PREFIX = st.sampled_from([
    "[2025-10-06 20:05:22 DP0 TP2 EP2] ", "[2025-13-41 25:05:22] ", "[TP3] ", "[rank3]: ", "[Rank 12] ",
    "[gpu_id=0] ", "[10/06/2025-20:05:22] ", "[TRT-LLM] [W] ", "(EngineCore_DP0 pid=4123) ",
    "(VllmWorker rank=2 pid=5) ", "(APIServer pid=9) ", "INFO 10-06 20:05:22 [loggers.py:123] ",
    "WARNING 99-99 20:05:22.5 x.py:1] ", "2025-10-06 20:05:22,123 - WARNING - autotuner.py:484 - flashinfer.jit: ",
    "2026-05-01 19:59:08.164 | ", "sglang-1  | ", "INFO:     ", "x [rank7] ", "",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PREFIX, max_size=4), st.text(max_size=30), st.randoms(use_true_random=False))
def test_lines_differing_in_digits_peel_alike(prefixes, body, rnd):
    """peel_line caches where a line's prefixes lie per shape (digits as 0): a line that differs
    from a cached one only in its digits peels as peel reads it afresh."""
    from tilefit.diagnose.prefixes import peel, peel_line

    text = "".join(prefixes) + body
    peel_line(text)
    other = "".join(rnd.choice("0123456789") if "0" <= c <= "9" else c for c in text)
    assert peel_line(other)[:3] == peel(other)


_TRICKY = [
    b"Traceback (most recent call last):\n", b'  File "x.py", line 3, in <module>\n', b"    raise RuntimeError('x')\n",
    b"RuntimeError: CUDA error: an illegal memory access was encountered\n",
    b"2025-10-06 20:03:20,000 - WARNING - autotuner.py:484 - flashinfer.jit: [Autotuner]: Skipping tactic <r> 3, "
    b"due to failure while profiling: CUDA error: an illegal memory access was encountered\n",
    b"[TensorRT-LLM][ERROR] Failed to initialize cutlass TMA WS grouped gemm. Error: Error Internal\n",
    b"1       0x7f3c2a1b0000 tensorrt_llm::common::throw\x1b[31mRuntimeError\r(char const*) + 78\n",
    b"Killed\n", b"[2025-10-06 20:05:22 TP0] Decode batch. #running-req: 1, #token: 5\n",
    b"The server is fired up and ready to roll!\n", b"x" * 70000 + b" Skipping tactic\n", b"    at foo.py:12\n",
    b"(EngineCore_DP0 pid=1) ERROR 10-06 20:10:01 [core.py:1] EngineCore failed to start.\n",
]


def _spliced(rnd: random.Random) -> bytes:
    """Slices of SM120 warmups with tracebacks, sticky errors, quoted init failures, CR/ESC frames,
    over-long lines, readiness and deaths spliced in at random."""
    warmups = [p.read_bytes().splitlines(True) * 3 for p in SM120]
    real = sorted((FIXTURES / "real").glob("*.log"))
    lines: list[bytes] = []
    for _ in range(rnd.randint(3, 10)):
        k = rnd.random()
        if k < 0.4:
            src = rnd.choice(warmups)
            a = rnd.randrange(len(src))
            lines += src[a:a + rnd.randint(300, 1500)]
        elif k < 0.75:
            lines += [rnd.choice(_TRICKY) for _ in range(rnd.randint(1, 5))]
        else:
            lines += rnd.choice(real).read_bytes().splitlines(True)
        if rnd.random() < 0.3:
            lines.insert(rnd.randrange(len(lines) + 1), rnd.choice(_TRICKY))
    return b"".join(lines)


@pytest.mark.parametrize("seed", range(6))
def test_warmups_spliced_with_tricky_lines_read_alike(tmp_path, seed):
    """The spliced warmups (_spliced): serial and parallel agree."""
    rnd = random.Random(seed)
    data = _spliced(rnd)
    path = tmp_path / "spliced.log"
    path.write_bytes(data)
    serial = _serial(data)
    for piece in (rnd.randint(2000, 30000), rnd.randint(100_000, 400_000)):
        assert _parallel(path, piece) == serial, piece


@pytest.mark.parametrize("seed", range(4))
def test_pieces_folded_part_by_part_read_alike(tmp_path, monkeypatch, seed):
    """A reader folds what it gathered after each block it reads (parallel.FOLD_RECORDS), holding
    back a run that may go on: with tiny blocks and parts, runs are cut anywhere, yet serial and
    parallel agree, and the runs still fold."""
    rnd = random.Random(100 + seed)
    monkeypatch.setattr(parallel, "READ", rnd.choice([700, 4096]))  # the forked readers see these
    monkeypatch.setattr(parallel, "FOLD_RECORDS", rnd.choice([1, 2, 5, 16]))
    data = b"".join([_spliced(rnd)] + [p.read_bytes() for p in SM120])
    path = tmp_path / "spliced.log"
    path.write_bytes(data)
    serial = _serial(data)
    for piece in (rnd.randint(2000, 30000), rnd.randint(100_000, 400_000)):
        assert _parallel(path, piece) == serial, piece
    assert _folded(path, 1 << 24) > 0


def _real_line(name: str, needle: str) -> bytes:
    """The first line of a real fixture that holds `needle` (verbatim, with its newline)."""
    return next(x for x in (FIXTURES / "real" / name).read_bytes().splitlines(True) if needle.encode() in x)


# flashinfer-ai/flashinfer#2077 (vLLM, PP8 on SM120): a caught tactic failure and its first two
# frames, each line under the worker's "(Worker_PPk pid=N) " prefix.
_PP_UNIT = (FIXTURES / "real" / "vllm-flashinfer-2077-sm120-skipping-tactic-tma-ws.log").read_bytes().splitlines(True)[:3]
_PP_DEATHS = [  # real lines that end or poison a process, from public threads (the fixtures' .toml)
    _real_line("vllm-club3090-16-enginecore-oom-output-handler-failed.log", "torch.OutOfMemoryError: CUDA out of memory"),
    _real_line("sglang-verl-1611-illegal-memory-sigquit-then-capture-bars-repeated.log",
               "RuntimeError: CUDA error: an illegal memory access"),
    _real_line("other-scalellm-38-compose-killed-exited-with-code-137.log", "exited with code 137"),
]


# How a rank's lines are tagged: vLLM's process wrapper tags every line (the thread's own shape; the
# tag is an engine's activity marker, so these runs stay lines), a logger with the rank in its
# format tags a record's first line only, the failure, not the frames of its multi-line message
# (sglang's "[time TPk] " format; these runs fold).
_RANK_TAGS = {"vllm": b"(Worker_PP%d pid=%d) ", "logger": b"[2025-11-11 06:41:27 TP%d] "}


def _as_rank(line: bytes, k: int, tactic: int, tag: str = "vllm") -> bytes:
    line = line.removeprefix(b"(Worker_PP0 pid=38385) ").replace(b"> 15, due to", b"> %d, due to" % tactic)
    if tag == "vllm":
        return _RANK_TAGS[tag] % (k, 38385 + k) + line
    return line if line[:1].isdigit() else _RANK_TAGS[tag] % k + line
@pytest.mark.parametrize("tag", sorted(_RANK_TAGS))
@pytest.mark.parametrize("seed", range(3))
def test_ranks_interleaved_in_a_run_and_deaths_inside_it_read_alike(tmp_path, seed, tag):
    """One run of caught tactic failures logged by eight pipeline ranks (flashinfer#2077's lines):
    whole failures from ranks in turn, lines of two ranks' failures interleaved, a death or a sticky
    error of one rank inside the run, and a run crossing the pieces' boundaries: serial and parallel
    diagnoses agree field for field, and under a logger's rank tag the whole-failure stretches fold."""
    rnd = random.Random(seed)
    lines: list[bytes] = []
    for i in range(rnd.randint(700, 1200)):
        k, tactic = rnd.randrange(8), rnd.randrange(40)
        unit = [_as_rank(x, k, tactic, tag) for x in _PP_UNIT]
        roll = rnd.random()
        if roll < 0.05:  # two ranks' failures, line by line
            other = [_as_rank(x, (k + 1) % 8, tactic + 1, tag) for x in _PP_UNIT]
            unit = [x for pair in zip(unit, other) for x in pair]
        elif roll < 0.06:  # a rank dies (or poisons its context) between a failure and its frames
            unit.insert(rnd.randint(1, len(unit)), _as_rank(rnd.choice(_PP_DEATHS), k, tactic, tag))
        elif roll < 0.07:
            unit = [_as_rank(rnd.choice(_PP_DEATHS), k, tactic, tag)] + unit
        lines += unit
    data = b"".join(lines)
    path = tmp_path / "pp8.log"
    path.write_bytes(data)
    serial = _serial(data)
    for piece in (rnd.randint(3000, 20000), rnd.randint(60_000, 200_000), 1 << 24):
        assert _parallel(path, piece) == serial, piece
    assert (_folded(path, 1 << 24) > 100) == (tag == "logger")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="readers fork on Linux only")
def test_readers_are_forked_on_linux():
    """Readers share the main process's modules and compiled rules only when forked (Python 3.14
    would start them from a fork server by default)."""
    assert parallel._context().get_start_method() == "fork"
