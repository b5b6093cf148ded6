"""tune/targets/reference.py: the pick's output against a float32 reference, on the CPU."""

from __future__ import annotations

import pytest

from tilefit.tune.targets.base import TuneShape

torch = pytest.importorskip("torch")


def _problem(gemm: str, experts_here: int = 4, total: int = 8, topk: int = 2, tokens: int = 40):
    """A problem as the target builds it, with the kernel's output written row by row from the
    definition: gemm1 row r = a[token] @ b[expert].T, gemm2 row r = weight * a[r] @ b[expert].T;
    assignments to other ranks' experts (-1) are left at zero."""
    g = torch.Generator().manual_seed(3)
    n, k = (16, 32) if gemm == "gemm1" else (32, 16)
    ids = torch.stack([torch.randperm(total, generator=g)[:topk] for _ in range(tokens)])
    ids = torch.where(ids < experts_here, ids, torch.full_like(ids, -1)).to(torch.int32)
    w = torch.rand(tokens, topk, generator=g).softmax(dim=1)
    a_rows = tokens if gemm == "gemm1" else tokens * topk
    a = torch.randn(a_rows, k, generator=g).to(torch.bfloat16)
    b = torch.randn(experts_here, n, k, generator=g).to(torch.bfloat16)
    c = torch.zeros(tokens * topk, n, dtype=torch.bfloat16)
    for r, e in enumerate(ids.reshape(-1).tolist()):
        if e < 0:
            continue
        row = a[r // topk if gemm == "gemm1" else r].float() @ b[e].float().T
        c[r] = (row * (w.reshape(-1)[r] if gemm == "gemm2" else 1.0)).to(torch.bfloat16)
    p = {"a": a, "a_scale": None, "b": b, "b_scale": None, "c": c, "ids_cpu": ids, "w_cpu": w}
    return p, TuneShape(gemm, experts_here, k if gemm == "gemm1" else n,
                        n // 2 if gemm == "gemm1" else k, topk, "bf16", total)


@pytest.mark.parametrize("gemm", ["gemm1", "gemm2"])
def test_right_output_passes_and_a_wrong_row_in_any_experts_slice_is_found(gemm):
    from tilefit.tune.targets.reference import compare_rows

    p, shape = _problem(gemm)
    assert compare_rows(p, shape) is None
    ids = p["ids_cpu"].reshape(-1)
    # Fewer assignments than CHECK_ROWS: all are sampled. The first row of each expert in turn,
    # so the running maximum must hold an error found before the last expert's slice.
    for e in range(4):
        row = int(torch.nonzero(ids == e).reshape(-1)[0])
        wrong = {k: (v.clone() if k == "c" else v) for k, v in p.items()}
        wrong["c"][row] += 1.0
        found = compare_rows(wrong, shape)
        assert found is not None and found.startswith("max error"), e
    wrong = {k: (v.clone() if k == "c" else v) for k, v in p.items()}
    wrong["c"][int(torch.nonzero(ids >= 0).reshape(-1)[0])] = float("nan")
    assert compare_rows(wrong, shape) is not None  # a NaN fails the check


def test_the_sample_is_spread_from_the_first_assignment():
    """Over CHECK_ROWS assignments: every (n // CHECK_ROWS)-th from the first valid one is
    compared, so a wrong first row is found and a wrong row between two samples is not."""
    from tilefit.tune.targets.reference import CHECK_ROWS, compare_rows

    p, shape = _problem("gemm2", tokens=600)
    valid = torch.nonzero(p["ids_cpu"].reshape(-1) >= 0).reshape(-1)
    assert valid.numel() > CHECK_ROWS
    step = valid.numel() // CHECK_ROWS
    assert step >= 2
    first = {k: (v.clone() if k == "c" else v) for k, v in p.items()}
    first["c"][int(valid[0])] += 1.0
    assert compare_rows(first, shape) is not None
    between = {k: (v.clone() if k == "c" else v) for k, v in p.items()}
    between["c"][int(valid[1])] += 1.0
    assert compare_rows(between, shape) is None


def test_no_assignment_on_this_rank_has_nothing_to_compare():
    from tilefit.tune.targets.reference import compare_rows

    p, shape = _problem("gemm1")
    p["ids_cpu"] = torch.full_like(p["ids_cpu"], -1)
    assert compare_rows(p, shape) is None
