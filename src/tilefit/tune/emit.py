"""`tune --emit vllm,sglang`: the engines' fused-MoE config files from a tuning of tilefit's kernel,
for a GPU box where the engine is not installed yet. vLLM's and SGLang's fused-MoE Triton kernels
take the same six config keys as tilefit's kernel, over the same grid, except that with 128x128
block-scaled fp8 neither runs a BLOCK_SIZE_K of 256 as tilefit's kernel does (vLLM clamps it to
128, SGLang would scale two groups with one scale: Engine.runs_as_tuned). `tilefit tune` searches
only the configs every engine it writes for runs as tuned (TilefitMoETarget's `engines`); a pick
made otherwise (another target, a search of the whole grid) is replaced in that engine's file by
the fastest re-timed finalist the engine runs as tuned, and the sidecar says so.

Names and contents are each engine's own (tilefit.engines: `write_tuned_configs`): E = local
experts, N = the per-rank expert width, dtype/block_shape selectors for 128x128 block-scaled fp8
("fp8_w8a8", [128, 128]), SGLang's files under configs/triton_X_Y_Z/ (SGLANG_MOE_CONFIG_DIR names
the folder above configs/). The files hold only keys the engines read (vLLM pops "triton_version"
and int()s the rest; SGLang int()s every key); what they were tuned on goes to a sidecar
`<file stem>.tilefit-provenance.json` beside each.

vLLM runs both GEMMs with one config per batch size: per batch the run re-times gemm1's and gemm2's
picks on the other GEMM too and keeps the faster total. SGLang reads gemm2's configs from a `_down`
file whose BLOCK_SIZE_M must equal gemm1's: gemm2's pick when it does, else the faster (re-timed)
of gemm1's pick and gemm2's best finalist with that BLOCK_SIZE_M.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from tilefit._io import write_json_atomic
from tilefit.errors import UsageError
from tilefit.tune.finalists import gather, ranked, retime
from tilefit.tune.report import Row
from tilefit.tune.targets.base import TuneShape


ENGINES = ("vllm", "sglang")
SIDECAR_SUFFIX = ".tilefit-provenance.json"


def parse_engines(text: str) -> tuple[str, ...]:
    """'vllm,sglang' -> ('vllm', 'sglang'); an unknown engine is a UsageError naming the known."""
    out: list[str] = []
    for name in (t.strip().lower() for t in text.split(",") if t.strip()):
        if name not in ENGINES:
            raise UsageError(f"--emit {name!r}: tilefit writes config files for {', '.join(ENGINES)}")
        if name not in out:
            out.append(name)
    if not out:
        raise UsageError(f"--emit needs engine names: {', '.join(ENGINES)}")
    return tuple(out)


def emit_engine_files(req: Any, target: Any, evaluator: Any, layer: TuneShape,
                      winners: dict[str, dict[int, Any]], rows: dict[tuple[str, int], Row],
                      progress: Any = None) -> list[Path]:
    """Write the files of every engine in `req.emit` for `layer` (see the module docstring);
    a replaced pick is also a "warning" event for `progress`."""
    from tilefit.engines import get_engine
    from tilefit.engines.triton_moe import installed_triton_version

    if set(target.jobs) != {"gemm1", "gemm2"}:
        raise UsageError("--emit needs gemm1 and gemm2 tuned separately (--target tilefit)")
    versions = target.versions()
    triton = versions.get("triton") or installed_triton_version()
    rounds = _run_rounds(req)
    written: list[Path] = []

    for engine in req.emit:
        runs = _RunsAsTuned(get_engine(engine), layer.dtype)
        ok, swapped = _engine_picks(runs, winners, rows)
        if engine == "vllm":
            gemm1, how = _one_config_for_both(evaluator, layer, ok, rounds)
            gemm2 = None
        else:
            gemm1 = ok["gemm1"]
            gemm2, how = _down_configs(evaluator, layer, ok, rows, rounds, runs)
        for line in swapped if progress else ():
            progress("warning", {"message": f"--emit {engine}: {line}"})
        if swapped:
            how += "; replaced, as the engine would not run them as tuned: " + "; ".join(swapped)
        caveat = "" if getattr(target, "swap_ab", False) else _swap_ab_caveat(
            runs.engine, layer.dtype, getattr(target, "arch", None), [gemm1, gemm2 or {}])
        if caveat:
            how += "; " + caveat
        caveat = _scales_caveat(runs.engine, layer.dtype, getattr(target, "scales", "column"),
                                req.engine_version)
        if caveat:
            how += "; " + caveat
        paths = runs.engine.write_tuned_configs(
            Path(req.out_dir) / engine, E=layer.experts, N=layer.width,
            device_name=req.device_name, weight_dtype=layer.dtype,  # the engines' names
            gemm1={b: c.as_dict() for b, c in gemm1.items()},
            gemm2=None if gemm2 is None else {b: c.as_dict() for b, c in gemm2.items()},
            triton_version=triton)
        for p in paths:
            written += [p, _sidecar(p, engine, req, layer, versions, how)]
    return written


class _RunsAsTuned:
    """Whether an engine's kernel runs a config as tilefit's kernel ran it while tuning (the
    engine's rule: Engine.runs_as_tuned); `why` says what it does instead."""

    def __init__(self, engine: Any, dtype: str) -> None:
        self.engine, self.dtype = engine, dtype

    def why(self, config: Any) -> str | None:
        return self.engine.runs_as_tuned(config.as_dict(), self.dtype)

    def __call__(self, config: Any) -> bool:
        return self.why(config) is None


def _engine_picks(runs: _RunsAsTuned, winners: dict[str, dict[int, Any]],
                  rows: dict[tuple[str, int], Row]) -> tuple[dict[str, dict[int, Any]], list[str]]:
    """The picks the engine runs as tuned: a pick it would not is replaced by the fastest re-timed
    finalist it would (a UsageError when there is none); the replacements as lines."""
    out: dict[str, dict[int, Any]] = {}
    swapped: list[str] = []
    for gemm, per_batch in winners.items():
        out[gemm] = {}
        for batch, pick in per_batch.items():
            why = runs.why(pick)
            if why is None:
                out[gemm][batch] = pick
                continue
            alt = next((f.config for f in ranked(rows[(gemm, batch)].finalists) if runs(f.config)),
                       None)
            if alt is None:
                raise UsageError(f"--emit {runs.engine.name}: {gemm}'s pick at batch {batch}, "
                                 f"{pick.label()}, does not run as tuned ({why}) and no re-timed "
                                 f"finalist does; rerun with more --finalists, or leave "
                                 f"{runs.engine.name} out of --emit")
            out[gemm][batch] = alt
            swapped.append(f"{gemm} batch {batch}: {pick.label()} -> {alt.label()} ({why})")
    return out, swapped


def _swap_ab_caveat(engine: Any, dtype: str, arch: Any, per_gemm: list[dict[int, Any]]) -> str:
    """A line naming the batch sizes whose written config the engine runs through its swap-AB
    path (Engine.swaps_ab) where this run timed them unswapped; '' when none (or arch unknown)."""
    if arch is None:
        return ""
    batches = sorted({b for picks in per_gemm for b, c in picks.items()
                      if engine.swaps_ab(c.as_dict(), dtype, arch)})
    if not batches:
        return ""
    return (f"{engine.title} >= {engine.swap_ab_since} computes fp8 tiles with BLOCK_SIZE_M < 64 "
            f"and BLOCK_SIZE_N >= 64 on {arch.name} as B x A (swap-AB), which this run did not "
            f"(another engine written for does not): the configs for batch sizes "
            f"{', '.join(map(str, batches))} were timed without it")


def _scales_caveat(engine: Any, dtype: str, timed: str, version: str | None) -> str:
    """A line when the engine applies fp8-block weight scales in another form than the run timed
    (Engine.block_scales): same results, other times; '' otherwise."""
    if dtype != "fp8-block":
        return ""
    own = engine.block_scales(version)
    if own == timed:
        return ""
    return (f"{engine.title} applies fp8 block weight scales per {own} where tilefit's kernel "
            f"was timed with them per {timed} (the form of the other --emit engine): same "
            f"results, other times; tune with --emit {engine.name} alone to time its own form")


def _run_rounds(req: Any) -> int:
    """The run's own re-timing rounds (at least one: --rounds 0 re-timed nothing), so an emission
    re-times on as many rounds as the picks did, reusing theirs from the journal."""
    return max(1, req.rounds)


def _retimed(evaluator: Any, shape: TuneShape, batch: int, configs: list[Any],
             rounds: int) -> dict[Any, float]:
    found = gather([("given", [(c, None) for c in dict.fromkeys(configs)])], len(configs))
    # Every round for each: the medians are summed over both GEMMs, so they must share rounds.
    return {f.config: f.median_us
            for f in retime(evaluator, shape, batch, found, rounds, drop=0.0)}


def _one_config_for_both(evaluator: Any, layer: TuneShape, winners: dict[str, dict[int, Any]],
                         rounds: int) -> tuple[dict[int, Any], str]:
    out: dict[int, Any] = {}
    for batch, c1 in winners["gemm1"].items():
        c2 = winners["gemm2"][batch]
        if c1 == c2:
            out[batch] = c1
            continue
        t1 = _retimed(evaluator, layer.with_gemm("gemm1"), batch, [c1, c2], rounds)
        t2 = _retimed(evaluator, layer.with_gemm("gemm2"), batch, [c1, c2], rounds)
        out[batch] = min((c1, c2), key=lambda c: (t1[c] + t2[c], c))
    return out, ("per batch size, whichever of the gemm1 and gemm2 picks is faster over both "
                 "GEMMs (re-timed together): vLLM runs both GEMMs with one config")


def _down_configs(evaluator: Any, layer: TuneShape, winners: dict[str, dict[int, Any]],
                  rows: dict[tuple[str, int], Row], rounds: int, runs: _RunsAsTuned
                  ) -> tuple[dict[int, Any], str]:
    out: dict[int, Any] = {}
    for batch, c1 in winners["gemm1"].items():
        c2 = winners["gemm2"][batch]
        if c2.block_m == c1.block_m:
            out[batch] = c2
            continue
        same_m = [f.config for f in ranked(rows[("gemm2", batch)].finalists)
                  if f.config.block_m == c1.block_m and runs(f.config)][:1]
        times = _retimed(evaluator, layer.with_gemm("gemm2"), batch, [c1, *same_m], rounds)
        out[batch] = min(times, key=lambda c: (times[c], c))
    return out, ("gemm1's picks; the _down file: gemm2's pick where its BLOCK_SIZE_M equals "
                 "gemm1's (SGLang's rule), else the faster of gemm1's pick and gemm2's best "
                 "finalist with that BLOCK_SIZE_M")


def _sidecar(path: Path, engine: str, req: Any, layer: TuneShape, versions: dict[str, str],
             how: str) -> Path:
    data = {
        "file": path.name, "engine": engine,
        "tuned_kernel": "tilefit's fused-MoE Triton kernel (tilefit.kernels.triton_moe), which "
                        "takes the same six config keys; where the engine is installed, "
                        f"`tilefit tune --target {engine}` tunes the engine's own kernel",
        "picks": how, "gpu": req.device_name, "versions": dict(versions),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "shape": layer.as_dict() | {"gemm": "gemm1+gemm2"}, **dict(req.provenance),
    }
    return write_json_atomic(path.with_name(path.name[:-len(".json")] + SIDECAR_SUFFIX), data,
                             indent=4)
