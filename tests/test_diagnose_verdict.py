"""Verdicts, causes and explanations on the fixture logs (tests/fixtures/logs, each in its engine's
real format) and on small logs built in the test to isolate one behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest

from tilefit.diagnose import diagnose_bytes, diagnose_stream
from tilefit.diagnose import events as ev
from tilefit.hw.catalog import get_arch
from tilefit.kernels.base import SmemFootprint, SmemTerm, judge

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"


def diagnose_file(name: str, **kw):
    with open(LOGS / name, "rb") as f:
        return diagnose_stream(f, **kw)


@pytest.mark.parametrize("name,verdict,cause,engine", [
    ("sglang_sm120_tactics_recovered.log", "recovered", None, "sglang"),
    ("sglang_sm120_tactics_oom.log", "fatal", ev.CUDA_OOM, "sglang"),
    ("vllm_benchmark_moe_compiler_crash.log", "fatal", ev.TRITON_CRASH, "triton"),
    ("vllm_sm120_triton_oor.log", "fatal", ev.TRITON_OOR, "vllm"),
    ("sglang_capture_in_progress.log", "in-progress", None, "sglang"),
    ("sglang_tuner_oor_skipped.log", "recovered", None, "triton"),
    ("trtllm_autotuner_recovered.log", "recovered", None, "trtllm"),
    ("vllm_flashinfer_skipped_recovered.log", "recovered", None, "vllm"),
    ("vllm_healthy_crlf_ansi.log", "healthy", None, "vllm"),
    ("cutlass_example_init_failed.log", "fatal", ev.CUTLASS_INIT, "cutlass"),
    ("sglang_nccl_timeout.log", "fatal", ev.NCCL, "sglang"),
    ("vllm_illegal_instruction.log", "fatal", ev.ILLEGAL_INSTRUCTION, "vllm"),
    ("unrelated.log", "unknown", None, None),
])
def test_fixture_verdicts(name, verdict, cause, engine):
    d = diagnose_file(name)
    assert (d.verdict, d.cause, d.engine) == (verdict, cause, engine)


def test_160_tactic_failures_then_ready_is_recovered_with_tiles_lines_and_time():
    d = diagnose_file("sglang_sm120_tactics_recovered.log")
    fc = d.failure(ev.TACTIC_SKIPPED)
    assert fc.count == 160 and fc.survived == 160
    assert fc.first_line == 14 and fc.last_line == 617
    assert set(fc.tiles) == {"128x256x128", "256x128x128", "128x128x256B", "256x128x128B"}
    assert len(fc.tactics) == 20 and "32" in fc.tactics
    assert d.arch == "sm120" and d.arch_source == "log"
    assert d.ready.line == 637 and "ready to roll" in d.ready.text
    assert d.decisive is d.ready
    assert d.seconds_to_ready == 117.0  # 20:03:20 first skip -> 20:05:17 ready


def test_same_failures_then_oom_blame_the_oom_not_the_tiles():
    d = diagnose_file("sglang_sm120_tactics_oom.log")
    assert d.cause == ev.CUDA_OOM and d.confirmed
    assert d.decisive.line == 636 and "OutOfMemoryError" in d.decisive.text
    assert d.decisive.rank == "TP1"  # inherited from the traceback's first line
    assert d.failure(ev.TACTIC_SKIPPED).count == 160
    assert d.ready is None
    assert d.phase.startswith("CUDA-graph capture")
    cause = d.explanations[0]
    assert cause.about == ev.CUDA_OOM and "160 tactic failures the autotuner skipped" in cause.finding and "not the cause" in cause.finding


def test_compiler_crash_ends_a_tuning_sweep_and_says_nothing_was_saved():
    d = diagnose_file("vllm_benchmark_moe_compiler_crash.log")
    assert d.decisive.text == "RuntimeError: PassManager::run failed"
    assert d.hints["mlir_pass"] == "TritonGPUPipeline" and d.hints["tool"] == "benchmark_moe"
    # The traceback reached the script's <module> frame: benchmark_moe itself died.
    assert d.confirmed and d.ended is not None and "in <module>" in d.ended.text
    text = d.explanations[0].finding
    assert "nothing was saved" in text and "TritonGPUPipeline" in text


def test_triton_oor_at_start_on_sm120_is_fatal_and_explained():
    d = diagnose_file("vllm_sm120_triton_oor.log")
    assert d.arch == "sm120" and d.gpu == "rtx-5090"  # from the default-config warning's device name
    oor = d.failure(ev.TRITON_OOR)
    assert oor.fields["required"] == 147456 and oor.fields["limit"] == 101376
    e = d.explanations[0]
    limit = get_arch("sm120").smem_per_block_optin
    assert "147,456" in e.finding and f"{limit:,}" in e.finding and "over by 46,080" in e.finding
    assert "sm120's opt-in limit" in e.finding and "NVIDIA_GeForce_RTX_5090" in e.finding
    assert "num_stages" in e.remedy and "tilefit tune" in e.remedy


def test_oor_inside_a_sweep_that_continues_is_a_skipped_config():
    d = diagnose_file("sglang_tuner_oor_skipped.log")
    oor = d.failure(ev.TRITON_OOR)
    assert oor.count == 3 and oor.survived == 3
    assert d.arch == "sm90"  # NVIDIA_H200 in the output file name
    assert any("skipped configs" in e.finding for e in d.explanations)


def test_explicit_arch_overrides_the_log():
    d = diagnose_file("sglang_tuner_oor_skipped.log", arch="sm120")
    assert d.arch == "sm120" and d.arch_source == "given"


def log(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


SKIP = ("2025-10-06 20:04:12,301 - WARNING - autotuner.py:484 - flashinfer.jit: [Autotuner]: Skipping tactic "
        "<MoERunner object at 0x7f> {t}, due to failure while profiling: [TensorRT-LLM][ERROR] Assertion failed: "
        "Failed to initialize cutlass TMA WS grouped gemm. Error: Error Internal")


def test_benign_failures_then_killed_blame_the_kill():
    d = diagnose_bytes(log(*(SKIP.format(t=t) for t in range(5)), "Killed"))
    assert d.verdict == "fatal" and d.cause == ev.KILLED and d.decisive.line == 6


def test_only_benign_failures_and_no_end_is_in_progress():
    d = diagnose_bytes(log(*(SKIP.format(t=t) for t in range(5))))
    assert d.verdict == "in-progress" and d.cause is None


def test_error_quoted_by_the_autotuner_is_caught():
    d = diagnose_bytes(log(SKIP.format(t=3).replace("Failed to initialize", "CUDA out of memory. Failed")))
    assert d.verdict == "in-progress"
    assert d.failure(ev.TACTIC_SKIPPED).fields["reason"] == ev.CUDA_OOM


def test_progress_from_another_rank_does_not_clear_an_error():
    oom = "[2025-10-06 20:04:47 TP1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.31 GiB."
    other = "[2025-10-06 20:04:48 TP0] Capture cuda graph end. Time elapsed: 31.02 s."
    same = "[2025-10-06 20:04:48 TP1] Capture cuda graph end. Time elapsed: 31.02 s."
    assert diagnose_bytes(log(oom, other)).verdict == "fatal"
    assert diagnose_bytes(log(oom, same)).verdict == "in-progress"


def test_ready_then_a_later_fatal_is_fatal_and_ready_after_a_crash_is_a_restart():
    ready = "[2025-10-06 20:05:17] The server is fired up and ready to roll!"
    assert diagnose_bytes(log(ready, "Segmentation fault (core dumped)")).verdict == "fatal"
    d = diagnose_bytes(log("Segmentation fault (core dumped)", ready))
    assert d.verdict == "recovered" and d.failure(ev.CRASHED).count == 1


def test_exit_code_zero_is_not_a_failure():
    assert diagnose_bytes(log("worker exited with code 0")).verdict == "unknown"
    assert diagnose_bytes(log("worker exited with code 137")).cause == ev.EXIT


class _Cfg:
    def __init__(self, text: str):
        self.text = text

    def label(self) -> str:
        return self.text


class FakeCutlassFamily:
    """Stands in for the CUTLASS fit engine: sizes every tile with the 128x256x128 FINALIZE footprint
    NVIDIA/cutlass#3144 reports (3 stages, 102,400 B), so the plumbing, not the model, is under test."""

    name = "flashinfer-cutlass"

    def dtypes(self, arch):
        return ["nvfp4", "mxfp8-mxfp4"]

    def parse_config(self, text, dtype):
        return _Cfg(text)

    def verdict(self, config, arch, dtype, **options):
        fp = SmemFootprint(total=102_400, stages=3, terms=(
            SmemTerm("A/B/SF stages", 100_352), SmemTerm("pipelines", 224), SmemTerm("tensormaps", 896),
            SmemTerm("scheduler", 128)))
        return judge(config, arch, fp)


def test_tile_explanation_uses_the_family_breakdown():
    d = diagnose_file("sglang_sm120_tactics_recovered.log", family_loader=lambda name: FakeCutlassFamily())
    tiles = {e.about: e.finding for e in d.explanations if e.about.startswith("tile ")}
    assert set(tiles) == {"tile 128x256x128", "tile 256x128x128", "tile 128x128x256B", "tile 256x128x128B"}
    f = tiles["tile 128x256x128"]
    assert f.startswith("128x256x128 finalize (nvfp4)")  # the backtrace's EpilogueFusion)3
    assert "(nvfp4)" in f and "does NOT fit" in f and "102,400 B" in f and "101,376 B" in f
    assert "3 stages" in f and "A/B/SF stages 100,352 B" in f
    assert tiles["tile 128x128x256B"].startswith("128x128x512 ")  # K bytes -> fp4 elements


def test_missing_fit_engine_is_reported_not_raised():
    def broken(name):
        raise ImportError("No module named 'tilefit.kernels.flashinfer_cutlass'")

    d = diagnose_file("sglang_sm120_tactics_oom.log", family_loader=broken)
    tiles = [e for e in d.explanations if e.about.startswith("tile ")]
    assert tiles and all("fit engine for flashinfer-cutlass not available: No module named" in e.finding
                         and "ImportError" not in e.finding for e in tiles)


def test_family_that_raises_while_sizing_is_reported():
    class Raising(FakeCutlassFamily):
        def verdict(self, config, arch, dtype):
            raise RuntimeError("model not ready")

    d = diagnose_file("sglang_sm120_tactics_recovered.log", family_loader=lambda n: Raising())
    found = [e.finding for e in d.explanations if "could not size this tile: model not ready" in e.finding]
    assert found and not any("RuntimeError" in f or "UsageError" in f for f in found)


def test_real_registry_never_breaks_the_diagnosis():
    d = diagnose_file("sglang_sm120_tactics_recovered.log")
    tiles = [e for e in d.explanations if e.about.startswith("tile ")]
    assert len(tiles) == 4
    from tilefit.kernels.base import EXCEEDS_SMEM, FITS, NO_DISPATCH, UNSUPPORTED

    words = ("limit", "fit engine for flashinfer-cutlass", FITS, EXCEEDS_SMEM, NO_DISPATCH, UNSUPPORTED)
    assert all(any(w in e.finding for w in words) for e in tiles), [e.finding for e in tiles]


def test_unknown_arch_says_what_is_missing():
    d = diagnose_bytes(log(SKIP.format(t=1), "1  0x7f void launcher<cute::tuple<cute::C<128>, cute::C<256>, "
                                              "cute::C<128> > >() + 1"))
    assert d.arch is None
    assert any("arch unknown" in e.finding and e.remedy == "pass --gpu NAME or --arch smXX"
               for e in d.explanations)
