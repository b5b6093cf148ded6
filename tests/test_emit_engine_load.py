"""The files `tilefit tune --emit vllm,sglang` writes, read back by each engine's own lookup code
(issue 17). The engine comes from its installed wheel; it is pointed at tilefit's output with its
own variable (VLLM_TUNED_CONFIG_FOLDER, SGLANG_MOE_CONFIG_DIR) and must find the file by its own
naming and return exactly the configs tilefit wrote, for every batch key.

The tuning is the fake target's (CPU stand-in timings) through tilefit's real emit path, for GLM-5's
per-rank shapes. Stood in, as there is no GPU here: the device name the engines ask for, and for
SGLang the server settings its lookup reads (deterministic inference off: SGLang's default).
Each test skips with the reason when its engine is not installed. .ci/run installs both into a
folder of their own and runs this file with it on PYTHONPATH; by hand:
    pip install --no-deps --target /tmp/engines -r .ci/engine-lookup.txt
    PYTHONPATH=/tmp/engines python -m pytest -q tests/test_emit_engine_load.py
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import io
import json
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from tilefit.engines import get_engine
from tilefit.engines.triton_moe import VERSION_KEY, nearest_batch, read_config_file

DEVICE = "NVIDIA H200"  # the fake target's device
# zai-org/GLM-5 config.json: hidden_size 6144, moe_intermediate_size 2048, n_routed_experts 256.
HIDDEN, INTER, EXPERTS, TOP_K = 6144, 2048, 256, 8
VLLM_MODULE = "vllm.model_executor.layers.fused_moe.fused_moe"
SGLANG_MODULE = "fused_moe_triton_config.py"


@dataclass(frozen=True)
class Case:
    """A layout as the engine sees it on one rank: E local experts, w2 is [E, hidden, N]."""

    model: str
    layout: tuple[str, str]
    weight_dtype: str  # tilefit's name, for its own lookup model
    E: int
    N: int
    dtype: str | None  # the engines' dtype selector
    block: tuple[int, int] | None
    emit: tuple[str, ...] = ("vllm", "sglang")  # the engines whose files the run writes

    @property
    def w1_shape(self) -> tuple[int, int, int]:
        return (self.E, 2 * self.N, HIDDEN)  # [E, 2N, K]: gate and up fused

    @property
    def w2_shape(self) -> tuple[int, int, int]:
        return (self.E, HIDDEN, self.N)  # [E, K, N]: the engines read E and N from here

    @property
    def block_nk(self) -> tuple[int, int]:
        return self.block or (0, 0)


CASES = {
    "glm5-ep8-bf16": Case("glm-5", ("--ep", "8"), "bf16", EXPERTS // 8, INTER, None, None),
    # zai-org/GLM-5-FP8: quant_method fp8, weight_block_size [128, 128]
    "glm5-ep8-fp8-block": Case("glm-5-fp8", ("--ep", "8"), "fp8-block", EXPERTS // 8, INTER,
                               "fp8_w8a8", (128, 128)),
    "glm5-tp8-bf16": Case("glm-5", ("--tp", "8"), "bf16", EXPERTS, INTER // 8, None, None, ("vllm",)),
    # Under TP SGLang runs GLM-5's shared expert inside the fused MoE (GlmMoeDsaForCausalLM,
    # engines/sglang_shared.py): another GEMM, E = 257, in a file of its own name.
    "glm5-tp8-bf16-sglang": Case("glm-5", ("--tp", "8"), "bf16", EXPERTS + 1, INTER // 8, None, None,
                                 ("sglang",)),
}


@dataclass(frozen=True)
class Emitted:
    case: Case
    out: Path
    files: frozenset[str]
    picks: dict[tuple[str, int], dict[str, int]]  # (job, batch) -> the tuner's pick
    finalists: dict[tuple[str, int], list[dict[str, int]]]  # (job, batch) -> its re-timed finalists

    @property
    def batches(self) -> list[int]:
        return sorted({b for _, b in self.picks})

    def as_engine_runs(self, engine: str, job: str, batch: int) -> list[dict[str, int]]:
        """What `engine`'s file may hold for (job, batch): the pick, or, where the engine would not
        run the pick as tilefit timed it (Engine.runs_as_tuned), the re-timed finalists it would."""
        rule = get_engine(engine).runs_as_tuned
        pick = self.picks[(job, batch)]
        if rule(pick, self.case.weight_dtype) is None:
            return [pick]
        return [f for f in self.finalists[(job, batch)] if rule(f, self.case.weight_dtype) is None]


@pytest.fixture(scope="module", params=sorted(CASES))
def emitted(request, tmp_path_factory) -> Emitted:
    """One `tilefit tune --target fake --emit vllm,sglang` per layout, over the standard batches."""
    from tilefit.cli.main import main

    case = CASES[request.param]
    out = tmp_path_factory.mktemp(request.param)
    args = ["tune", "--model", case.model, *case.layout, "--target", "fake", "--emit", ",".join(case.emit),
            "--out", str(out), "--json", "--compile-workers", "2", "--rounds", "2"]
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = main(args)
    assert code == 0, stderr.getvalue()
    data = json.loads(stdout.getvalue())
    picks = {(r["job"], r["batch"]): r["config_dict"] for r in data["rows"]}
    finalists = {(r["job"], r["batch"]): [f["config_dict"] for f in r["finalists"]] for r in data["rows"]}
    return Emitted(case, out, frozenset(data["files"]), picks, finalists)


def _writes_for(case: Case, engine: str) -> None:
    if engine not in case.emit:
        pytest.skip(f"this layout's run writes {', '.join(case.emit)} files only")


def _written(path: Path) -> dict[int, dict[str, int]]:
    """What tilefit wrote in `path`, read by tilefit's own reader."""
    return read_config_file(path)[1]


def _sidecar(path: Path) -> dict:
    """The provenance file tilefit writes beside an engine file."""
    return json.loads(path.with_name(path.stem + ".tilefit-provenance.json").read_text())


@contextmanager
def _uncached(lookup):
    """Both engines lru-cache get_moe_configs: an answer for another test's folder must not leak."""
    lookup.get_moe_configs.cache_clear()
    try:
        yield
    finally:
        lookup.get_moe_configs.cache_clear()


def _not_installed(engine: str):
    """Decided at collection, so a missing engine costs no tuning run."""
    return pytest.mark.skipif(
        importlib.util.find_spec(engine) is None,
        reason=f"{engine} is not installed: its own get_moe_configs cannot run here (pip install "
               f"--no-deps --target DIR -r .ci/engine-lookup.txt, then PYTHONPATH=DIR)")


# ------------------------------------------------------------------------------------------ vLLM
def _vllm_fused_moe():
    try:
        return importlib.import_module(VLLM_MODULE)
    except ImportError as e:  # installed but broken: say which import, do not skip
        pytest.fail(f"vllm is installed but {VLLM_MODULE} does not import: {e!r}")


@pytest.fixture
def vllm_lookup(emitted, monkeypatch):
    fused_moe = _vllm_fused_moe()
    from vllm.platforms import current_platform

    monkeypatch.setattr(current_platform, "get_device_name", lambda device_id=0: DEVICE)
    monkeypatch.setenv("VLLM_TUNED_CONFIG_FOLDER", str(emitted.out / "vllm"))
    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)  # its lookup returns None then
    with _uncached(fused_moe):
        yield fused_moe


@_not_installed("vllm")
def test_vllm_reads_the_emitted_file_with_its_own_lookup(emitted, vllm_lookup):
    c = emitted.case
    _writes_for(c, "vllm")
    name = vllm_lookup.get_config_file_name(c.E, c.N, c.dtype, list(c.block) if c.block else None)
    path = emitted.out / "vllm" / name
    assert str(path) in emitted.files, f"vLLM looks for {name}; tilefit wrote {sorted(emitted.files)}"
    assert VERSION_KEY in json.loads(path.read_text())  # the key vLLM must pop before int()
    configs = vllm_lookup.get_moe_configs(c.E, c.N, c.dtype, *c.block_nk)
    assert configs == _written(path)
    assert sorted(configs) == emitted.batches
    for batch, config in configs.items():  # one config for both GEMMs: one of the two picks
        assert config in [*emitted.as_engine_runs("vllm", "gemm1", batch),
                          *emitted.as_engine_runs("vllm", "gemm2", batch)]
        if config not in (emitted.picks[("gemm1", batch)], emitted.picks[("gemm2", batch)]):
            assert "replaced" in _sidecar(path)["picks"]  # a replaced pick is said beside the file
    ours = get_engine("vllm").find_tuned_config(E=c.E, N=c.N, device_name=DEVICE,
                                                weight_dtype=c.weight_dtype)
    assert ours.found == path  # tilefit's model of the lookup agrees with vLLM's


@_not_installed("vllm")
def test_vllm_picks_the_config_tilefit_predicts_for_every_batch(emitted, vllm_lookup):
    """try_get_optimal_moe_config: E and N from the per-rank weight shapes, nearest batch key."""
    _writes_for(emitted.case, "vllm")
    c = emitted.case
    configs = _written(emitted.out / "vllm" / vllm_lookup.get_config_file_name(
        c.E, c.N, c.dtype, list(c.block) if c.block else None))
    for m in sorted({*emitted.batches, *range(1, 5000, 13)}):
        got = vllm_lookup.try_get_optimal_moe_config(c.w1_shape, c.w2_shape, TOP_K, c.dtype, m,
                                                     list(c.block) if c.block else None)
        assert got == configs[nearest_batch(list(configs), m)], m


# ---------------------------------------------------------------------------------------- SGLang
@functools.cache
def _sglang_config_module(path: Path):
    """SGLang's lookup module, run from the installed wheel's file. Its package's __init__
    (sglang.srt.layers.moe) imports every model config, and through configs/nano_nemotron_vl.py
    torchvision, whose wheel is a CUDA build (0.5.23); the module's own imports (torch, triton,
    sglang.srt.utils, sglang.srt.runtime_context) all run."""
    spec = importlib.util.spec_from_file_location("_sglang_fused_moe_triton_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sglang_lookup_file() -> Path:
    spec = importlib.util.find_spec("sglang")
    from tilefit.engines.sglang import PKG_ROOTS

    pkg = Path(next(iter(spec.submodule_search_locations)))
    found = [pkg.joinpath(*rel, SGLANG_MODULE) for rel, _ in PKG_ROOTS]
    path = next((p for p in found if p.is_file()), None)
    assert path is not None, f"{SGLANG_MODULE} is in none of {[str(p) for p in found]}"
    return path


@pytest.fixture
def sglang_lookup(emitted, monkeypatch):
    import torch

    try:
        module = _sglang_config_module(_sglang_lookup_file())
    except ImportError as e:  # installed but broken: say which import, do not skip
        pytest.fail(f"sglang is installed but its {SGLANG_MODULE} does not import: {e!r}")
    # sglang.srt.utils.get_device_name asks torch.cuda when CUDA is available.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: DEVICE)
    # The launched server's settings; enable_deterministic_inference defaults to False in
    # ServerArgs (server_args.py, 0.5.10-0.5.23).
    off = SimpleNamespace(enable_deterministic_inference=False)
    if hasattr(module, "get_exec"):  # 0.5.18 on
        monkeypatch.setattr(module, "get_exec", lambda: SimpleNamespace(deterministic=off))
    else:
        monkeypatch.setattr(module, "get_global_server_args", lambda: off)
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(emitted.out / "sglang"))
    with _uncached(module):
        yield module


@_not_installed("sglang")
def test_sglang_reads_the_emitted_files_with_its_own_lookup(emitted, sglang_lookup):
    import triton

    c = emitted.case
    _writes_for(c, "sglang")
    folder = emitted.out / "sglang" / "configs" / ("triton_" + triton.__version__.replace(".", "_"))
    read = {}
    for down in (False, True):
        name = sglang_lookup.get_config_file_name(c.E, c.N, c.dtype, list(c.block_nk), down_moe=down)
        path = folder / name
        assert str(path) in emitted.files, f"SGLang looks for {path}; tilefit wrote {sorted(emitted.files)}"
        read[down] = sglang_lookup.get_moe_configs(c.E, c.N, c.dtype, *c.block_nk, down_moe=down)
        assert read[down] == _written(path)
        assert sorted(read[down]) == emitted.batches
        ours = get_engine("sglang").find_tuned_config(
            E=c.E, N=c.N, device_name=DEVICE, weight_dtype=c.weight_dtype,
            triton_version=triton.__version__, down=down,
            environ={"SGLANG_MOE_CONFIG_DIR": str(emitted.out / "sglang")})
        assert ours.found == path  # tilefit's model of the lookup agrees with SGLang's
    up, gemm2 = read[False], read[True]
    for batch in emitted.batches:
        assert up[batch] in emitted.as_engine_runs("sglang", "gemm1", batch)
        if up[batch] != emitted.picks[("gemm1", batch)]:
            up_name = sglang_lookup.get_config_file_name(c.E, c.N, c.dtype, list(c.block_nk))
            assert "replaced" in _sidecar(folder / up_name)["picks"]
        # Both GEMMs share one moe_align_block_size sort: the _down file keeps gemm1's BLOCK_SIZE_M.
        assert gemm2[batch]["BLOCK_SIZE_M"] == up[batch]["BLOCK_SIZE_M"]
        allowed = emitted.as_engine_runs("sglang", "gemm2", batch)
        if allowed[0]["BLOCK_SIZE_M"] == up[batch]["BLOCK_SIZE_M"] and len(allowed) == 1:
            assert gemm2[batch] == allowed[0]


@_not_installed("sglang")
def test_sglang_ships_fused_shared_expert_files_and_check_reads_them(monkeypatch):
    """SGLang runs DeepSeek-V3's shared expert inside the fused MoE under TP8 (E = 257,
    engines/sglang_shared.py) and ships tuned files under that name: its own lookup finds one for
    the H200, and so does `tilefit check`, which judges it."""
    import torch
    import triton

    from tilefit.check import CheckRequest, run_check

    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR", raising=False)
    module = _sglang_config_module(_sglang_lookup_file())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: DEVICE)
    off = SimpleNamespace(enable_deterministic_inference=False)
    if hasattr(module, "get_exec"):
        monkeypatch.setattr(module, "get_exec", lambda: SimpleNamespace(deterministic=off))
    else:
        monkeypatch.setattr(module, "get_global_server_args", lambda: off)
    with _uncached(module):
        shipped = module.get_moe_configs(257, 256, "fp8_w8a8", 128, 128)
    assert shipped, "SGLang ships no E=257 (DeepSeek-V3 TP8, fused shared expert) file for the H200"
    ours = get_engine("sglang").find_tuned_config(E=257, N=256, device_name=DEVICE, weight_dtype="fp8-block",
                                                  triton_version=triton.__version__, environ={})
    assert ours.found is not None and ours.found.name.startswith("E=257,N=256,")
    report = run_check(CheckRequest(model="deepseek-v3", gpu="h200", tp=8, engine="sglang"))
    assert dict(report.checked.fields)["config_source"].startswith(f"tuned file {ours.found}")
    assert any(f.kind == "shared-experts-fused" for f in report.findings)
