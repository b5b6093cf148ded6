"""`tilefit tune --ray` on a local Ray cluster on the CPU: the same results and journal as the
local executor (replay and fake targets), misbehaving configs recorded as the same failure
values, a killed actor or lost task turned into a failure, and a resume across executors.
The benchmark actors need no GPU here (RayOptions(actor_gpus=0)). One cluster per module."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from tilefit.tune.journal import read_entries
from tilefit.tune.targets.base import MOE_SPACE
from tilefit.tune.results import Crashed, Ok, Timeout
from tilefit.tune.run import JOURNAL, TuneRequest, tune
from tilefit.tune.targets.base import TargetSpec
from tune_faults_spec import CRASH, GOOD, HANG, LIE, SEGV, SHAPE, faulty_spec
from tilefit.tune.targets.fake import FakeTarget
from tilefit.tune.targets.replay import record

try:
    import ray
except ImportError:
    ray = None
needs_ray = pytest.mark.skipif(ray is None, reason="ray is not installed (pip install 'tilefit[ray]')")



def _plain(**extra):
    return TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=7, grid="distinct", **extra)


@pytest.fixture(scope="module")
def cluster():
    """One local Ray instance for the module (start-up costs a few seconds)."""
    if ray is None:
        pytest.skip("ray is not installed (pip install 'tilefit[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


def _options(**kw):
    from tilefit.tune.ray_executor import RayOptions

    return RayOptions(**{"actor_gpus": 0, **kw})


def _request(out: Path, spec: TargetSpec, **kw) -> TuneRequest:
    base = dict(batches=(1, 64), out_dir=out, gpu="h200", device_name="NVIDIA H200",
                compile_workers=2, compile_timeout_s=20.0, run_timeout_s=20.0,
                options={"top": 12})
    base.update(kw)
    return TuneRequest(spec, (SHAPE,), **base)


def _outcome(report):
    return [(r.job, r.batch, r.config, r.time_us, r.trials, r.failures) for r in report.rows]


def _journal(out: Path) -> set:
    return {(e.key, e.result) for e in read_entries(out / JOURNAL, MOE_SPACE.from_dict)}


@pytest.fixture(scope="module")
def landscape(tmp_path_factory):
    """A recorded landscape with some configs missing (they fail in replay)."""
    path = tmp_path_factory.mktemp("rec") / "rec.jsonl"
    fake = FakeTarget(seed=5, grid="distinct")
    record(fake, [SHAPE.with_gemm("gemm1"), SHAPE.with_gemm("gemm2")], [1, 64], path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for i, line in enumerate(lines) if i % 7 != 3))
    return TargetSpec.of("tilefit.tune.targets.replay:ReplayTarget", path=str(path))


@needs_ray
def test_replay_same_results_and_journal_as_local(cluster, landscape, tmp_path):
    local = tune(_request(tmp_path / "local", landscape))
    remote = tune(_request(tmp_path / "ray", landscape,
                           ray=_options(bench_actors=2, actor_cpus=0.5)))
    assert _outcome(remote) == _outcome(local)
    assert any(r.failures.get("launch-failed") for r in local.rows)  # the missing configs
    assert _journal(tmp_path / "ray") == _journal(tmp_path / "local")
    assert [Path(f).name for f in remote.files] == [Path(f).name for f in local.files]
    for a, b in zip(remote.files, local.files):
        assert json.loads(Path(a).read_text()) == json.loads(Path(b).read_text())


@needs_ray
def test_crashing_configs_are_recorded_like_local(cluster, tmp_path):
    # Exhaustive over the small grid, so every misbehaving config is certainly tried.
    spec = faulty_spec(jobs=["gemm1"])
    kw = dict(strategy="exhaustive", batches=(64,), options={"chunk": 64}, compile_timeout_s=1.0,
              run_timeout_s=5.0)
    local = tune(_request(tmp_path / "local", spec, **kw))
    remote = tune(_request(tmp_path / "ray", spec, ray=_options(), **kw))
    assert _outcome(remote) == _outcome(local)
    (row,) = remote.rows
    assert row.config is not None and row.failures == {"compile-failed": 1, "timeout": 1,
                                                       "crashed": 1, "launch-failed": 1,
                                                       "does-not-fit": 1}
    assert [b.config for b in remote.model_bugs] == [LIE]
    journal = _journal(tmp_path / "ray")
    assert journal == _journal(tmp_path / "local")
    compiled = {key[3].num_warps: r for key, r in journal if key[2] is None and key[3] == SEGV}
    assert compiled == {SEGV.num_warps: Crashed(signal.SIGSEGV, None, "compile")}
    assert remote.worker_restarts >= 3  # after the hang, the segfault and the poisoned context


@needs_ray
def test_lost_actor_and_task_become_failures(cluster):
    from tilefit.tune.ray_executor import RayBenchPool, RayCompilePool

    spec = faulty_spec()
    with RayBenchPool(cluster, spec, 1, gpus=0, timeout=20.0) as bench:
        assert isinstance(bench.call("run", GOOD, SHAPE, 64), Ok)
        dead = bench.actors[0]
        cluster.kill(dead)  # the actor (or its node) is gone; ray.kill is asynchronous:
        with pytest.raises(cluster.exceptions.RayActorError):
            for _ in range(100):
                cluster.get(dead.stop.remote(), timeout=20)
        assert bench.call("run", GOOD, SHAPE, 64) == Crashed(None, None, "run")
        assert isinstance(bench.call("run", GOOD, SHAPE, 64), Ok)  # a fresh actor answers
        assert bench.restarts == 1
    # A task that outlives the driver's deadline is cancelled (a negative grace: the driver
    # gives up after 1 s, before the Worker inside would after 30 s).
    with RayCompilePool(cluster, spec, 1, timeout=30.0, grace=-29.0) as pool:
        assert pool.call("compile", HANG, SHAPE, None) == Timeout(30.0, "compile")
        pool.grace = 30.0  # a new task process and Worker start, then answer as usual
        assert pool.map("compile", [(GOOD, SHAPE, None), (CRASH, SHAPE, None)])[0] is None


@needs_ray
def test_resume_across_executors(cluster, landscape, tmp_path):
    """A local run cut short (the journal of a kill: a prefix and a torn last line) resumed on
    Ray ends where an uninterrupted run ends."""
    clean = tune(_request(tmp_path / "clean", landscape))
    cut = tmp_path / "cut"
    cut.mkdir()
    text = (tmp_path / "clean" / JOURNAL).read_text()
    lines = text.splitlines(keepends=True)
    (cut / JOURNAL).write_text("".join(lines[: len(lines) // 2]) + lines[len(lines) // 2][:20])
    resumed = tune(_request(cut, landscape, resume=True, ray=_options()))
    assert resumed.resumed_entries == len(lines) // 2
    assert _outcome(resumed) == _outcome(clean)
    assert _journal(cut) == _journal(tmp_path / "clean")


@needs_ray
def test_cli_ray_flag_runs_on_the_cluster(cli, cluster, tmp_path):
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", "1,64",
            "--out", str(tmp_path), "--json", "--compile-timeout", "20", "--run-timeout", "20",
            "--ray")
    assert r.code == 0, r.err
    rows = r.json()["rows"]
    assert [(row["job"], row["batch"]) for row in rows] == \
        [("gemm1", 1), ("gemm1", 64), ("gemm2", 1), ("gemm2", 64)]
    assert all(row["config"] and row["time_us"] > 0 for row in rows)


def test_cli_ray_without_ray_names_the_extra(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", "1",
            "--out", str(tmp_path), "--ray")
    assert r.code == 2
    assert "pip install 'tilefit[ray]'" in r.err and len(r.err.strip().splitlines()) == 1
    assert not (tmp_path / JOURNAL).exists()


@needs_ray
def test_cli_ray_unreachable_address_is_usage_error(cli, tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--target", "fake", "--batches", "1",
            "--out", str(tmp_path), "--ray", f"127.0.0.1:{port}")
    assert r.code == 2 and f"--ray 127.0.0.1:{port}: no Ray cluster answers there" in r.err
    assert not (tmp_path / JOURNAL).exists()


@needs_ray
def test_cli_ray_needs_gpus_on_the_cluster_and_no_local_pick(cli, cluster, tmp_path):
    common = ("tune", "--model", "glm-5", "--ep", "8", "--batches", "1", "--out", str(tmp_path))
    r = cli(*common, "--target", "tilefit", "--ray")  # this test cluster has CPUs only
    assert r.code == 2 and "the Ray cluster has no GPU to tune on" in r.err, r.err
    r = cli(*common, "--target", "fake", "--ray", "--gpus", "0")
    assert r.code == 2 and "--gpus picks local GPUs" in r.err
    assert not (tmp_path / JOURNAL).exists()


_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import ray
from test_tune_ray import _options, _request, _plain
from tilefit.tune.run import tune
if __name__ == "__main__":
    ray.init(address={address!r}, log_to_driver=False, logging_level="ERROR")
    tune(_request(Path({out!r}), _plain(run_sleep_s=0.02), ray=_options()))
"""


@needs_ray
def test_sigkill_of_the_driver_then_resume_on_ray(cluster, tmp_path):
    """The tuner (a Ray driver) SIGKILLed mid-run: the cluster lets its actors go, and a resumed
    run ends where an uninterrupted local run ends."""
    import os
    import subprocess
    import time

    clean = tune(_request(tmp_path / "clean", _plain()))
    killed = tmp_path / "killed"
    code = _CHILD.format(tests=str(Path(__file__).parent), out=str(killed),
                         address=cluster.get_runtime_context().gcs_address)
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    journal = killed / JOURNAL
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and child.poll() is None:
        if journal.exists() and journal.read_text().count('"batch": 64') >= 5:
            break
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    assert journal.exists() and not (killed / "tune_summary.json").exists()
    resumed = tune(_request(killed, _plain(), resume=True, ray=_options()))
    assert resumed.resumed_entries > 0
    assert _outcome(resumed) == _outcome(clean)
