"""The engines' own Triton fused-MoE kernels as tuning targets, used only when the engine is
installed: a vLLM or SGLang user tunes the kernel the server will run. Nothing of either engine
is copied here; their `fused_experts` is imported and launched under their `override_config`.
File names and formats are the engine's own (tilefit.engines: `write_tuned_configs`).

Both engines' tuners time gemm1 + gemm2 together with one config, and so do these targets (the
"both" job); the result is written in the engine's file format. bf16/fp16 only for now (the
engines' fp8 argument lists differ across releases). The SMEM prefilter uses tilefit's model of
the same grid (616 of 1920 fail on an H200 for vLLM's kernel, as for ours: benchmarks/RESULTS.md); a config
that passes it and fails at launch anyway is reported as a model bug.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from typing import Any

from tilefit.errors import MissingDependency, UsageError
from tilefit.tune.targets.base import TuneShape
from tilefit.tune.targets.tilefit_moe import TilefitMoETarget


def require_engine(module: str, pip_name: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise MissingDependency(f"--target {pip_name} tunes {pip_name}'s own kernel and needs "
                                f"{pip_name} installed in this environment (pip install {pip_name}); "
                                f"--target tilefit needs no engine")


def _first_attr(name: str, modules: tuple[str, ...]) -> Any:
    """`name` from the first of `modules` that has it: the engines move their helpers between
    releases (the paths listed were read in SGLang's tuning scripts of several releases)."""
    import importlib

    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise MissingDependency(f"{name} was not found in {' or '.join(modules)}: this engine release "
                            f"is not supported by tilefit tune yet; use --target tilefit")


class _EngineTarget(TilefitMoETarget):
    """Shared by the engine targets; each defines `_override()` (the engine's override_config)
    and `_call(inputs, shape)` (one launch of the engine's fused_experts)."""

    jobs = ("both",)
    engine = ""

    def space(self, shape: TuneShape) -> list[Any]:
        if shape.dtype not in ("bf16", "fp16"):
            raise UsageError(f"--target {self.engine} tunes bf16/fp16 for now; use --target tilefit "
                             f"for fp8-block, or --dtype bf16")
        return super().space(shape)

    def default_config(self, shape: TuneShape, batch: int) -> Any:
        from tilefit.engines import get_engine

        d = get_engine(self.engine).default_configs([batch], E=shape.experts, weight_dtype=shape.dtype,
                                                    arch=self.arch)
        return d[batch].as_moe_config()

    def fit_reason(self, config: Any, shape: TuneShape) -> Any:
        worst = None
        for gemm in ("gemm1", "gemm2"):
            r = super().fit_reason(config, shape.with_gemm(gemm))
            worst = worst or r
        return worst

    def compile_key(self, config: Any) -> Any:
        # The engines' fused_moe_kernel takes GROUP_SIZE_M as a tl.constexpr (vLLM 0.33.0
        # fused_moe.py l.341, SGLang 0.5.23 fused_moe_triton_kernels.py l.367): one compile each.
        return config

    def run_many(self, configs: list[Any], shape: TuneShape, batch: int) -> list[float]:
        # The engine's fused_experts is timed whole by do_bench, one config at a time.
        return [self.run(c, shape, batch) for c in configs]

    def compile(self, config: Any, shape: TuneShape) -> None:
        return None  # the engine's kernel compiles at its first launch, in the GPU worker

    def timing(self, shape: TuneShape, batch: int) -> str:
        return "events"  # `run` below times the engine's fused_experts with do_bench at every batch

    def versions(self) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        out = super().versions()
        try:
            out[self.engine] = version(self.engine)
        except PackageNotFoundError:
            pass
        return out

    def _engine_inputs(self, shape: TuneShape, batch: int) -> dict[str, Any]:
        """w1 [E, 2I, H] and w2 [E, H, I] once per shape on the device; x and routing per batch."""
        import torch

        from tilefit.tune.targets.draws import half_dtype, routing
        from tilefit.tune.targets.tilefit_moe import ACTIVATIONS_KEPT

        wkey = ("engine-weights", shape)
        if wkey not in self._inputs:
            self._inputs.clear()
            g = torch.Generator(device=self.device).manual_seed(self.seed)
            h, i, e = shape.hidden, shape.width, shape.experts
            self._inputs[wkey] = {
                "w1": (torch.randn(e, 2 * i, h, generator=g, device=self.device) / 4).to(half_dtype(shape)),
                "w2": (torch.randn(e, h, i, generator=g, device=self.device) / 4).to(half_dtype(shape))}
        key = ("engine-batch", shape, batch)
        if key in self._inputs:  # the last few batch sizes' are kept, the newest last
            self._inputs[key] = self._inputs.pop(key)  # (tilefit_moe.ACTIVATIONS_KEPT says why)
        else:
            kept = [k for k in self._inputs if k[0] == "engine-batch"]
            for old in kept[:max(0, len(kept) + 1 - ACTIVATIONS_KEPT)]:
                del self._inputs[old]
            ids, weights = routing(shape, batch, self.seed, local=False)
            g = torch.Generator(device="cpu").manual_seed(self.seed + 1)
            x = (torch.randn(batch, shape.hidden, generator=g) / shape.hidden ** 0.5).to(half_dtype(shape))
            p = {"x": x.to(self.device), "ids": ids.to(self.device),
                 "weights": weights.float().to(self.device), **self._inputs[wkey]}
            if shape.total_experts != shape.experts:  # EP: global ids, a map to this rank's experts
                emap = torch.full((shape.total_experts,), -1, dtype=torch.int32)
                emap[:shape.experts] = torch.arange(shape.experts, dtype=torch.int32)
                p["expert_map"] = emap.to(self.device)
            self._inputs[key] = p
        return self._inputs[key]

    def run(self, config: Any, shape: TuneShape, batch: int) -> float:
        import torch
        from triton.testing import do_bench

        p = self._engine_inputs(shape, batch)
        override = self._override()
        cfg = config.as_dict()

        def launch() -> Any:
            with override(cfg):
                return self._call(p, shape)

        launch()
        torch.cuda.synchronize()
        return 1000.0 * float(do_bench(launch, warmup=self.warmup_ms, rep=self.rep_ms,
                                       return_mode="median"))

    def check(self, config: Any, shape: TuneShape, batch: int) -> str | None:
        return None  # the engine's kernel is the engine's to test; we only time it

    def write(self, out_dir: Path, shape: TuneShape, device_name: str,
              winners: dict[str, dict[int, Any]]) -> list[Path]:
        """The "both" job's winners in the engine's own file format."""
        from tilefit.engines import get_engine

        per_batch = {b: c.as_dict() for b, c in winners["both"].items()}
        return get_engine(self.engine).write_tuned_configs(
            out_dir, E=shape.experts, N=shape.width, device_name=device_name, weight_dtype=shape.dtype,
            gemm1=per_batch, gemm2=None, triton_version=self.versions().get("triton"))


class VllmTarget(_EngineTarget):
    name = "vllm"
    engine = "vllm"

    def _override(self) -> Any:
        from vllm.model_executor.layers.fused_moe import override_config

        return override_config

    def _call(self, p: dict[str, Any], shape: TuneShape) -> Any:
        from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts

        kw: dict[str, Any] = {}
        if "expert_map" in p:
            kw = {"global_num_experts": shape.total_experts, "expert_map": p["expert_map"]}
        return fused_experts(p["x"], p["w1"], p["w2"], p["weights"], p["ids"], **kw)



class SglangTarget(_EngineTarget):
    name = "sglang"
    engine = "sglang"

    def _override(self) -> Any:
        return _first_attr("override_config", ("sglang.srt.layers.moe.fused_moe_triton",
                                               "sglang.srt.layers.moe.moe_runner.triton_utils"))

    def _call(self, p: dict[str, Any], shape: TuneShape) -> Any:
        if "expert_map" in p:
            raise UsageError("--target sglang tunes without expert parallelism for now (--ep 1)")
        fused_experts = _first_attr("fused_experts", (
            "sglang.srt.layers.moe.fused_moe_triton.fused_moe",
            "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe"))
        params = inspect.signature(fused_experts).parameters
        if "topk_output" in params:  # releases that pass routing as a StandardTopKOutput
            from sglang.srt.layers.moe.topk import StandardTopKOutput

            topk = StandardTopKOutput(p["weights"], p["ids"], None)
            kw = {}
            if "moe_runner_config" in params:
                runner_config = _first_attr("MoeRunnerConfig", ("sglang.srt.layers.moe.moe_runner",
                                                                "sglang.srt.layers.moe"))
                kw["moe_runner_config"] = runner_config()
            return fused_experts(p["x"], p["w1"], p["w2"], topk, **kw)
        return fused_experts(p["x"], p["w1"], p["w2"], p["weights"], p["ids"])

