"""`tilefit diagnose`: golden human output, JSON keys, exit codes, usage errors, stdin, --follow,
and the promise that the diagnose path imports neither torch nor triton."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import check_golden

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"


def rel(name: str) -> str:
    return f"tests/fixtures/logs/{name}"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)  # golden files show relative paths


# Logs whose explanations need no fit engine: their whole CLI output is golden.
@pytest.mark.parametrize("name,code", [
    ("vllm_sm120_triton_oor.log", 1),
    ("vllm_benchmark_moe_compiler_crash.log", 1),
    ("sglang_capture_in_progress.log", 3),
    ("sglang_tuner_oor_skipped.log", 0),
    ("trtllm_autotuner_recovered.log", 0),
    ("vllm_healthy_crlf_ansi.log", 0),
])
def test_golden_cli_output(cli, name, code):
    r = cli("diagnose", rel(name))
    assert r.code == code, r.err
    check_golden(f"diagnose/{name.replace('.log', '.txt')}", r.out)


# Logs with CUTLASS tiles: golden through the library with a stand-in fit engine, so the text does
# not change when the real CUTLASS model is refined.
@pytest.mark.parametrize("name", ["sglang_sm120_tactics_recovered.log", "sglang_sm120_tactics_oom.log"])
def test_golden_with_tile_explanations(name):
    from test_diagnose_verdict import FakeCutlassFamily

    from tilefit.diagnose import diagnose_stream
    from tilefit.diagnose.render import human

    with open(LOGS / name, "rb") as f:
        d = diagnose_stream(f, family_loader=lambda n: FakeCutlassFamily())
    check_golden(f"diagnose/{name.replace('.log', '.txt')}", human(d, rel(name)))


def test_human_output_starts_with_the_verdict(cli):
    r = cli("diagnose", rel("sglang_sm120_tactics_oom.log"), "--gpu", "rtx-pro-6000")
    first = r.out.splitlines()[0]
    assert r.code == 1 and first == "verdict: fatal (cause: cuda-oom)"
    assert "arch: sm120 (given)  gpu: rtx-pro-6000" in r.out


def test_json_has_the_issue_keys(cli):
    r = cli("diagnose", rel("sglang_sm120_tactics_recovered.log"), "--arch", "sm120", "--json")
    assert r.code == 0
    d = r.json()
    for key in ("verdict", "engine", "arch", "failures", "decisive_line", "ready_line", "explanations"):
        assert key in d
    assert d["verdict"] == "recovered" and d["engine"] == "sglang" and d["arch"] == "sm120"
    assert d["ready_line"] == d["decisive_line"] == 637
    f = d["failures"][0]
    for key in ("kind", "count", "first_line", "last_line", "tiles", "message"):
        assert key in f
    assert f["kind"] == "tactic-skipped" and f["count"] == 160 and "128x256x128" in f["tiles"]
    assert d["seconds_to_ready"] == 117.0
    assert all(set(e) == {"about", "finding", "remedy"} for e in d["explanations"])


def test_stdin(cli, monkeypatch):
    import io

    data = (LOGS / "vllm_benchmark_moe_compiler_crash.log").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    r = cli("diagnose", "-", "--json")
    assert r.code == 1 and r.json()["cause"] == "triton-compiler-crash" and r.json()["source"] == "<stdin>"


@pytest.mark.parametrize("args,needle", [
    (["diagnose", "no/such/file.log"], "no such log file"),
    (["diagnose", "tests/fixtures/logs"], "is a directory"),
    (["diagnose", rel("unrelated.log"), "--gpu", "rtx5090x"], "unknown GPU"),
    (["diagnose", rel("unrelated.log"), "--arch", "sm999"], "unknown arch"),
    (["diagnose", rel("unrelated.log"), "--gpu", "h200", "--arch", "sm120"], "give one of --gpu or --arch"),
])
def test_bad_usage_is_one_line_and_exit_2(cli, args, needle):
    r = cli(*args)
    assert r.code == 2 and r.out == ""
    assert needle in r.err and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


def test_unreadable_file(cli, tmp_path, monkeypatch):
    """Permission denied is one line and exit 2 (simulated: the tests may run as root)."""
    import builtins

    p = tmp_path / "secret.log"
    p.write_text("Killed\n")
    real_open = builtins.open

    def deny(file, *a, **k):
        if str(file) == str(p):
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", deny)
    r = cli("diagnose", str(p))
    assert r.code == 2 and "cannot read" in r.err and "Permission denied" in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_gzip_log(cli, tmp_path):
    import gzip

    p = tmp_path / "server.log.gz"
    p.write_bytes(gzip.compress((LOGS / "sglang_sm120_tactics_oom.log").read_bytes()))
    r = cli("diagnose", str(p), "--json")
    assert r.code == 1 and r.json()["cause"] == "cuda-oom"


def _writer(path: Path, chunks: list[bytes], pause: float) -> threading.Thread:
    def run():
        with open(path, "ab") as f:
            for c in chunks:
                time.sleep(pause)
                f.write(c)
                f.flush()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_follow_waits_for_ready(cli, tmp_path):
    src = (LOGS / "sglang_sm120_tactics_recovered.log").read_bytes()
    head, tail = src[:len(src) // 2], src[len(src) // 2:]
    p = tmp_path / "growing.log"
    p.write_bytes(head)
    t = _writer(p, [tail[:1000], tail[1000:]], 0.3)
    start = time.monotonic()
    r = cli("diagnose", str(p), "--follow", "--poll", "0.05", "--max-wait", "20", "--json")
    t.join()
    assert r.code == 0 and r.json()["verdict"] == "recovered", r.err
    assert time.monotonic() - start >= 0.5  # it waited for the writer


def test_follow_stops_on_a_confirmed_fatal(cli, tmp_path):
    src = (LOGS / "sglang_sm120_tactics_oom.log").read_bytes()
    p = tmp_path / "growing.log"
    p.write_bytes(src[:2000])
    t = _writer(p, [src[2000:]], 0.2)
    r = cli("diagnose", str(p), "--follow", "--poll", "0.05", "--max-wait", "20", "--settle", "30")
    t.join()
    assert r.code == 1 and r.out.startswith("verdict: fatal (cause: cuda-oom)")


def test_follow_gives_up_after_max_wait(cli, tmp_path):
    p = tmp_path / "stuck.log"
    p.write_bytes((LOGS / "sglang_capture_in_progress.log").read_bytes())
    start = time.monotonic()
    r = cli("diagnose", str(p), "--follow", "--poll", "0.05", "--max-wait", "0.3")
    assert r.code == 3 and r.out.startswith("verdict: in-progress")
    assert "stopped following after 0.3 s" in r.err
    assert time.monotonic() - start < 5


def test_follow_settles_an_unconfirmed_fatal(cli, tmp_path):
    p = tmp_path / "crash.log"
    p.write_bytes((LOGS / "vllm_benchmark_moe_compiler_crash.log").read_bytes())
    r = cli("diagnose", str(p), "--follow", "--poll", "0.05", "--max-wait", "20", "--settle", "0.2")
    assert r.code == 1


def test_diagnose_imports_neither_torch_nor_triton():
    probe = (
        "import sys, io, contextlib\n"
        "from tilefit.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main(['diagnose', {str(LOGS / 'sglang_sm120_tactics_oom.log')!r}, '--arch', 'sm120'])\n"
        "print(code, [m for m in ('torch', 'triton') if m in sys.modules])\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "1 []"


def test_stdin_is_read_when_the_log_is_dash():
    import subprocess
    import sys

    log = "[2025-10-06 20:05:17] The server is fired up and ready to roll!\n"
    r = subprocess.run([sys.executable, "-m", "tilefit.cli.main", "diagnose", "-", "--json"], input=log,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert '"verdict": "healthy"' in r.stdout


def test_truncated_gzip_is_a_usage_error(tmp_path):
    import gzip
    import subprocess
    import sys

    whole = gzip.compress(b"x\n" * 1000)
    p = tmp_path / "cut.log.gz"
    p.write_bytes(whole[: len(whole) // 2])
    r = subprocess.run([sys.executable, "-m", "tilefit.cli.main", "diagnose", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and "cannot read the log" in r.stderr and "Traceback" not in r.stderr
