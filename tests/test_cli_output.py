"""The output edge: JSON errors, control characters, the terminal path (colour, wrapping, NO_COLOR),
help pages (every option described, defaults as typed, examples that parse), fit's tile view and
the progress displays."""

from __future__ import annotations

import io
import re
import shlex

import pytest
from conftest import REPO

from tilefit.cli.output import PLAIN, Table, Terminal, escape_control, plain, show

ANSI = re.compile(r"\x1b\[[0-9;]*m")


# --- JSON errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["plan", "--model", "no-such-model", "--json"], "unknown model 'no-such-model'"),
    (["plan", "--json"], "give --model"),  # --model or a launch command after --
    (["plan", "--model", "glm-5", "--batch", "0", "--json"], "positive integer"),
    (["fit", "--family", "triton-moe", "--arch", "sm75", "--json"], "tilefit gpus"),
    (["diagnose", "/no/such.log", "--json"], "no such log file"),
])
def test_json_errors_are_data_on_stdout_and_a_line_on_stderr(cli, args, needle):
    r = cli(*args)
    assert r.code == 2
    err = r.json()["error"]
    assert err["code"] == 2 and needle in err["message"]
    assert set(r.json()) == {"error"} and set(err) == {"code", "message"}
    assert r.err.count("\n") == 1 and r.err.startswith("tilefit: error: ") and needle in r.err


def test_without_json_an_error_leaves_stdout_empty(cli):
    r = cli("plan", "--model", "no-such-model")
    assert r.code == 2 and r.out == "" and "unknown model" in r.err


# --- control characters ---------------------------------------------------------------------------

def test_escape_control_makes_terminal_controls_visible():
    raw = "red \x1b[31mtext\x1b[0m bell\x07 back\x08 cr\r 8bit-csi \x9b2J nul\x00 tab\tnl\n"
    out = escape_control(raw)
    assert out == "red ^[[31mtext^[[0m bell^G back^H cr^M 8bit-csi \\x9b2J nul\\x00 tab\tnl\n"
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out)
    assert escape_control("plain text") == "plain text"


def test_show_escapes_log_text_in_plain_and_terminal_output():
    hostile = "decided by: \x1b[2J\x1b[H[Autotuner] skipped\x07"
    for term in (PLAIN, Terminal(True, 80), Terminal(False, 80)):
        buf = io.StringIO()
        show(hostile, Table.of(["line"], [(hostile,)]), term=term, file=buf)
        text = ANSI.sub("", buf.getvalue())  # rich's own colour codes aside
        assert "\x1b" not in text and "\x07" not in text
        assert "^[[2J^[[H[Autotuner] skipped^G" in text


# --- the terminal ---------------------------------------------------------------------------------

class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_detection_honours_no_color_and_pipes():
    assert Terminal.detect(io.StringIO(), {}) == PLAIN
    assert Terminal.detect(_Tty(), {}).color is True
    assert Terminal.detect(_Tty(), {"NO_COLOR": "1"}).color is False
    assert Terminal.detect(_Tty(), {"TERM": "dumb"}).color is False
    assert Terminal.detect(_Tty(), {"NO_COLOR": "1"}).width is not None  # still wraps


def _check_blocks():
    from tilefit.check.report import CheckRequest, run_check
    from tilefit.cli.check_cmd import blocks

    report = run_check(CheckRequest(model="glm-5-nvfp4", gpu="rtx-pro-6000", engine="sglang", tp=1, ep=8))
    return blocks(report)


def test_terminal_output_wraps_to_the_width_and_colours_verdicts():
    out = _check_blocks()
    buf = io.StringIO()
    show(*out, term=Terminal(True, 72), file=buf)
    text = buf.getvalue()
    lines = ANSI.sub("", text).splitlines()
    assert max(len(x.rstrip()) for x in lines) <= 72
    assert lines[0].startswith("GO-WITH-WARNINGS: glm-5-nvfp4 on 8 x rtx-pro-6000")
    # The verdict and the severities are coloured (yellow for warnings, cyan for info).
    assert re.search(r"\x1b\[[0-9;]*33m(\x1b\[[0-9;]*m)?GO-WITH-WARNINGS", text)
    assert re.search(r"\x1b\[[0-9;]*33mWARNING", text) and re.search(r"\x1b\[[0-9;]*36mINFO", text)
    # Every word of the plain text is still there, in order (rules aside): wrapping loses nothing.
    def words(t):
        return [w for w in t.split() if not set(w) <= {"-", "\u2500"}]
    assert words(ANSI.sub("", text)) == words(plain(*out))


def test_no_color_terminal_has_no_escape_codes_but_wraps():
    buf = io.StringIO()
    show(*_check_blocks(), term=Terminal(False, 60), file=buf)
    assert "\x1b" not in buf.getvalue()
    assert max(len(x.rstrip()) for x in buf.getvalue().splitlines()) <= 60


def test_piped_output_is_the_fixed_plain_text(cli):
    r = cli("check", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--ep", "8", "--engine", "sglang")
    assert r.out == plain(*_check_blocks()) + "\n" and "\x1b" not in r.out


# --- help -----------------------------------------------------------------------------------------

def _subparsers():
    import argparse

    from tilefit.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub


def test_every_command_and_option_has_help_and_examples():
    import argparse

    parser, sub = _subparsers()
    described = {a.dest: a.help for a in sub._choices_actions}
    for name, p in sub.choices.items():
        assert described.get(name), f"`tilefit {name}` has no description in `tilefit --help`"
        for action in p._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"tilefit {name} {'/'.join(action.option_strings) or action.dest} has no help"
        text = p.format_help()
        assert "examples:" in text and 2 <= text.count("\n  tilefit ") <= 3, name
        assert not re.search(r"\(default: \(", text), f"{name}: a tuple default printed as Python"


def test_one_commands_parser_is_the_full_parsers_part():
    """A run builds only its command's parser (main.COMMANDS): the same help, and COMMANDS names
    every command, so none goes missing from a run."""
    import argparse

    from tilefit.cli.main import COMMANDS, build_parser

    _, sub = _subparsers()
    assert list(sub.choices) == list(COMMANDS)
    for name in COMMANDS:
        one = next(a for a in build_parser(name)._actions if isinstance(a, argparse._SubParsersAction))
        assert name in one.choices and one.choices[name].format_help() == sub.choices[name].format_help()


def test_defaults_print_as_typed(cli):
    _, sub = _subparsers()
    assert "(default: 1,64,1024)" in sub.choices["plan"].format_help()
    assert "(1, 64, 1024)" not in sub.choices["plan"].format_help()


def test_every_example_parses():
    from tilefit.cli.examples import EXAMPLES
    from tilefit.cli.main import build_parser

    parser = build_parser()
    for command, examples in EXAMPLES.items():
        for _, line in examples:
            words = shlex.split(line)
            words = words[:next((i for i, w in enumerate(words) if w in ("|", ">", "2>&1")), len(words))]
            if words[0] != "tilefit":  # a pipeline: the tilefit part follows the pipe
                words = shlex.split(line.split("|", 1)[1])
            assert words[0] == "tilefit" and words[1] == command, line
            args = parser.parse_args(words[1:])
            assert args.func is not None


# --- fit: one row per tile ------------------------------------------------------------------------

def test_fit_shows_each_tile_at_its_deepest_fitting_pipeline(cli):
    from tilefit.hw.catalog import get_arch
    from tilefit.kernels.registry import get_family

    r = cli("fit", "--family", "triton-moe", "--arch", "sm120")
    assert r.code == 0 and "--all lists all 1920 configs" in r.out
    family, arch = get_family("triton-moe"), get_arch("sm120")
    rows = [line.split() for line in r.out.splitlines() if re.match(r"^\d+x\d+x\d+ ", line)]
    assert len(rows) == 60  # 5 BLOCK_M x 4 BLOCK_N x 3 BLOCK_K
    for row in rows:
        bm, bn, bk = map(int, row[0].split("x"))
        fits_at = {s: any(family.verdict(family.parse_config(f"{bm},{bn},{bk},{gm},{w},{s}"), arch, "bf16").fits
                          for gm in (1, 16, 32, 64) for w in (4, 8)) for s in (2, 3, 4, 5)}
        deepest = max((s for s, ok in fits_at.items() if ok), default=None)
        assert row[1] == (f"s{deepest}" if deepest else "-"), row
        assert (row[7] == "fits") == (deepest is not None)  # row[4:7] is "N of M"
    every = cli("fit", "--family", "triton-moe", "--arch", "sm120", "--all")
    assert sum(bool(re.match(r"^\d+x\d+x\d+ gm", x)) for x in every.out.splitlines()) == 1920


# --- progress -------------------------------------------------------------------------------------

def _events():
    yield "job", {"job": "gemm1", "batch": 1, "index": 0, "total": 2}
    yield "measured", {"config": "a", "result": "10.00 us", "time_us": 10.0}
    yield "measured", {"config": "b", "result": "8.00 us", "time_us": 8.0}
    yield "measured", {"config": "c", "result": "compile failed", "time_us": None}
    yield "row", {"job": "gemm1", "batch": 1, "config": "16x32x64 gm1 w4 s2", "time_us": 8.0, "trials": 3}
    yield "job", {"job": "gemm1", "batch": 64, "index": 1, "total": 2}


def test_tune_progress_plain_lines_off_a_terminal():
    from tilefit.cli.progress import TuneProgress

    buf = io.StringIO()
    p = TuneProgress(budget_minutes=10, stream=buf)
    for event, data in _events():
        p(event, data)
    p.close()
    assert buf.getvalue().splitlines() == ["tune: gemm1 batch 1 (1/2)", "tune:   gemm1 batch 1 -> 16x32x64 gm1 w4 s2 8.00 us (3 trials)",
                                           "tune: gemm1 batch 64 (2/2)"]


def test_tune_progress_counts_rows_done_when_gemms_are_searched_side_by_side():
    from tilefit.cli.progress import TuneProgress

    buf = io.StringIO()
    p = TuneProgress(stream=buf)
    row = {"config": "16x32x64 gm1 w4 s2", "time_us": 8.0, "trials": 3}
    # tune.run: gemm1's and gemm2's searches start before either ends
    p("job", {"job": "gemm1", "batch": 1, "index": 0, "total": 4})
    p("job", {"job": "gemm2", "batch": 1, "index": 1, "total": 4})
    assert p.done == 0
    p("row", {**row, "job": "gemm2", "batch": 1})
    p("job", {"job": "gemm2", "batch": 64, "index": 2, "total": 4})
    p("row", {**row, "job": "gemm1", "batch": 1})
    p("job", {"job": "gemm1", "batch": 64, "index": 3, "total": 4})
    p("row", {**row, "job": "gemm2", "batch": 64})
    p("row", {**row, "job": "gemm1", "batch": 64})
    assert p.done == 4 == p.total
    # the bar's best is the last started search's own, not the least time of both GEMMs' probes
    p("job", {"job": "gemm1", "batch": 256, "index": 4, "total": 6})
    p("job", {"job": "gemm2", "batch": 256, "index": 5, "total": 6})
    p("measured", {"job": "gemm1", "batch": 256, "config": "a", "result": "5.00 us", "time_us": 5.0})
    p("measured", {"job": "gemm2", "batch": 256, "config": "b", "result": "20.00 us", "time_us": 20.0})
    assert p.best == 20.0 and p.current == "gemm2 batch 256"
    assert "tune:   gemm2 batch 1 -> 16x32x64 gm1 w4 s2 8.00 us (3 trials)" in buf.getvalue().splitlines()


def test_tune_progress_best_is_the_search_s_own_when_a_gemm_s_segments_run_side_by_side():
    """tune.schedule: one GEMM's batch sizes below 1024 and from 1024 up are searched at once;
    a batch-16 probe's time is not the best of the batch-2048 search (nor the other way round)."""
    from tilefit.cli.progress import TuneProgress

    p = TuneProgress(stream=io.StringIO())
    p("job", {"job": "gemm1", "batch": 16, "index": 0, "total": 4})
    p("measured", {"job": "gemm1", "batch": 16, "config": "a", "result": "9.00 us", "time_us": 9.0})
    p("job", {"job": "gemm1", "batch": 2048, "index": 1, "total": 4})
    assert p.best is None and p.current == "gemm1 batch 2048"
    p("measured", {"job": "gemm1", "batch": 2048, "config": "b", "result": "400.00 us",
                   "time_us": 400.0})
    p("measured", {"job": "gemm1", "batch": 16, "config": "c", "result": "8.00 us", "time_us": 8.0})
    assert p.best == 400.0
    p("job", {"job": "gemm1", "batch": 24, "index": 2, "total": 4})
    p("measured", {"job": "gemm1", "batch": 2048, "config": "d", "result": "390.00 us",
                   "time_us": 390.0})
    assert p.best is None  # batch 24's search measured nothing yet


def test_the_evaluator_s_measured_event_names_its_batch(tmp_path):
    from tilefit.tune.evaluator import Evaluator
    from tilefit.tune.journal import Journal
    from tilefit.tune.results import Ok
    from tilefit.tune.targets.base import MOE_SPACE, TuneShape
    from tilefit.tune.targets.fake import FakeTarget

    class Pool:
        size, restarts = 1, 0

        def call(self, op, config, shape, batch):
            return None if op == "compile" else Ok(7.0)

    events = []
    target = FakeTarget(grid="distinct")
    shape = TuneShape(hidden=1024, width=512, experts=8, topk=2, dtype="bf16", gemm="gemm1")
    config = next(c for c in target.space(shape) if target.fit_reason(c, shape) is None)
    with Journal(tmp_path / "j.jsonl", resume=False, context={},
                 from_dict=MOE_SPACE.from_dict) as journal:
        ev = Evaluator("fake", target, journal, Pool(), Pool(), [], lambda e, d: events.append((e, d)))
        assert ev(shape, 2048, [config]) == [Ok(7.0)]
        ev.close()
    assert [(d["job"], d["batch"]) for e, d in events if e == "measured"] == [("gemm1", 2048)]


def test_tune_progress_bar_on_a_terminal_shows_counts_best_and_budget():
    from tilefit.cli.progress import TuneProgress

    buf = _Tty()
    p = TuneProgress(budget_minutes=10, stream=buf, live=True)
    events = list(_events())
    for event, data in events[:4]:
        p(event, data)
    status = p.status(now=p.started + 90)
    assert status == "3 configs timed, best 8.00 us, 8:30 of 10:00 budget left"
    for event, data in events[4:]:
        p(event, data)
    assert p.done == 1 and p.best is None and p.current == "gemm1 batch 64"
    p.close()
    assert "gemm1 batch" in ANSI.sub("", buf.getvalue())
    no_budget = TuneProgress(stream=io.StringIO())
    no_budget.done, no_budget.total = 1, 4
    assert no_budget.status(now=no_budget.started + 30).endswith("~1:30 left")


def test_bar_draws_only_on_a_terminal():
    from tilefit.cli.progress import Bar

    quiet = io.StringIO()
    with Bar("compiling 3 configs", 3, stream=quiet) as bar:
        bar.advance(3)
    assert quiet.getvalue() == "" and bar.live is False
    tty = _Tty()
    with Bar("compiling 3 configs", 3, stream=tty) as bar:
        bar.advance(3)
    assert bar.live is True and "compiling 3 configs" in ANSI.sub("", tty.getvalue())


def test_a_plain_table_inside_text_wraps_its_last_column_under_itself():
    text = "\n".join(["headline", "", Table.of(["config", "bytes", "why"], [
        ("128x256x64", 102400, "needs 102,400 B > 101,376 B on sm120 (over by 1,024 B); largest term: A buffers"),
        ("64x64x64", 50000, "fits")]).plain(), "", "after the table, a long line of prose " * 3])
    buf = io.StringIO()
    show(text, term=Terminal(False, 60), file=buf)
    lines = buf.getvalue().splitlines()
    assert max(len(x) for x in lines) <= 60
    start = lines[3].index("why") if "why" in lines[3] else lines[2].index("why")
    row = next(i for i, x in enumerate(lines) if x.startswith("128x256x64"))
    assert lines[row + 1].startswith(" " * start) and lines[row + 1][start] != " "  # under the why column
    assert lines[row + 2].startswith(" " * start) or lines[row + 2].startswith("64x64x64")
    def words(t):
        return [w for w in t.split() if set(w) != {"-"}]
    assert words(" ".join(lines)) == words(text)  # nothing lost but the rule's length


def test_diagnose_text_output_escapes_control_characters_from_the_log(cli, tmp_path):
    src = (REPO / "tests" / "fixtures" / "logs" / "vllm_illegal_instruction.log").read_text()
    log = tmp_path / "bell.log"
    log.write_text(src.replace("an illegal instruction was encountered",
                               "an illegal\x07 instruction was\x08 encountered\x1b]0;title\x07"))
    r = cli("diagnose", str(log))
    assert r.code == 1 and "decisive line" in r.out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", r.out)
    assert "illegal^G instruction was^H encountered" in r.out


def test_tune_progress_best_is_the_least_time_of_the_measured_events():
    from tilefit.cli.progress import TuneProgress

    p = TuneProgress(stream=io.StringIO())
    p("job", {"job": "gemm1", "batch": 1, "index": 0, "total": 1})
    for result, t in (("12.50 us", 12.5), ("compile failed: x", None), ("9.25 us", 9.25),
                      ("does not fit: shared memory needs 1 > 0", None)):
        p("measured", {"config": "c", "result": result, "time_us": t})
    assert p.timed == 4 and p.best == 9.25


def test_the_budget_clock_does_not_lose_a_second_to_floating_point():
    """CI once read '8:29 of 10:00' 90 s after the start: for some monotonic() readings
    (started + 90) - started is 90.000000000004 (these starts); the clock must read 8:30."""
    from tilefit.cli.progress import TuneProgress

    p = TuneProgress(budget_minutes=10, stream=_Tty(), live=True)
    for started in (4090.833771576286, 2097088.6396408544, 32678.938313922914, 0.1):
        p.started = started
        assert p.status(now=started + 90).endswith("8:30 of 10:00 budget left"), started
