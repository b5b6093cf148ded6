"""Build the per-GPU memory plan: weights by kind, KV pool, the rest, free; verdict and remedies.

`plan_memory(request)` asks the engine's rules for the placement, the KV layout and the pool,
then checks the three ways a start can fail: no room for the KV pool, no room outside the pool
for CUDA graphs and activations, and a pool shorter than the context length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tilefit.errors import NotModelled, UsageError, unknown_name
from tilefit.memory.base import GIB, Figure, KVLayout, MemoryRequest, MemoryRules, Placement, Pool, Settings
from tilefit.memory.weights import KINDS, weights_per_gpu


def engines() -> dict[str, MemoryRules]:
    from tilefit.memory.sglang import RULES as SGLANG
    from tilefit.memory.vllm import RULES as VLLM

    return {r.name: r for r in (SGLANG, VLLM)}


def rules_for(engine: str) -> MemoryRules:
    known = engines()
    if engine not in known:
        raise unknown_name("engine for the memory plan", engine, known, "tilefit check --help")
    return known[engine]


@dataclass(frozen=True, slots=True)
class Remedy:
    setting: str  # the flag or change, e.g. "--mem-fraction-static 0.82"
    effect: str  # what it gives, e.g. "1,234,567 KV tokens"


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    request: MemoryRequest
    settings: Settings  # the request's settings with the engine's defaults filled in
    placement: Placement
    weights: tuple[Figure, ...]  # by kind (KINDS order), engine extras merged in
    weight_notes: tuple[Figure, ...]  # the engine extras, kept for their basis
    kv: KVLayout
    pool: Pool
    kv_tokens: int
    max_requests: int
    problems: tuple[str, ...]  # the start fails: computed from the engine's own rule
    warnings: tuple[str, ...]  # the start may fail: rests on an estimate (CUDA graphs, activations)
    remedies: tuple[Remedy, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return self.request.gpu.memory_bytes

    @property
    def weight_bytes(self) -> int:
        return sum(f.bytes for f in self.weights)

    @property
    def kv_pool_bytes(self) -> int:
        return max(0, self.kv_tokens * self.kv.bytes_per_token)

    @property
    def startup_bytes(self) -> int:
        return sum(f.bytes for f in self.pool.startup)

    @property
    def runtime_bytes(self) -> int:
        return sum(f.bytes for f in self.pool.runtime)

    @property
    def free_bytes(self) -> int:
        return self.total - self.weight_bytes - self.kv_pool_bytes - self.startup_bytes - self.runtime_bytes

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def concurrency(self) -> float | None:
        """Requests of the full context length the KV pool holds at once."""
        ctx = self.settings.context_length
        return self.kv_tokens / ctx if ctx else None

    @property
    def verdict(self) -> str:
        return "NO-GO" if self.problems else "GO-WITH-WARNINGS" if self.warnings else "GO"

    def kv_tokens_for(self, pool_bytes: int) -> int:
        """The tokens this engine makes of a KV pool of `pool_bytes` (its layout and rounding)."""
        return rules_for(self.request.engine).kv_tokens(self.request.arch, pool_bytes, self.kv, self.request.version)


def _merge(base: tuple[Figure, ...], extras: tuple[Figure, ...]) -> tuple[Figure, ...]:
    out = []
    for f in base:
        add = [e for e in extras if e.kind == f.kind]
        if add:
            f = Figure(f.kind, f.bytes + sum(e.bytes for e in add), f.basis + "; + " + "; + ".join(e.basis for e in add))
        out.append(f)
    return tuple(out)


def _core(req: MemoryRequest, rules: MemoryRules) -> tuple[Settings, Placement, tuple[Figure, ...],
                                                           tuple[Figure, ...], KVLayout, Pool, int]:
    settings = rules.defaults(req)
    placement = rules.placement(req.arch, req.parallel)
    extras = rules.extra_weights(req.arch, placement, req.gpu, settings)
    weights = _merge(weights_per_gpu(req.arch, placement), extras)
    kv = rules.kv_layout(req.arch, placement, settings)
    pool = rules.pool(req, settings, sum(f.bytes for f in weights), kv)
    return settings, placement, weights, extras, kv, pool, rules.kv_tokens(req.arch, pool.kv_bytes, kv, req.version)


def headroom(pool: Pool, kv: KVLayout, tokens: int) -> int:
    """Memory left outside the pool once it is allocated: where an engine sizes the pool with a
    smaller per-token figure than it stores (sglang 0.5.9's DSA fp8 pool), the excess comes out of it."""
    return pool.headroom - max(0, tokens * kv.bytes_per_token - max(0, pool.kv_bytes))


def check_request(req: MemoryRequest) -> None:
    a = req.arch
    if a.linear_attention:
        raise NotModelled(f"{a.moe.name}: hybrid linear-attention models are not in the memory plan yet "
                         "(their state cache is not a per-token KV cache)")
    s = req.settings
    if s.mem_fraction is not None and not 0 < s.mem_fraction <= 1:
        raise UsageError(f"memory fraction {s.mem_fraction} must be in (0, 1]")
    p = req.parallel
    if req.engine == "sglang" and (p.tp % p.ep or (p.dp_attention and p.tp % p.dp)):
        raise UsageError(f"sglang: --ep {p.ep} and --dp {p.dp} must divide --tp {p.tp}")


def assess(settings: Settings, kv: KVLayout, pool: Pool, tokens: int) -> tuple[list[str], list[str]]:
    """(problems, warnings): no KV pool or one shorter than a request of the context length is
    certain from the engine's rule; too little room for graphs and activations rests on estimates."""
    problems, warnings = [], []
    if pool.kv_bytes <= 0:
        problems.append(f"no room for the KV cache: {pool.rule}; short by {-pool.kv_bytes / GIB:.2f} GiB")
    ctx = settings.context_length
    if ctx and 0 < tokens < ctx:
        problems.append(f"the KV pool holds {tokens:,} tokens, fewer than one request of the context length {ctx:,}")
    need, room = sum(f.bytes for f in pool.runtime), headroom(pool, kv, tokens)
    if need > room:
        warnings.append(f"CUDA graphs and activations need ~{need / GIB:.2f} GiB (estimate) outside the pool but "
                        f"the memory fraction leaves {room / GIB:.2f} GiB (short by {(need - room) / GIB:.2f} GiB): "
                        "start-up may run out of memory capturing graphs")
    return problems, warnings


def plan_memory(req: MemoryRequest) -> MemoryPlan:
    check_request(req)
    rules = rules_for(req.engine)
    settings, placement, weights, extras, kv, pool, tokens = _core(req, rules)
    problems, warnings = assess(settings, kv, pool, tokens)
    plan = MemoryPlan(req, settings, placement, weights, extras, kv, pool, tokens,
                      rules.max_requests(settings, tokens), tuple(problems), tuple(warnings))
    return replace(plan, remedies=remedies(plan, rules), notes=notes(plan))


def request_for(model: str, gpu: str, engine: str, gpus: int, ep: int = 1, dp: int = 1,
                settings: Settings | None = None, version: str | None = None,
                a2a_backend: str = "none") -> MemoryRequest:
    """A MemoryRequest from names: a model (preset or config.json), a GPU of the catalog, the engine
    and tilefit's layout (`gpus` GPUs, experts split `ep` ways, attention DP `dp`)."""
    from tilefit.hw.catalog import get_gpu
    from tilefit.memory.base import Parallel
    from tilefit.models.architecture import load_architecture

    parallel = Parallel.for_engine(engine, gpus, ep, dp, a2a_backend)
    return MemoryRequest(load_architecture(model), get_gpu(gpu), engine, parallel, settings or Settings(), version)


def notes(plan: MemoryPlan) -> tuple[str, ...]:
    """What a GO plan should still say: full-length requests that do not all fit at once."""
    s, ctx = plan.settings, plan.settings.context_length
    if plan.problems or not ctx or not plan.kv_tokens:
        return ()
    fit = plan.kv_tokens // ctx
    if fit < plan.max_requests:
        return (f"{fit:,} request(s) of {ctx:,} tokens fit the KV pool at once; the engine admits up to "
                f"{plan.max_requests:,} running requests, so long requests queue (shorter ones share the pool)",)
    return ()


def _with_settings(req: MemoryRequest, **changes) -> MemoryRequest:
    return replace(req, settings=replace(req.settings, **changes))


def remedies(plan: MemoryPlan, rules: MemoryRules) -> tuple[Remedy, ...]:
    """Settings that would make a NO-GO start (or a full-context request fit), each checked by
    planning again with it."""
    req, s = plan.request, plan.settings
    out: list[Remedy] = []
    flag = "--mem-fraction-static" if req.engine == "sglang" else "--gpu-memory-utilization"
    if plan.problems or plan.warnings:
        for mf in (0.95, 0.9, 0.88, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6):
            trial = plan_memory_quiet(_with_settings(req, mem_fraction=mf), rules)
            if trial is not None and trial.verdict == "GO":
                out.append(Remedy(f"{flag} {mf:g}", f"{trial.kv_tokens:,} KV tokens"))
                break
        if s.kv_dtype in ("bf16", "fp16"):
            trial = plan_memory_quiet(_with_settings(req, kv_dtype="fp8"), rules)
            if trial is not None and trial.verdict == "GO":
                out.append(Remedy("--kv-cache-dtype fp8_e4m3", f"{trial.kv_tokens:,} KV tokens"))
        if s.context_length and 0 < plan.kv_tokens < s.context_length:
            out.append(Remedy(("--context-length" if req.engine == "sglang" else "--max-model-len")
                              + f" {plan.kv_tokens // 1024 * 1024}", "one full-length request fits the pool"))
        p = req.parallel
        bigger = replace(p, tp=p.tp * 2, ep=p.ep * 2 if p.ep > 1 else 1)
        trial = plan_memory_quiet(replace(req, parallel=bigger), rules)
        if trial is not None and trial.verdict == "GO":
            out.append(Remedy(f"--tp {bigger.tp}" + (f" --ep {bigger.ep}" if bigger.ep > 1 else ""),
                              f"{trial.weight_bytes / GIB:.1f} GiB weights per GPU, {trial.kv_tokens:,} KV tokens"))
    return tuple(out)


def plan_memory_quiet(req: MemoryRequest, rules: MemoryRules) -> MemoryPlan | None:
    """A plan without remedies (used to try a change), or None when the change is invalid."""
    try:
        check_request(req)
        settings, placement, weights, extras, kv, pool, tokens = _core(req, rules)
    except UsageError:
        return None
    problems, warnings = assess(settings, kv, pool, tokens)
    return MemoryPlan(req, settings, placement, weights, extras, kv, pool, tokens,
                      rules.max_requests(settings, tokens), tuple(problems), tuple(warnings))


__all__ = ["KINDS", "MemoryPlan", "Remedy", "engines", "plan_memory", "rules_for"]
