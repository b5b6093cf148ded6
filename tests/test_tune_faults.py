"""Fault injection on the CPU with the fake target: a config whose compile crashes, hangs or
segfaults, a run that poisons its process, a shared-memory failure the model missed, and a run
killed with SIGKILL then resumed, which must end exactly where an uninterrupted run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tilefit.kernels.triton_moe.config import MoEConfig
from tilefit.tune.targets.base import MOE_SPACE
from tilefit.tune.results import CompileFailed, Crashed, LaunchFailed, Ok, Timeout
from tilefit.tune.run import JOURNAL, TuneRequest, tune
from tilefit.tune.targets.base import TargetSpec
from tune_faults_spec import CRASH, FATAL, GOOD, HANG, LIE, SEGV, SHAPE, faulty_spec
from tilefit.tune.pools import WorkerPool
from tilefit.tune.workers import Worker



def test_worker_survives_crash_hang_segfault_and_poison():
    w = Worker(faulty_spec())
    try:
        assert w.call("compile", GOOD, SHAPE, None, 20) is None
        assert isinstance(w.call("compile", CRASH, SHAPE, None, 20), CompileFailed)
        hung = w.call("compile", HANG, SHAPE, None, 1.0)
        assert hung == Timeout(1.0, "compile")
        seg = w.call("compile", SEGV, SHAPE, None, 20)
        assert isinstance(seg, Crashed) and seg.signal == signal.SIGSEGV
        poisoned = w.call("run", FATAL, SHAPE, 64, 20)
        assert isinstance(poisoned, LaunchFailed) and "illegal memory access" in poisoned.message
        ok = w.call("run", GOOD, SHAPE, 64, 20)  # a fresh process answers
        assert isinstance(ok, Ok) and ok.time_us > 0
        assert w.restarts == 3  # after the hang, the segfault and the poisoned context
    finally:
        w.stop()


def test_pool_keeps_order_and_isolates_failures():
    items = [(c, SHAPE, None) for c in (GOOD, CRASH, SEGV, GOOD)]
    with WorkerPool(faulty_spec(), [None, None], timeout=20) as pool:
        out = pool.map("compile", items)
    assert out[0] is None and out[3] is None
    assert isinstance(out[1], CompileFailed) and isinstance(out[2], Crashed)


def _request(out: Path, **kw) -> TuneRequest:
    base = dict(batches=(1, 64), out_dir=out, gpu="h200", device_name="NVIDIA H200",
                compile_workers=2, compile_timeout_s=1.0, run_timeout_s=5.0,
                options={"top": 12})
    base.update(kw)
    spec = base.pop("spec", faulty_spec())
    return TuneRequest(spec, (SHAPE,), **base)


def _outcome(report):
    return [(r.job, r.batch, r.config, r.time_us, r.trials) for r in report.rows]


def test_run_goes_on_through_faults_and_reports_model_bugs(tmp_path):
    # Exhaustive over the small 'distinct' grid, so every misbehaving config is certainly tried.
    spec = faulty_spec(jobs=["gemm1"])
    report = tune(_request(tmp_path, spec=spec, strategy="exhaustive", batches=(64,),
                           options={"chunk": 64}))
    (row,) = report.rows
    assert row.config is not None and row.time_us > 0
    assert row.failures.get("compile-failed") == 1 and row.failures.get("timeout") == 1
    assert row.failures.get("crashed") == 1 and row.failures.get("launch-failed") == 1
    assert [b.config for b in report.model_bugs] == [LIE]
    assert row.trials == row.space - row.prefiltered
    stored = json.loads(Path(report.files[0]).read_text())
    assert MoEConfig.from_dict(stored["gemm1"]["64"]) == row.config


_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_tune_faults import _request
from tune_faults_spec import faulty_spec
from tilefit.tune.run import tune
if __name__ == "__main__":
    tune(_request(Path({out!r}), spec=faulty_spec(run_sleep_s=0.02)))
"""


def test_sigkill_then_resume_equals_uninterrupted(tmp_path):
    clean = tune(_request(tmp_path / "clean"))
    killed_dir = tmp_path / "killed"
    code = _CHILD.format(tests=str(Path(__file__).parent), out=str(killed_dir))
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    journal = killed_dir / JOURNAL
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if journal.exists() and journal.read_text().count('"batch": 64') >= 5:
            break
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)  # the tuner and its workers, mid-run
    child.wait()
    assert journal.exists() and not (killed_dir / "tune_summary.json").exists()
    resumed = tune(_request(killed_dir, resume=True))
    assert resumed.resumed_entries > 0
    assert _outcome(resumed) == _outcome(clean)


def test_down_rule_and_tiny_budget(tmp_path):
    """SGLang's _down rule through `restrict`: gemm2 keeps gemm1's BLOCK_SIZE_M at every batch;
    a budget spent before the first trial still measures one config per batch size."""
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=2, grid="distinct",
                         down_same_block_m=True)
    report = tune(_request(tmp_path / "down", spec=spec, batches=(1, 16, 256)))
    by = {(r.job, r.batch): r.config for r in report.rows}
    for b in (1, 16, 256):
        assert by[("gemm2", b)].block_m == by[("gemm1", b)].block_m
    tiny = tune(_request(tmp_path / "tiny", spec=spec, budget_minutes=1e-6))
    assert all(r.config is not None and r.trials == 1 for r in tiny.rows)


def test_worker_reports_a_target_it_cannot_build():
    w = Worker(TargetSpec.of("tilefit.tune.targets.fake:NoSuchTarget"))
    try:
        r = w.call("compile", GOOD, SHAPE, None, 20)
        assert isinstance(r, LaunchFailed) and "could not build the target" in r.message
        assert "NoSuchTarget" in r.message
    finally:
        w.stop()


def test_prefetch_changes_no_pick_and_compiles_ahead(tmp_path, monkeypatch):
    """Idle compile workers precompile the model's favourites and the configs a search hints it
    may ask for next; the searches measure and pick exactly what they do without either."""
    import tilefit.tune.evaluator as run_mod
    from tilefit.tune.journal import read_entries

    monkeypatch.setattr(run_mod, "RESERVED_COMPILE_WORKERS", 1)
    spec = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", seed=3, grid="distinct")
    kw = dict(spec=spec, compile_workers=3, compile_timeout_s=20.0)
    plain = tune(_request(tmp_path / "plain", prefetch=0.0, hints=False, **kw))
    ahead = tune(_request(tmp_path / "ahead", prefetch=0.5, **kw))
    hinted = tune(_request(tmp_path / "hinted", prefetch=0.0, **kw))
    assert _outcome(ahead) == _outcome(plain) == _outcome(hinted)

    def compiled(name):
        return {e.config for e in read_entries(tmp_path / name / JOURNAL, MOE_SPACE.from_dict) if e.batch is None}

    measured = {e.config for e in read_entries(tmp_path / "plain" / JOURNAL, MOE_SPACE.from_dict) if e.batch is not None}
    assert compiled("plain") <= measured  # without prefetching, only what a search asked for
    assert compiled("ahead") - measured  # with it, configs no search asked for were compiled too
    assert compiled("hinted") - measured  # hints too compile configs a search then did not need
