"""benchmarks/bench_kernel_variants.py (a GPU measurement script): a step name it does not know is
refused with one line and exit 2 before anything touches the GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_an_unknown_step_is_one_line_and_exit_2(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    env = {**os.environ, "OUT": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks")])}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_kernel_variants.py"),
                           "small", "smal"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "bench_kernel_variants: unknown step(s) smal; choose from check, small, small2, large, "
        "draws, persistent, splitk"]
    assert list(tmp_path.iterdir()) == []  # a refused run leaves no empty log behind


def test_the_base_launcher_passes_group_size_m_where_the_kernel_takes_it(monkeypatch):
    """GROUP_SIZE_M became a runtime argument after num_valid (64ae0fd); kernel_variants'
    launch_base (the product kernel's baseline) still passed the strides there and GROUP_SIZE_M
    as a keyword: every baseline launch would have failed to bind."""
    import inspect
    from types import SimpleNamespace

    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import kernel_variants

    from tilefit.kernels.triton_moe.config import MoEConfig
    from tilefit.kernels.triton_moe.kernel import fused_moe_kernel

    bound = {}

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, num_warps, num_stages, **kwargs):  # launch options, not arguments
                bound.update(inspect.signature(fused_moe_kernel.fn).bind(*args, **kwargs).arguments)
            return launch

    monkeypatch.setattr(kernel_variants, "fused_moe_kernel", Recorder())
    monkeypatch.setattr(kernel_variants.torch, "zeros", lambda *a, **k: "dummy")
    a, b, c = torch.empty(8, 64), torch.empty(2, 32, 64), torch.empty(16, 32)
    p = {"a": a, "b": b, "c": c, "a_s": None, "b_s": None, "n": 32, "k": 64, "arpt": 2}
    al = SimpleNamespace(num_padded=64, num_valid=16, sorted_ids="ids", expert_ids="experts")
    kernel_variants.launch_base(p, MoEConfig(16, 32, 32, 4, 4, 2), al, None)
    assert bound["GROUP_SIZE_M"] == 4 and bound["num_valid"] == 16
    assert (bound["stride_am"], bound["stride_bn"], bound["stride_cn"]) == (64, 64, 1)
