"""The memory plan against real start-up logs from public issues (tests/fixtures/memory/).

Each `<name>.log` is a short verbatim excerpt; `<name>.toml` names its source and the deployment
(model, GPU, engine flags). The figures the engine printed are read from the log here, never
copied into the sidecar: weight memory must agree within 2% and KV tokens within 5%, unless the
sidecar widens a tolerance and says why (`why_weights`, `why_kv`, `why_pool`).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tilefit.hw.catalog import get_gpu
from tilefit.memory import MemoryRequest, Parallel, Settings, plan_memory
from tilefit.models.architecture import load_architecture

LOGS = Path(__file__).resolve().parent / "fixtures" / "memory"
GIB = 2**30
GB_PRINTED = 2**30  # sglang's "GB" is bytes / 2**30 (get_available_gpu_memory)
NAMES = sorted(p.stem for p in LOGS.glob("*.toml"))


@dataclass(frozen=True)
class Printed:
    """What the engine printed, read from the excerpt."""

    weights_gib: float | None = None
    kv_tokens: int | None = None
    kv_gib: float | None = None  # sglang: K + V size (or KV size); vLLM: available KV cache memory
    concurrency: tuple[int, float] | None = None  # (tokens per request, x)


def _f(pattern: str, text: str) -> re.Match | None:
    return re.search(pattern, text)


def read_log(text: str) -> Printed:
    w = _f(r"Load weight end\..*?mem usage=([\d.]+) GB", text) or _f(r"Model loading took ([\d.]+) GiB", text)
    kv_sg = _f(r"KV Cache is allocated\..*?#tokens: (\d+), (?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)",
               text)
    tokens_v = _f(r"GPU KV cache size: ([\d,]+) tokens", text)
    avail_v = _f(r"Available KV cache memory: (-?[\d.]+) GiB", text)
    conc = _f(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", text)
    kv_tokens = kv_gib = None
    if kv_sg:
        kv_tokens = int(kv_sg.group(1))
        kv_gib = (float(kv_sg.group(2)) + float(kv_sg.group(3))) if kv_sg.group(2) else float(kv_sg.group(4))
    if tokens_v:
        kv_tokens = int(tokens_v.group(1).replace(",", ""))
    if avail_v:
        kv_gib = float(avail_v.group(1))
    return Printed(weights_gib=float(w.group(1)) if w else None, kv_tokens=kv_tokens, kv_gib=kv_gib,
                   concurrency=(int(conc.group(1).replace(",", "")), float(conc.group(2))) if conc else None)


def load(name: str) -> tuple[dict, Printed, object]:
    side = tomllib.loads((LOGS / f"{name}.toml").read_text(encoding="utf-8"))
    printed = read_log((LOGS / f"{name}.log").read_text(encoding="utf-8"))
    req = MemoryRequest(load_architecture(side["model"]), get_gpu(side["gpu"]), side["engine"],
                        Parallel(**side.get("parallel", {})), Settings(**side.get("settings", {})),
                        version=side.get("engine_version", "").split(" ")[0] or None)
    return side, printed, plan_memory(req)


def test_there_are_enough_real_logs():
    assert len(NAMES) >= 8
    for name in NAMES:
        side = tomllib.loads((LOGS / f"{name}.toml").read_text(encoding="utf-8"))
        assert side["url"].startswith("https://github.com/"), name
        assert (LOGS / f"{name}.log").stat().st_size < 4000, f"{name}: keep excerpts short"


@pytest.mark.parametrize("name", NAMES)
def test_sidecar_explains_every_widened_tolerance(name):
    side = tomllib.loads((LOGS / f"{name}.toml").read_text(encoding="utf-8"))
    if side.get("weights_tolerance", 0.02) > 0.02:
        assert len(side.get("why_weights", "")) > 40
    if side.get("kv_tolerance", 0.05) > 0.05 or "pool_tolerance_gib" in side or side.get("pool") == "layout":
        assert len(side.get("why_kv", side.get("why_pool", ""))) > 40


@pytest.mark.parametrize("name", NAMES)
def test_weights_per_gpu_match_what_the_engine_printed(name):
    side, printed, plan = load(name)
    if printed.weights_gib is None:
        pytest.skip("the excerpt prints no weight memory")
    predicted = plan.weight_bytes / GIB
    tol = side.get("weights_tolerance", 0.02)
    assert abs(predicted - printed.weights_gib) <= tol * printed.weights_gib, \
        f"{name}: predicted {predicted:.3f} GiB, engine printed {printed.weights_gib} GiB"


@pytest.mark.parametrize("name", NAMES)
def test_kv_bytes_per_token_match_the_printed_pool(name):
    """The layout alone: the engine's printed pool size over its printed tokens is our per-token size."""
    side, printed, plan = load(name)
    if printed.kv_gib is None or not printed.kv_tokens or printed.kv_gib <= 0:
        pytest.skip("the excerpt does not print both the pool size and its tokens")
    per_token = printed.kv_gib * GB_PRINTED / printed.kv_tokens
    if side["engine"] == "vllm":  # tokens are whole blocks of the pool: at most one block short per layer
        assert plan.kv_tokens_for(int(printed.kv_gib * GIB)) == pytest.approx(printed.kv_tokens, rel=0.015)
    else:  # the printed GB are rounded to 0.01
        assert per_token == pytest.approx(plan.kv.bytes_per_token, rel=0.002)


@pytest.mark.parametrize("name", NAMES)
def test_kv_tokens_match_what_the_engine_allocated(name):
    side, printed, plan = load(name)
    if side.get("pool") == "layout":
        pytest.skip(side["why_pool"].split(":")[0])
    if "pool_tolerance_gib" in side:
        assert abs(plan.pool.kv_bytes / GIB - printed.kv_gib) <= side["pool_tolerance_gib"]
        return
    if printed.kv_tokens is None and printed.kv_gib is None:
        pytest.skip("the excerpt prints no KV pool")
    if printed.kv_tokens is None:  # vLLM printed a negative pool and stopped
        assert printed.kv_gib < 0
        assert plan.pool.kv_bytes < 0 and plan.verdict == "NO-GO"
        assert abs(plan.pool.kv_bytes / GIB - printed.kv_gib) <= 1.0
        return
    tol = side.get("kv_tolerance", 0.05)
    assert abs(plan.kv_tokens - printed.kv_tokens) <= tol * printed.kv_tokens, \
        f"{name}: predicted {plan.kv_tokens:,} tokens, engine allocated {printed.kv_tokens:,}"


@pytest.mark.parametrize("name", NAMES)
def test_verdict_and_concurrency(name):
    side, printed, plan = load(name)
    if "expect_verdict" in side:
        assert plan.verdict == side["expect_verdict"]
    if printed.concurrency:
        ctx, x = printed.concurrency
        assert plan.settings.context_length == ctx
        assert plan.concurrency == pytest.approx(x, rel=side.get("kv_tolerance", 0.05))
