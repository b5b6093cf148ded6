"""Every diagnosis rule against the real-format line it documents, and the chunk gate's coverage."""

from __future__ import annotations

import pytest

from tilefit.diagnose import diagnose_bytes
from tilefit.diagnose import events as ev
from tilefit.diagnose.events import Rule
from tilefit.diagnose.rules import ENGINE_MODULES, all_rules, default_rules

RULES = all_rules()


@pytest.mark.parametrize("rule", RULES, ids=[f"{r.engine}.{r.name}" for r in RULES])
def test_rule_matches_its_example(rule: Rule):
    from tilefit.diagnose.parser import strip_prefix

    body = strip_prefix(rule.example)[0]
    matched = [r for r, _ in default_rules().match(rule.example, body)]
    assert rule in matched


@pytest.mark.parametrize("rule", [r for r in RULES if r.gate], ids=lambda r: f"{r.engine}.{r.name}")
def test_gate_lets_every_example_through(rule: Rule):
    assert default_rules().gate.search(rule.example.encode()) is not None


@pytest.mark.parametrize("rule", [r for r in RULES if r.kind not in (ev.HINT, ev.TRACEBACK)],
                         ids=lambda r: f"{r.engine}.{r.name}")
def test_example_alone_gives_its_kind(rule: Rule):
    """A one-line log made of the example is diagnosed with the rule's kind (or, for a line that
    also names a more specific failure, that one) somewhere in the result."""
    d = diagnose_bytes(rule.example.encode() + b"\n")
    kinds = {f.kind for f in d.failures}
    if rule.kind == ev.READY:
        assert d.ready is not None and d.ready.line == 1
    elif rule.kind == ev.PROGRESS:  # an engine logger's activity shows a run, not its phase
        assert d.verdict == "in-progress" and (d.phase or dict(rule.fields).get("activity"))
    elif rule.kind == ev.EXCEPTION:
        assert kinds, d
    else:
        assert rule.kind in kinds or kinds & set(ev.CAUSE_PRIORITY), (rule.name, kinds)


def test_rules_are_grouped_by_engine_and_named_uniquely():
    assert {m.__name__.rsplit(".", 1)[1] for m in ENGINE_MODULES} == {
        "sglang", "vllm", "trtllm", "flashinfer", "triton", "cutlass", "deepep", "generic"}
    for m in ENGINE_MODULES:
        names = [r.name for r in m.RULES]
        assert len(names) == len(set(names)), m.__name__
        assert {r.engine for r in m.RULES} == {m.E}


def test_rule_rejects_an_example_without_its_needle_and_unknown_severities():
    with pytest.raises(ValueError, match="needle"):
        Rule("x", "generic", ev.KILLED, ev.FATAL, "Killed", "nothing here")
    with pytest.raises(ValueError, match="severity"):
        Rule("x", "generic", ev.KILLED, "bad", "Killed", "Killed")


def test_benign_kinds_never_rank_as_causes():
    assert ev.TACTIC_SKIPPED not in ev.CAUSE_PRIORITY
    assert ev.LOGGED_ERROR not in ev.CAUSE_PRIORITY


@pytest.mark.parametrize("line,field,value", [
    ("[Autotuner]: Skipped 20 unsupported tactic(s) for trtllm::fused_moe::gemm2 (enable debug logs)",
     "count", 20),
    ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 147456, Hardware "
     "limit: 101376. Reducing block sizes or `num_stages` may help.", "limit", 101376),
])
def test_fields_are_extracted(line: str, field: str, value):
    d = diagnose_bytes(line.encode() + b"\n")
    fc = d.failures[0]
    got = fc.count if field == "count" else fc.fields[field]
    assert got == value


def test_unsupported_tile_enum_keeps_k_in_bytes_and_cluster_form_reads_elements():
    d = diagnose_bytes(b"RuntimeError: [TensorRT-LLM][ERROR] Unsupported tile shape config 256128128 for MoE gemm.\n"
                       b"[TensorRT-LLM][ERROR] Assertion failed: Unsupported tile (128, 256, 128) and cluster "
                       b"(1, 1, 1) shape combination for arch 120.\n")
    fc = d.failure(ev.UNSUPPORTED_TILE)
    assert fc is not None and fc.tiles == ["256x128x128B", "128x256x128"]
    assert d.arch == "sm120"


def test_finalize_advice_comes_from_the_engines_remedies_table():
    from types import SimpleNamespace

    from tilefit.diagnose.explain import _tile_remedy
    from tilefit.engines import get_engine

    for engine in ("sglang", "trtllm"):
        setting = next(r.setting for r in get_engine(engine).remedies("flashinfer-cutlass", kinds=("finalize",))
                       if r.setting)
        assert f"{setting} turns it off" in _tile_remedy(SimpleNamespace(engine=engine), {"finalize": True})
    assert "turns it off" not in _tile_remedy(SimpleNamespace(engine="vllm"), {"finalize": True})


def _plain_gate(needles) -> "re.Pattern[bytes]":
    import re

    return re.compile(b"|".join(re.escape(n) for n in needles)) if needles else re.compile(b"(?!)")


def test_gate_starting_at_rare_bytes_finds_the_lines_a_plain_alternation_finds():
    """The gate starts each needle at a rare byte and looks behind for the rest (rules._gate_pattern):
    on every line of the real logs, and on lines cut from the needles themselves, each tier's gate
    says yes exactly where an alternation of its needles does, and a search over a block stops in
    the same first line."""
    import glob
    import os
    import random

    from tilefit.diagnose.rules import _reduce

    rs = default_rules()
    here = os.path.join(os.path.dirname(__file__), "fixtures", "real")
    lines = [ln for p in sorted(glob.glob(os.path.join(here, "*.log"))) for ln in open(p, "rb").read().split(b"\n")]
    rng = random.Random(16)
    needles = list(rs.needles)
    for _ in range(3000):  # needles clipped at either end, doubled, glued to neighbours
        n = rng.choice(needles)
        a, b = rng.randrange(0, 3), len(n) - rng.randrange(0, 3)
        lines.append(rng.choice(needles)[-4:] + n[a:b] + rng.choice((b"", n[:rng.randrange(len(n))], b" x")))
    for keep, gate in rs.gates.items():
        kept = _reduce([r.needle.encode() for r in all_rules() if r.gate and (not r.tier or r.tier in keep)])
        plain = _plain_gate(kept)
        assert [gate.search(ln) is not None for ln in lines] == [plain.search(ln) is not None for ln in lines]
        for start in range(0, len(lines), 97):
            block = b"\n".join(lines[start:start + 97]) + b"\n"
            m, p = gate.search(block), plain.search(block)
            assert (m is None) == (p is None)
            if m is not None:
                assert block.count(b"\n", 0, m.start()) == block.count(b"\n", 0, p.start())
