"""The extension exercise of docs/extending.md, done for real with throwaway code written to a temp
folder: a new engine is one module and its data file (plus one registry line), a new kernel family
is one package (plus one registry line), and `fit` and `check` then work with them unchanged."""

from __future__ import annotations

import sys
import textwrap

import pytest

FAMILY_CODE = '''
"""A toy kernel family: square tiles whose shared memory is stages x 2 x tile^2 x 2 bytes."""
from dataclasses import dataclass

from tilefit.errors import UsageError
from tilefit.kernels.base import AUTOTUNER, SmemFootprint, SmemTerm, judge, judgement


@dataclass(frozen=True, slots=True)
class Square:
    tile: int
    stages: int

    def as_dict(self):
        return {"tile": self.tile, "stages": self.stages}

    def label(self):
        return f"{self.tile}x{self.tile} s{self.stages}"


class ToyFamily:
    name, options, picked_by = "toy-squares", (), AUTOTUNER

    def dtypes(self, arch):
        return ("bf16",)

    def configs(self, arch, dtype, **options):
        return [Square(t, s) for t in (64, 128) for s in (2, 3, 4)]

    def parse_config(self, text, dtype, **options):
        try:
            t, s = (int(x) for x in text.split(","))
        except ValueError:
            raise UsageError(f"write TILE,STAGES, not {text!r}") from None
        return Square(t, s)

    def expand(self, text, config, arch, dtype, **options):
        return [config]

    def footprint(self, config, arch, dtype, **options):
        per_stage = 2 * config.tile * config.tile * 2
        return SmemFootprint(config.stages * per_stage, (SmemTerm("A+B stages", config.stages * per_stage),),
                             config.stages)

    def verdict(self, config, arch, dtype, **options):
        return judge(config, arch, self.footprint(config, arch, dtype))

    def judge(self, configs, arch, dtype, **options):
        return judgement(self, configs, arch, dtype, **options)

    def group(self, config):
        return ""

    def extrapolated(self, config, dtype):
        return False

    def tile(self, config):
        return f"{config.tile}x{config.tile}", config.stages

    def default_config(self, arch, dtype, **shape):
        return Square(64, 2)

    def verify(self, configs, arch, dtype, **options):
        return []

    def summary(self, verdicts):
        return [f"{sum(not v.fits for v in verdicts)} toy tiles do not fit"]

    def blocklist(self, verdicts, **options):
        return None

    def source(self, **options):
        return "the toy list"

    def note(self, **options):
        return None


FAMILY = ToyFamily()
'''

ENGINE_CODE = '''
"""A toy engine that runs the toy family's tiles through an autotuner."""
from pathlib import Path

from tilefit.engines.table import TableEngine
from tilefit.engines.types import FinalizeState
from tilefit.layout import Layout


class Toy(TableEngine):
    name, title, newest, tuned_config_env = "toy", "ToyServe", "1.0", None
    ready_lines, fatal_lines = ("toy ready",), ("toy died",)
    data_file = str(Path(__file__).with_suffix(".toml"))
    select = {"toy-squares": ("SQUARES", "--kernel squares")}
    forced_sources = {}

    def fused_finalize(self, *, version=None, environ=None, settings=None):
        return FinalizeState(self.name, False, "the toy kernel has no fused epilogue", ())

    def layout(self, *, tp=1, ep=1, dp=1, enable_expert_parallel=False, enable_dp_attention=False):
        return Layout(tp=tp, ep=ep, dp=dp)  # --tp and --ep multiply, as tilefit's own layouts


ENGINE = Toy()
'''

ENGINE_DATA = '''
[sources]
toy_doc = ["example/toyserve", "docs/kernels.md", "1.0"]

[[rule]]
engine = "toy"
dtypes = ["bf16", "nvfp4"]
verified = "1.0"
family = "toy-squares"
family_dtype = "bf16"
engine_backend = "SQUARES"
selector = "--kernel squares (the default)"
rule = "ToyServe runs its square tiles for every dtype"
source = ["toy_doc"]

[[fatality]]
engine = "toy"
family = "toy-squares"
fatal = false
why = "its autotuner skips a tile that does not launch"
log_line = "toy: skipped N tiles"
source = ["toy_doc"]
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """Write the engine module, its data file and the family package; add one registry line each."""
    (tmp_path / "toy_family").mkdir()
    (tmp_path / "toy_family" / "__init__.py").write_text(textwrap.dedent(FAMILY_CODE))
    (tmp_path / "toy_engine.py").write_text(textwrap.dedent(ENGINE_CODE))
    (tmp_path / "toy_engine.toml").write_text(textwrap.dedent(ENGINE_DATA))
    monkeypatch.syspath_prepend(str(tmp_path))
    from tilefit.engines import registry as engines
    from tilefit.kernels import registry as kernels

    monkeypatch.setitem(kernels.FAMILIES, "toy-squares", ("toy_family", "toy square tiles"))
    monkeypatch.setitem(engines.ENGINES, "toy", "toy_engine")
    yield
    for name in ("toy_family", "toy_engine"):
        sys.modules.pop(name, None)


def test_a_new_family_works_in_fit(toy, cli):
    r = cli("fit", "--family", "toy-squares", "--arch", "sm120", "--all", "--json")
    assert r.code == 0, r.err
    rows = r.json()
    # 128x128 at 2 stages needs 131,072 B > 101,376 B (sm120): the smallest toy tile to fail.
    assert {row["label"]: row["fits"] for row in rows}["128x128 s2"] is False
    assert sum(row["fits"] for row in rows) == 3  # 64x64 at 2, 3, 4 stages
    text = cli("fit", "--family", "toy-squares", "--arch", "sm120")
    assert text.code == 0 and "3 toy tiles do not fit" in text.out


def test_a_new_engine_runs_the_new_family_in_check(toy):
    # Through the library: the CLI's --engine and launch commands go through tilefit/launch, which
    # reads each engine's flags with its own reader (one more module for a new engine's commands).
    from tilefit.check import CheckRequest, run_check
    from tilefit.engines import Engine, get_engine

    assert isinstance(get_engine("toy"), Engine)
    report = run_check(CheckRequest(model="glm-5-nvfp4", gpu="rtx-pro-6000", engine="toy", ep=8))
    assert report.exit_code == 0
    d = report.as_dict()
    assert d["backend"]["family"] == "toy-squares" and d["backend"]["engine_backend"] == "SQUARES"
    assert d["checked"] == {"family": "toy-squares", "dtype": "bf16", "source": "the toy list", "tactics": 6,
                            "fit": 3, "fail": 3}
    (f,) = [f for f in d["findings"] if f["kind"] == "tactics-cannot-launch"]
    assert f["severity"] == "warning" and "its autotuner skips" in " ".join(f["details"])
    # The engine's unknown paths stay its own: no other engine's rule answers for it.
    with pytest.raises(Exception, match="ToyServe has no Triton fused-MoE"):
        get_engine("toy").default_configs([1], E=8, weight_dtype="bf16", arch="sm120")


NEW_GPU = '''
[gpu.rtx-5080]
name = "NVIDIA GeForce RTX 5080"
aliases = ["rtx5080", "5080"]
arch = "sm120"
sm_count = 84
memory_gb = 16
mem_bandwidth_gbps = 960
tflops = { bf16 = 56, fp16 = 56, fp8 = 113, nvfp4 = 225 }
interconnect = { nvlink_gbps = 0, pcie_gen = 5 }
source = { sm_count = "rtxbw_wp", memory = "rtxbw_wp", tflops = "rtxbw_wp", interconnect = "rtxbw_wp" }
'''


def test_a_gpu_of_a_known_arch_is_one_catalog_entry(monkeypatch, cli):
    from tilefit.hw import catalog

    real = catalog.load_package_toml

    def with_new_gpu(package, name):
        raw = real(package, name)
        if name == "gpus.toml":
            from tilefit._toml import tomllib

            raw["gpu"].update(tomllib.loads(NEW_GPU)["gpu"])
        return raw

    monkeypatch.setattr(catalog, "load_package_toml", with_new_gpu)
    catalog._gpu_table.cache_clear()
    try:
        assert catalog.get_gpu("NVIDIA GeForce RTX 5080").arch.name == "sm120"
        r = cli("check", "--model", "qwen3-30b-a3b", "--gpu", "rtx-5080", "--engine", "sglang", "--json")
        assert r.code in (0, 1), r.err
        assert r.json()["gpu"]["smem_limit_bytes"] == 101376  # from the arch, not the entry
        assert cli("plan", "--model", "qwen3-30b-a3b", "--gpu", "rtx5080").code == 0
        assert cli("fit", "--family", "triton-moe", "--gpu", "5080").code == 0
    finally:
        monkeypatch.undo()
        catalog._gpu_table.cache_clear()
