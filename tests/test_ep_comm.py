"""Engine.ep_comm: how vLLM and SGLang move tokens between expert-parallel ranks, per version,
held against real launch commands (tests/fixtures/a2a/commands.toml, each with its thread) and the
boundaries read in the wheels (engines/a2a.py); and `compare` following it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tilefit.engines import get_engine
from tilefit.errors import UsageError
from tilefit.launch import parse_launch
from tilefit.layout.plan import Layout

A2A = Path(__file__).parent / "fixtures" / "a2a"
COMMANDS = tomllib.loads((A2A / "commands.toml").read_text())["command"]
HELD_OUT = tomllib.loads((A2A / "held_out.toml").read_text())["command"]
CASES = [(c, v, mode) for c in COMMANDS + HELD_OUT for v, mode in c["expect"].items()]


@pytest.mark.parametrize("cmd,version,mode", CASES,
                         ids=[f"{c['source']}@{v}" for c, v, _ in CASES])
def test_real_commands_per_version(cmd, version, mode):
    spec = parse_launch(cmd["command"])
    assert spec.engine == cmd["engine"]
    got = get_engine(spec.engine).ep_comm(spec.layout, version=version, flags=spec.flags(),
                                          environ=spec.environ)
    assert got.mode == mode, got.why
    assert version in got.why


@pytest.mark.parametrize("cmd,version", [(c, v) for c in HELD_OUT for v in c.get("refused", ())])
def test_a_backend_the_release_renamed_is_refused(cmd, version):
    spec = parse_launch(cmd["command"])
    with pytest.raises(UsageError, match="has no all2all backend"):
        get_engine(spec.engine).ep_comm(spec.layout, version=version, flags=spec.flags(),
                                        environ=spec.environ)


def _vllm(version, *, dp=2, ep=2, flags=None, env=None):
    return get_engine("vllm").ep_comm(Layout(tp=1, ep=ep, dp=dp), version=version,
                                      flags=flags or {}, environ=env or {})


def test_vllm_without_data_parallel_ranks_replicates_tokens_whatever_the_backend():
    for v in ("0.10.1", "0.14.0", "0.33.0"):
        got = _vllm(v, dp=1, ep=8, flags={"all2all_backend": "deepep_low_latency"},
                    env={"VLLM_ALL2ALL_BACKEND": "deepep_low_latency"})
        assert got.mode == "allreduce" and "--data-parallel-size" in got.why


def test_vllm_prefill_context_ranks_use_the_backend_from_0_26():
    flags = {"all2all_backend": "deepep_high_throughput", "prefill_context_parallel_size": "2"}
    assert _vllm("0.25.0", dp=2, flags=flags).mode == "allreduce"  # layout.dp counts the pcp ranks
    assert _vllm("0.26.0", dp=2, flags=flags).mode == "alltoall"


def test_vllm_defaults_and_precedence():
    assert "naive" in _vllm("0.10.2").why and _vllm("0.10.2").mode == "allreduce"
    assert "allgather_reducescatter" in _vllm("0.11.0").why
    flag_and_env = ({"all2all_backend": "allgather_reducescatter"}, {"VLLM_ALL2ALL_BACKEND": "pplx"})
    assert _vllm("0.12.0", flags=flag_and_env[0], env=flag_and_env[1]).mode == "allreduce"  # flag wins
    assert _vllm("0.14.0", flags=flag_and_env[0], env=flag_and_env[1]).mode == "alltoall"  # env wins
    assert _vllm("0.16.0", env=flag_and_env[1]).mode == "allreduce"  # env gone
    # a flag before vLLM had it: the variable is what counts
    assert _vllm("0.10.2", flags={"all2all_backend": "deepep_low_latency"}).mode == "allreduce"


def test_vllm_remaps_and_kernel_dispatch():
    assert _vllm("0.17.0", flags={"all2all_backend": "pplx"}).mode == "allreduce"
    assert "runs as allgather_reducescatter" in _vllm("0.19.0", flags={"all2all_backend": "naive"}).why
    tp_only = {"moe_backend": "flashinfer_moe_ep_cutedsl"}
    assert _vllm("0.32.0", dp=1, ep=8, flags=tp_only).mode == "alltoall"
    assert _vllm("0.31.0", dp=1, ep=8, flags=tp_only).mode == "allreduce"


@pytest.mark.parametrize("version,backend,words", [
    ("0.33.0", "deepep", "no all2all backend 'deepep'"),
    ("0.14.0", "deepep_v2", "vLLM reads it from 0.24.0"),
    ("0.23.0", "mori", "vLLM 0.15.0-0.23.0 reads it"),
])
def test_vllm_backends_it_never_had_are_a_usage_error(version, backend, words):
    with pytest.raises(UsageError, match=words):
        _vllm(version, flags={"all2all_backend": backend})


def test_sglang_backends():
    sg = get_engine("sglang")
    lay = Layout(tp=1, ep=8)
    assert sg.ep_comm(lay, flags={}).mode == "allreduce"
    assert sg.ep_comm(lay, flags={"moe_a2a_backend": "mooncake"}).mode == "alltoall"
    with pytest.raises(UsageError, match="no --moe-a2a-backend"):
        sg.ep_comm(lay, version="0.4.6", flags={"moe_a2a_backend": "mooncake"})
    with pytest.raises(UsageError, match="--ep-comm"):
        sg.ep_comm(lay, flags={"moe_a2a_backend": "ascend_tp"})


def test_trtllm_says_it_is_not_read():
    got = get_engine("trtllm").ep_comm(Layout(tp=1, ep=8))
    assert got.mode == "allreduce" and "not read" in got.why


def test_compare_follows_the_engine_and_says_why(cli):
    """vllm-project/vllm#29670's command: the variable decides in 0.14, is ignored in 0.33."""
    import shlex

    cmd = next(c for c in COMMANDS if c["source"] == "vllm-project/vllm#29670")["command"]
    words = shlex.split(cmd.replace("\n", " ; "))

    def comm_line(*extra: str) -> str:
        r = cli("compare", "--gpu", "h200", "--model", "deepseek-v3", "--batch", "256", "--json",
                *extra, "--", *words)
        assert r.code == 0, r.err
        return next(a for a in r.json()["assumptions"] if a.startswith("EP communication"))

    old, new = comm_line("--engine-version", "0.14.0"), comm_line("--engine-version", "0.33.0")
    assert "all-to-all" in old and "VLLM_ALL2ALL_BACKEND=deepep_low_latency" in old
    assert "all-reduce" in new and "ignored from vLLM 0.16.0" in new
    assert "--ep-comm alltoall" in comm_line("--ep-comm", "alltoall")
