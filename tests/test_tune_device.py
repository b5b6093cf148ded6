"""`tilefit tune` on a GPU not in the catalog: figures read from a (monkeypatched) device, the
rest given by flags or estimated and labelled as such; never a traceback."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tilefit.cli import tune_cmd
from tilefit.cli.main import build_parser
from tilefit.errors import UsageError
from tilefit.hw.catalog import get_gpu
from tilefit.tune import device as device_mod
from tilefit.tune.device import resolve_device
from tilefit.tune.targets.base import TargetSpec

ADA = "NVIDIA RTX 6000 Ada Generation"
FAST = ("--compile-workers", "2", "--compile-timeout", "20", "--run-timeout", "20")


def _props(major=8, minor=9, sms=142, clock_khz=10_001_000, bus_bits=384):
    """What torch.cuda.get_device_properties reports (memory fields absent on older torch)."""
    p = SimpleNamespace(name=ADA, major=major, minor=minor, multi_processor_count=sms,
                        total_memory=48 * 2**30)
    if clock_khz:
        p.memory_clock_rate, p.memory_bus_width = clock_khz, bus_bits
    return p


@pytest.fixture
def local_gpu(monkeypatch):
    def use(props, name=ADA):
        monkeypatch.setattr(tune_cmd, "_local_gpus", lambda: ([0], name))
        monkeypatch.setattr(device_mod, "device_properties", lambda index: props)
    return use


def test_catalog_gpu_needs_no_device_query(monkeypatch):
    monkeypatch.setattr(device_mod, "device_properties", lambda i: pytest.fail("queried"))
    f = resolve_device("NVIDIA H200", "bf16")
    assert f.from_catalog and f.gpu == get_gpu("h200") and f.lines() == [] and not f.estimated


def test_unknown_gpu_figures_from_device_and_estimates(monkeypatch):
    monkeypatch.setattr(device_mod, "device_properties", lambda i: _props())
    f = resolve_device(ADA, "bf16")
    assert not f.from_catalog and f.gpu.arch.name == "sm89" and f.gpu.sm_count == 142
    # DDR: 2 transfers per memory clock, over the bus width in bytes.
    assert f.gpu.mem_bandwidth_gbps == pytest.approx(2 * 10_001e6 * 48 / 1e9)
    ref = min((g for g in (get_gpu(k) for k in ("rtx-4090", "l40s", "l4"))),
              key=lambda g: abs(g.sm_count - 142))
    assert f.gpu.peak_tflops("bf16") == pytest.approx(ref.peak_tflops("bf16") * 142 / ref.sm_count)
    assert set(f.estimated) == {"memory bandwidth", "peak TFLOP/s"}
    text = "\n".join(f.lines())
    assert "not in tilefit's catalog" in text and "estimated" in text and "--peak-tflops" in text


def test_flags_replace_estimates_and_old_torch_falls_back(monkeypatch):
    monkeypatch.setattr(device_mod, "device_properties", lambda i: _props(clock_khz=None))
    f = resolve_device(ADA, "fp8", bandwidth_gbps=960, peak_tflops=700)
    assert f.gpu.mem_bandwidth_gbps == 960 and f.gpu.peak_tflops("fp8") == 700
    assert f.estimated == ()
    g = resolve_device(ADA, "bf16")  # no memory clock reported: the nearest sm89 entry's figure
    assert g.gpu.mem_bandwidth_gbps in {get_gpu(k).mem_bandwidth_gbps for k in ("l40s", "rtx-4090", "l4")}
    assert "memory bandwidth" in g.estimated


@pytest.mark.parametrize("props, message", [
    (_props(major=7, minor=5), "compute capability 7.5"),
    (RuntimeError("Found no NVIDIA driver"), "cannot be read through torch"),
])
def test_unusable_device_is_usage_error(monkeypatch, props, message):
    def query(index):
        if isinstance(props, Exception):
            raise props
        return props
    monkeypatch.setattr(device_mod, "device_properties", query)
    with pytest.raises(UsageError, match=message):
        resolve_device("NVIDIA A40", "bf16")


def test_cli_unknown_gpu_builds_request_with_device_arch(local_gpu, tmp_path):
    local_gpu(_props())
    args = build_parser().parse_args(["tune", "--model", "glm-5", "--ep", "8", "--out", str(tmp_path)])
    req = tune_cmd.build_request(args)
    assert req.figures is not None and not req.figures.from_catalog
    assert dict(req.target.kwargs)["arch"] == "sm89"
    assert req.target.build().arch.name == "sm89"  # the target's SMEM limits without a catalog entry


def test_cli_unknown_gpu_runs_and_says_what_is_estimated(cli, local_gpu, monkeypatch, tmp_path):
    """The whole command on an uncatalogued GPU: the request is built from the device, then run
    with the fake target (no GPU here) but the device's perf-model figures."""
    from tilefit.tune import run as run_mod

    local_gpu(_props())
    real_tune, seen = run_mod.tune, []

    def tune_on_cpu(req, progress):
        seen.append(req)
        fake = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", gpu="l40s", grid="distinct")
        return real_tune(dataclasses.replace(req, target=fake, devices=(None,)), progress)

    monkeypatch.setattr(run_mod, "tune", tune_on_cpu)
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--batches", "1,64", "--out", str(tmp_path),
            *FAST)
    assert r.code == 0, r.err
    assert "Traceback" not in r.err and "estimated" in r.err and "estimated" in r.out
    assert seen and seen[0].figures.gpu.sm_count == 142
    j = cli("tune", "--model", "glm-5", "--ep", "8", "--batches", "1", "--out",
            str(tmp_path / "j"), "--json", "--peak-tflops", "360", *FAST)
    assert j.code == 0, j.err
    dev = j.json()["device"]
    assert dev["from_catalog"] is False and dev["sm_count"] == 142 and dev["arch"] == "sm89"
    assert dev["estimated"] == ["memory bandwidth"] and dev["peak_tflops"] == {"bf16": 360.0}


def test_cli_unknown_cc_is_exit_2(cli, local_gpu, tmp_path):
    local_gpu(_props(major=7, minor=5), name="Tesla T4")
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--out", str(tmp_path))
    assert r.code == 2 and "compute capability 7.5" in r.err and "Traceback" not in r.err



def test_measured_events_carry_the_time(cli, local_gpu, monkeypatch, tmp_path):
    """The tuner's "measured" events give time_us (the progress bar's best-so-far) for every
    config that ran, and None for one that did not."""
    from tilefit.tune import run as run_mod

    local_gpu(_props())
    real_tune, events = run_mod.tune, []

    def tune_on_cpu(req, progress):
        fake = TargetSpec.of("tilefit.tune.targets.fake:FakeTarget", gpu="l40s", grid="distinct")

        def record(event, data):
            events.append((event, data))
            progress(event, data)

        return real_tune(dataclasses.replace(req, target=fake, devices=(None,)), record)

    monkeypatch.setattr(run_mod, "tune", tune_on_cpu)
    r = cli("tune", "--model", "glm-5", "--ep", "8", "--batches", "1", "--out", str(tmp_path), *FAST)
    assert r.code == 0, r.err
    measured = [d for e, d in events if e == "measured"]
    assert measured
    for d in measured:
        if d["result"].endswith(" us"):
            assert d["time_us"] == pytest.approx(float(d["result"][:-3]), abs=0.006)  # the text rounds to 0.01 us
        else:
            assert d["time_us"] is None
