"""benchmarks/probe_first_use.py picks its configs from a real run's journal (session 8's TP8
fp8-block run r8d, committed): each config probed at the (GEMM, batch) once, in the order the run
first probed it, nothing from another GEMM, batch or a compile line."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import probe_first_use  # noqa: E402 - benchmarks/ is not a package

JOURNAL = ROOT / "benchmarks" / "results" / "tune_v8" / "tp8_fp8-block_r8d_fast.jsonl.gz"


def _lines():
    with gzip.open(JOURNAL, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_configs_of_one_gemm_and_batch_in_first_probe_order():
    lines = _lines()
    for gemm, batch in (("gemm2", 1), ("gemm1", 1024)):
        got = probe_first_use._journal_configs(str(JOURNAL), gemm, batch)
        mine = [d["config"] for d in lines
                if d["batch"] == batch and d["shape"].startswith(gemm + ":")]
        keys = [json.dumps(c, sort_keys=True) for c in got]
        assert len(keys) == len(set(keys)) and got
        assert {json.dumps(c, sort_keys=True) for c in mine} == set(keys)
        firsts = []
        for c in mine:
            if c not in firsts:
                firsts.append(c)
        assert got == firsts
    assert probe_first_use._journal_configs(str(JOURNAL), "gemm2", 7) == []  # no such batch
