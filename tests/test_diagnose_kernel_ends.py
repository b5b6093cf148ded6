"""Lines a CUDA library prints just before it ends the process itself, read from the library's own
source: vLLM's custom all-reduce CUDACHECK (prints, then exit(EXIT_FAILURE)) and DeepEP's kernel
timeouts (print, then trap()). The second held-out set of real logs (tests/fixtures/real, set =
"holdout2") showed both; these tests pin the principle on lines written here."""

from __future__ import annotations

from tilefit.diagnose import diagnose_bytes
from tilefit.diagnose import events as ev

CUDACHECK = b"Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'an illegal memory access was encountered'\n"
CUDACHECK_OTHER = b"Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:326 'invalid argument'\n"
DEEPEP = b"DeepEP timeout for combine receivers, rank 3, responsible_channel = 5, expect = 12\n"
DEEPEP_MASKED = b"Warning: DeepEP timeout for dispatch receive, rank 2, local_expert_idx 4, src_rank 7\n"
PROGRESS = b"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  53%|#####     | 27/51 [00:06<00:05,  4.14it/s]\n"


def test_cudacheck_ends_the_process_and_names_the_cuda_error():
    d = diagnose_bytes(CUDACHECK + PROGRESS)
    assert d.verdict == "fatal"
    assert d.cause == ev.ILLEGAL_ACCESS and d.decisive.line == 1


def test_cudacheck_with_any_error_is_an_exit():
    d = diagnose_bytes(CUDACHECK_OTHER)
    assert d.verdict == "fatal" and d.cause == ev.EXIT


def test_deepep_timeout_traps_whatever_follows():
    d = diagnose_bytes(DEEPEP + PROGRESS)
    assert d.verdict == "fatal" and d.cause == ev.CUDA_ERROR
    text = d.explanations[0].finding
    assert "trap()" in text and "DeepEP" in text


def test_deepep_masked_low_latency_warning_is_not_an_end():
    # internode_ll.cu masks the late rank and goes on when a mask buffer is set; it traps only without one
    d = diagnose_bytes(DEEPEP_MASKED + PROGRESS)
    assert d.verdict != "fatal"
