"""Fuzz over the CLI's argument space: thousands of command lines (fixed seed) in-process through
main(), a small sample through a real process. Every one must end with a documented exit code
(0, 1, 2, 3), never 70 (an internal error is a bug), never a traceback, and a refusal (2) is one
line on stderr.

The options come from the parser itself (so a new option is fuzzed without editing this file);
their values from pools of valid names and numbers mixed with hostile ones (5,000 digits, nan,
names over 255 characters, devices, control characters). Nothing here needs a GPU or runs long:
`tune` stops after validating its arguments, `compare --measure` measures nothing, and options
that wait (`diagnose --follow`) or leave the machine (`tune --ray`) are not generated.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout

import pytest

from conftest import FIXTURES, REPO

DOCUMENTED = {0, 1, 2, 3}
CASES = int(os.environ.get("TILEFIT_FUZZ_CASES", "2500"))
SEED = 16
SKIPPED = {"--follow", "--ray", "--verify", "--help"}  # wait, leave the machine, compile, print help
# Options that clean command lines carry so that they get past the first check: tune on the CPU
# targets, fit with one of --gpu/--arch (this machine has no GPU to default to).
CARRIED = {"tune": [("--target",)], "fit": [("--gpu", "--arch")]}

D5000 = "9" * 5000
HOSTILE = ["", " ", "-1", "0", "nan", "inf", "-inf", "1e999", D5000, "x" * 300, "\x1b[31mred\x07", "é",
           "/dev/null", "../", ",", "=", "0x10", "1_000", "²"]
COUNTS = (["1", "2", "4", "8"], ["16", "3", "64", "0", "-2", "1.5", "x", "1e3", D5000, "2000000000", "+4"])
BATCHES = (["1", "1,64", "16,4096", "64"], ["0", ",", "1,x", "20000000", "1," + D5000, "1,1,1"])
FLOATS = (["1", "0.5", "30"], ["nan", "inf", "-inf", "-1", "0", "1e999", "x", "1e-300"])


def _pools(tmp: str) -> dict[str, tuple[list[str], list[str]]]:
    """(valid, hostile) values per option dest; a dest not named here draws from HOSTILE."""
    configs = FIXTURES / "configs"
    folders = sorted(str(p) for p in configs.iterdir() if p.is_dir())[:4] if configs.is_dir() else []
    logs = sorted(str(p) for p in (FIXTURES / "real").glob("*.log"))[:3]
    return {
        "model": (["mixtral-8x7b", "glm-5", "qwen3-30b-a3b", "kimi-k2", "gpt-oss-120b", *folders, f"{tmp}/config.json"],
                  ["glm5", f"{tmp}/huge-int", f"{tmp}/million-experts", "/dev/zero", "./nonexistent/config.json",
                   "x" * 300, "./" + "y" * 300, tmp]),
        "gpu": (["h100", "h200", "rtx-pro-6000", "b200", "rtx-5090"], ["a100x", "rtx5900", ""]),
        "arch": (["sm90", "sm100", "sm120", "sm80", "sm103"], ["sm999", "90"]),
        "family": (["triton-moe", "flashinfer-cutlass"], ["cutlass", ""]),
        "dtype": (["bf16", "fp16", "fp8", "fp8-block", "nvfp4", "mxfp4"], ["int4"]),
        "config": (["64,128,64,16,4,3", "16,32,64,1,4,2", "128x256x128", "CtaShape128x256x64B finalize",
                    "128x128x128 swap-ab c2x1x1", "128x128x128 ultra"], [D5000 + "x128x128", "1,2,3", "128x"]),
        "engine_version": (["0.5.2", "0.4.9", "0.7.4", "v0.6.8.post1", "2025.1"], ["banana", D5000]),
        "flashinfer": (["0.5.2", "0.6.1", "0.7.4", "0.2"], ["banana", D5000]),
        "layouts": (["tp8", "ep8", "tp2ep4", "tp8,ep8", "tp4ep2,tp1ep8"], ["tp" + D5000, "tp0ep8", "ep", "x"]),
        "interconnect": (["nvlink4", "nvlink5", "pcie4", "pcie5"], ["infiniband"]),
        "tp": COUNTS, "ep": COUNTS, "dp": COUNTS, "reps": COUNTS, "trials": COUNTS, "compile_workers": COUNTS,
        "gpus": (["8", "8", "4", "2", "1"], COUNTS[1] + ["0,1", "0,0"]),
        "jobs": (["1", "2"], ["0", "-1", "x", "nan"]),
        "batch": BATCHES, "batches": BATCHES, "exhaustive_at": BATCHES,
        "budget": FLOATS, "compile_timeout": FLOATS, "run_timeout": FLOATS, "mem_bandwidth": FLOATS,
        "peak_tflops": FLOATS, "poll": FLOATS, "max_wait": FLOATS, "settle": FLOATS,
        "target": (["fake", "replay"], ["tilefit", "vllm", "sglang", "nope"]),
        "strategy": (["fast", "exhaustive"], ["annealing"]),
        "strategy_option": (["top=4"], ["seed=3", "x", "=", "top=nan", "top=" + D5000, "bogus=1"]),
        "replay": ([f"{tmp}/journal.jsonl"], ["/dev/null", "./nonexistent.jsonl", "x" * 300]),
        "out": ([f"{tmp}/out"], [f"{tmp}/file/sub", f"{tmp}/" + "z" * 300]),
        "config_dir": ([tmp], [f"{tmp}/tuned", "/nonexistent", "/dev/null", "x" * 300]),
        "env": (["SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=0", "VLLM_TUNED_CONFIG_FOLDER=/nonexistent"],
                ["A=B", "noequals", "=x", "SGLANG_MOE_CONFIG_DIR=" + tmp]),
        "log": ([*logs], [f"{tmp}/empty.log", f"{tmp}/binary.log", "/dev/null", tmp, "./nonexistent.log",
                          "x" * 300]),
        "mem_fraction": (["0.9", "0.8"], ["0", "1.5", "nan", "inf", "-0.5"]),
        "context_length": (["4096", "32768"], COUNTS[1]),
        "max_running_requests": (["64", "256"], COUNTS[1]),
        "chunked_prefill": (["8192"], COUNTS[1]),
        # The engine's launch command after `--` (check, plan, compare), split on spaces.
        "launch": (["python -m sglang.launch_server --model-path mixtral-8x7b --tp 8",
                    "python -m sglang.launch_server --model-path glm-5 --tp 8 --ep 8 --mem-fraction-static 0.85",
                    "vllm serve mixtral-8x7b -tp 8 --enable-expert-parallel --max-model-len 32768",
                    f"trtllm-serve {tmp} --tp_size 8 --ep_size 8"],
                   ["python -m sglang.launch_server --model-path glm-5 --tp " + D5000,
                    "python -m sglang.launch_server --model-path glm-5 --tp 8 --mem-fraction-static nan",
                    "python -m sglang.launch_server --model-path glm-5 --cuda-graph-bs 1 2 " + D5000,
                    "vllm serve glm-5 -tp inf", "vllm serve glm-5 --gpu-memory-utilization 1e999",
                    "trtllm-serve glm-5 --extra_llm_api_options /dev/zero",
                    f"trtllm-serve glm-5 --extra_llm_api_options {tmp}/binary.log",
                    "python -m sglang.launch_server", "X=1", "--tp 8", "nonsense --tp 8"]),
    }


def _pool_for(action: argparse.Action, pools: dict[str, tuple[list[str], list[str]]]) -> tuple[list[str], list[str]]:
    """An option's pool: named above, else its choices, else by its type, else HOSTILE alone."""
    if action.dest in pools:
        return pools[action.dest]
    if action.choices:
        return [str(c) for c in action.choices], ["x"]
    by_type = {"positive_int": COUNTS, "int_list": BATCHES, "positive_float": FLOATS}
    return by_type.get(getattr(action.type, "__name__", ""), ([], HOSTILE))


def _inputs(tmp) -> None:
    """Files the pools point at: a valid config, hostile configs, logs, a tuned-config folder."""
    mixtral = {"num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": 4096,
               "intermediate_size": 14336, "num_hidden_layers": 32}
    (tmp / "config.json").write_text(json.dumps(mixtral))
    for name, text in (("huge-int", json.dumps(mixtral)[:-1] + f', "x": {D5000}}}'),
                       ("million-experts", json.dumps({**mixtral, "num_local_experts": 10**6}))):
        (tmp / name).mkdir()
        (tmp / name / "config.json").write_text(text)
    (tmp / "empty.log").write_text("")
    (tmp / "binary.log").write_bytes(bytes(range(256)) * 64)
    (tmp / "file").write_text("")
    (tmp / "journal.jsonl").write_text('{"v": 1, "target": "fake"}\n{"torn')
    (tmp / "tuned").mkdir()
    (tmp / "tuned" / "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json").write_text('{"1": {"BLOCK_SIZE_M": ' + D5000 + "}}")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    from tilefit.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p for name, p in sub.choices.items() if name not in ("examples",)}


def _command_line(rng: random.Random, name: str, parser: argparse.ArgumentParser,
                  pools: dict[str, tuple[list[str], list[str]]]) -> list[str]:
    """One command line. A third are clean (valid values only: the deep paths run), a third carry
    one hostile value, a third are chaos (any value hostile with 30% odds, required ones dropped)."""
    mode = rng.choice(("clean", "one", "chaos"))
    argv = [name]
    actions = [a for a in parser._actions
               if not isinstance(a, argparse._HelpAction) and not set(a.option_strings) & SKIPPED]
    bad = rng.randrange(len(actions)) if mode == "one" and actions else -1
    carried = {rng.choice(group) for group in CARRIED.get(name, [])} if mode != "chaos" else set()
    tail: list[str] = []
    for i, action in enumerate(actions):
        wanted = action.required if mode != "chaos" or rng.random() < 0.9 else not action.required
        wanted = wanted or bool(carried & set(action.option_strings))
        if not wanted and rng.random() > (0.2 if mode == "clean" else 0.35) and i != bad:
            continue
        if action.nargs == 0:
            argv.append(action.option_strings[0])
            continue
        valid, hostile = _pool_for(action, pools)
        if i == bad or not valid or (mode == "chaos" and rng.random() < 0.3):
            value = rng.choice(hostile + HOSTILE if rng.random() < 0.3 else hostile or HOSTILE)
        else:
            value = rng.choice(valid)
        if action.nargs == argparse.REMAINDER:  # the launch command goes last, after `--`
            tail = ["--", *value.split(" ")]
            continue
        if not action.option_strings:  # a positional
            argv.append(value)
        elif value.startswith("-"):
            argv.append(f"{action.option_strings[0]}={value}")
        else:
            argv += [action.option_strings[0], value]
    r = rng.random()
    if mode == "chaos" and r < 0.1:
        argv.append("--bogus")
    elif mode == "chaos" and r < 0.2:
        argv.append("stray")
    elif mode == "chaos" and r < 0.3 and len(argv) > 2:
        argv.pop()  # an option left without its value
    return argv + tail


def _validate_only(monkeypatch) -> None:
    """tune stops after building its request; compare --measure measures nothing."""
    from tilefit.cli import tune_cmd
    from tilefit.compare import data as compare_data

    monkeypatch.setattr(tune_cmd, "run", lambda args: (tune_cmd.build_request(args), 0)[1])
    monkeypatch.setattr(compare_data, "_measure", lambda *a, **k: {})


def _run_in_process(argv: list[str]) -> tuple[int, str]:
    from tilefit.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's own exits (--version)
            code = e.code if isinstance(e.code, int) else 2
    return code, err.getvalue()


def _verdict(argv: list[str], code: int, err: str) -> str | None:
    """What is wrong with this outcome, or None."""
    shown = " ".join(a if len(a) < 60 else a[:20] + f"...({len(a)})" for a in argv)
    if code not in DOCUMENTED:
        return f"exit {code}: tilefit {shown}: {err.strip()[:300]}"
    if "Traceback" in err:
        return f"traceback: tilefit {shown}: {err[-300:]}"
    if code == 2 and err.count("\n") != 1:
        return f"exit 2 with {err.count(chr(10))} lines on stderr: tilefit {shown}: {err[:300]}"
    return None


@pytest.fixture
def fuzz_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEFIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    _inputs(tmp_path)
    return _pools(str(tmp_path))


HEADROOM = 3 * 2**30  # address space a case may add: a reader without bound fails here, not the machine


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


@pytest.fixture
def memory_bound():
    """Cap this process's address space at what it uses now plus HEADROOM for the test, so a case
    that reads /dev/zero becomes a MemoryError (exit 70, a failure) instead of an OOM kill."""
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        limit = _vm_size() + HEADROOM
    except (OSError, StopIteration):
        yield
        return
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _bounded_child() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))


def test_cli_fuzz_in_process(fuzz_inputs, monkeypatch, memory_bound):
    _validate_only(monkeypatch)
    rng = random.Random(SEED)
    commands = _subcommands()
    names = sorted(commands)
    failures, codes = [], {}
    start = time.monotonic()
    for _ in range(CASES):
        name = rng.choice(names)
        argv = _command_line(rng, name, commands[name], fuzz_inputs)
        code, err = _run_in_process(argv)
        codes[code] = codes.get(code, 0) + 1
        problem = _verdict(argv, code, err)
        if problem:
            failures.append(problem)
    elapsed = time.monotonic() - start
    assert not failures, f"{len(failures)} of {CASES} command lines failed:\n" + "\n".join(failures[:15])
    # The space is explored, not just refused: some runs succeed and some find something.
    assert codes.get(0, 0) > CASES // 20 and codes.get(2, 0) > CASES // 10, codes
    assert elapsed < 120, f"{CASES} cases took {elapsed:.0f} s"


def test_cli_fuzz_through_a_process(fuzz_inputs):
    """A sample through `python -m tilefit`: the exit status a shell sees is documented too."""
    rng = random.Random(SEED + 1)
    commands = {k: v for k, v in _subcommands().items() if k != "tune"}  # tune is not stubbed here
    names = sorted(commands)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    failures = []
    for _ in range(12):
        name = rng.choice(names)
        argv = [a for a in _command_line(rng, name, commands[name], fuzz_inputs) if a != "--measure"]
        r = subprocess.run([sys.executable, "-m", "tilefit", *argv], capture_output=True, text=True,
                           env=env, timeout=120, errors="replace", preexec_fn=_bounded_child)
        problem = _verdict(argv, r.returncode, r.stderr)
        if problem:
            failures.append(problem)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("argv, needle", [
    (["tune", "--model", "glm-5", "--target", "replay"], "--target replay needs --replay FILE"),
    (["tune", "--model", "glm-5", "--replay", "x" * 300], "File name too long"),
])
def test_found_by_the_fuzz(cli, argv, needle):
    """Command lines the fuzz found ending in an internal error (exit 70), now one line, exit 2."""
    r = cli(*argv)
    assert r.code == 2 and r.err.count("\n") == 1 and needle in r.err, r.err


@pytest.mark.parametrize("content, needle", [
    ('{"1": {"BLOCK_SIZE_M": ' + D5000 + "}}", "an integer of 5,000 digits"),
    ('{"1": {"BLOCK_SIZE_M": "64", "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, '
     '"num_stages": 1e400}}', "must be integers"),
    (None, None),
])
def test_tuned_config_files_found_by_the_fuzz(cli, tmp_path, content, needle):
    """check --config-dir with a hostile tuned file (an OverflowError on 1e400 was exit 70; a
    5,000-digit value Python's ValueError) or a name over 255 characters (exit 70)."""
    name = tmp_path / "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"
    if content is None:
        os.mkfifo(name)
    else:
        name.write_text(content)
    r = cli("check", "--model", "mixtral-8x7b", "--gpu", "h100", "--engine", "vllm", "--config-dir", str(tmp_path))
    if needle is None:  # a FIFO is not a file the engine would load: skipped, never opened
        assert r.code in (0, 1) and r.err == ""
    else:
        assert r.code == 2 and r.err.count("\n") == 1 and needle in r.err, r.err
    r = cli("check", "--model", "mixtral-8x7b", "--gpu", "h100", "--engine", "vllm", "--config-dir", "x" * 300)
    assert r.code == 2 and "File name too long" in r.err


@pytest.mark.parametrize("options_file, needle", [
    ("/dev/zero", "is not a regular file"),  # read whole, it took the machine's memory
    ("binary", "is not text"),  # a UnicodeDecodeError, exit 70
])
def test_launch_options_files_found_by_the_fuzz(cli, tmp_path, options_file, needle):
    if options_file == "binary":
        options_file = str(tmp_path / "options.yaml")
        (tmp_path / "options.yaml").write_bytes(bytes(range(256)))
    start = time.monotonic()
    r = cli("check", "--gpu", "h100", "--", "trtllm-serve", "glm-5", "--extra_llm_api_options", options_file)
    assert time.monotonic() - start < 1.0
    assert r.code == 2 and r.err.count("\n") == 1 and needle in r.err, r.err
