"""benchmarks/sglang_paths.py (SGLang's even-K, TMA and PDL paths, written for measurement beside
tilefit's kernel): under Triton's interpreter every path writes the rows tilefit's kernel writes,
with the same values (the sorted-output path in sorted order); and bench_sglang_paths.py refuses
a step it does not know with one line and exit 2 before anything touches the GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks")])}

# Run in a child: TRITON_INTERPRET must be set before triton is imported.
CHECK = r"""
import torch
import sglang_paths as sg
from tilefit.kernels.triton_moe.align import moe_align
from tilefit.kernels.triton_moe.config import parse_config
from tilefit.kernels.triton_moe.ops import grouped_gemm
torch.manual_seed(0)
E, N, K, T, k = 4, 64, 256, 5, 2
ids = torch.stack([torch.randperm(E)[:k] for _ in range(T)])
cfg = parse_config("16,32,64,1,4,3", "bf16")
al = moe_align(ids, E, 16)
slots = al.sorted_ids.long()
valid = slots < al.num_valid
for gemm in ("gemm1", "gemm2"):
    arpt = k if gemm == "gemm1" else 1
    a = torch.randn(T * k // arpt, K, dtype=torch.bfloat16)
    b = torch.randn(E, N, K, dtype=torch.bfloat16) * 0.1
    tw = torch.rand(T * k) if gemm == "gemm2" else None
    ref = torch.zeros(T * k, N, dtype=torch.bfloat16)
    grouped_gemm(a, b, ref, al, cfg, a_rows_per_token=arpt, topk_weights=tw)
    p = dict(a=a, b=b, c=torch.zeros(T * k, N, dtype=torch.bfloat16), a_s=None, b_s=None, n=N,
             k=K, arpt=arpt)
    for even_k, tma in ((False, False), (True, False), (True, True)):
        p["c"].zero_()
        c_out = torch.zeros(al.num_padded, N, dtype=torch.bfloat16)
        sg.launch_sg(p, cfg, al, tw, even_k=even_k, b_tma=tma, a_tma=tma and gemm == "gemm2",
                     c_sorted=tma and gemm == "gemm1", c_out=c_out,
                     a_sorted=sg.sorted_operand(a, None, al, arpt) if tma else None)
        got = c_out[valid] if tma and gemm == "gemm1" else p["c"][slots[valid]]
        assert torch.equal(got, ref[slots[valid]]), (gemm, even_k, tma)
        print(gemm, even_k, tma, "same")
"""


def _interpreted(code: str) -> str:
    """What `code` prints, run in a child under Triton's interpreter (set before triton loads)."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    proc = subprocess.run([sys.executable, "-c", code], env={**ENV, "TRITON_INTERPRET": "1"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_every_sglang_path_writes_what_tilefits_kernel_writes():
    assert _interpreted(CHECK).count("same") == 6


@pytest.mark.parametrize("script,args,line", [
    ("bench_sglang_paths.py", ["large", "smal"], "bench_sglang_paths: steps are large, small"),
    ("bench_launch_forms.py", ["forms", "nave"], "bench_launch_forms: steps are forms, naive, ref"),
])
def test_an_unknown_step_is_one_line_and_exit_2(tmp_path, script, args, line):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                          env={**ENV, "OUT": str(tmp_path)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [line]


# The engines' launch forms: SGLang's EP alignment (another rank's experts in a -1 bucket that
# comes first, its blocks writing zeros) over its larger grid with early exit, and vLLM's naive
# block assignment, each against tilefit's kernel on tilefit's alignment.
FORMS = r"""
import torch
import sglang_paths as sg
from tilefit.kernels.triton_moe.align import moe_align
from tilefit.kernels.triton_moe.config import parse_config
from tilefit.kernels.triton_moe.ops import grouped_gemm
torch.manual_seed(1)
E_ALL, E, N, K, T, k = 8, 3, 64, 128, 6, 2
ids = torch.stack([torch.randperm(E_ALL)[:k] for _ in range(T)])
ids = torch.where(ids < E, ids, torch.full_like(ids, -1))
cfg = parse_config("16,32,64,16,4,2", "bf16")
a = torch.randn(T * k, K, dtype=torch.bfloat16)
b = torch.randn(E, N, K, dtype=torch.bfloat16) * 0.1
ref = torch.zeros(T * k, N, dtype=torch.bfloat16)
grouped_gemm(a, b, ref, moe_align(ids, E, 16), cfg, a_rows_per_token=1)
al, rows = sg.sglang_align(ids, E, 16, ep=True)
assert rows == sg.sglang_buffer(T * k, E + 1, 16) and rows > al.num_padded
assert int(al.expert_ids[0]) == -1  # the other ranks' bucket comes first
p = dict(a=a, b=b, c=torch.full((T * k, N), 7.0, dtype=torch.bfloat16), a_s=None, b_s=None,
         n=N, k=K, arpt=1)
sg.launch_sg(p, cfg, al, None, grid_rows=rows, ep_zeros=True)
remote = (ids.reshape(-1) < 0)
assert torch.equal(p["c"][~remote], ref[~remote]) and not p["c"][remote].any()
print("ep same")
tp = torch.stack([torch.randperm(E)[:k] for _ in range(2)])
ref = torch.zeros(2 * k, N, dtype=torch.bfloat16)
grouped_gemm(a[:2 * k], b, ref, moe_align(tp, E, 16), cfg, a_rows_per_token=1)
got = torch.zeros_like(ref)
grouped_gemm(a[:2 * k], b, got, sg.vllm_naive_align(tp, 16), cfg, a_rows_per_token=1)
assert torch.equal(got, ref)
print("naive same")
"""


def test_engine_launch_forms_write_what_tilefits_kernel_writes():
    assert _interpreted(FORMS).split() == ["ep", "same", "naive", "same"]
