"""The data half of an engine: its backend rules, fatalities and remedies, read from the TOML files
in engines/data/ (every row names its engine, its sources and the versions read), and the methods
of the Engine protocol that only read those rows. An engine module subclasses `TableEngine` and adds
what is code: its default configs, its tuned-config files, its fused-finalize switch.

Rows of one engine may sit in any data file (backends.toml and remedies.toml hold the three engines
read so far, vllm_backends*.toml vLLM's per-version backend rows; a new engine may bring
data/<name>.toml); files load in name order, and a row's sources resolve within its own file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from tilefit._toml import tomllib
from tilefit.engines.types import (
    NO_FUSION, NO_ZERO_ROWS, OVERRIDES, BackendChoice, ConfigLookup, EpComm, Fatality, Remedy,
    SharedFusion, Source, VersionRange, ZeroRows, check_arch, check_weight_dtype, parse_version)
from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch
from tilefit.layout.plan import Layout

REMEDY_KINDS: tuple[str, ...] = ("tuned-config", "blocklist", "finalize", "backend", "warning")
# The CUDA-graph corruption reports (FlashInfer #4841) are for SM120-class parts only.
_WARNING_ARCHS = ("sm120", "sm121")
# Where FlashInfer's CUTLASS MoE takes each weight dtype (vLLM 0.33.0's FlashInferExperts checks,
# which follow FlashInfer's own dispatch): unquantized and per-tensor fp8 on SM90+, block fp8 on
# SM90 only, NVFP4 and MXFP4 (x MXFP8) on SM100+ (SM110 excluded by vLLM).
_FI_CUTLASS_ARCHS = {
    "bf16": ("sm90", "sm100", "sm103", "sm120", "sm121"),
    "fp16": ("sm90", "sm100", "sm103", "sm120", "sm121"),
    "fp8": ("sm90", "sm100", "sm103", "sm120", "sm121"),
    "fp8-block": ("sm90",),
    "nvfp4": ("sm100", "sm103", "sm120", "sm121"),
    "mxfp4": ("sm100", "sm103", "sm120", "sm121"),
}
FP8_TENSOR_CORE_MIN_CC = (8, 9)


@dataclass(frozen=True, slots=True)
class Facts:
    """Every data row of one engine, in file order, each with its `sources` resolved."""

    rules: tuple[dict[str, Any], ...]
    fatalities: tuple[dict[str, Any], ...]
    remedies: tuple[dict[str, Any], ...]
    sources: Mapping[str, Source]  # all files' sources by key, first file wins


def _read(text: str) -> dict[str, Any]:
    """One data file: its sources, and its rows with their `sources` resolved within the file."""
    raw = tomllib.loads(text)
    sources = {k: Source(*v) for k, v in raw.get("sources", {}).items()}
    for kind in ("rule", "fatality", "remedy"):
        for row in raw.get(kind, ()):
            row["sources"] = tuple(sources[s] for s in row["source"])
    return {"sources": sources, **{k: tuple(raw.get(k, ())) for k in ("rule", "fatality", "remedy")}}


@lru_cache(maxsize=1)
def _files() -> tuple[dict[str, Any], ...]:
    data = resources.files("tilefit.engines").joinpath("data")
    return tuple(_read(p.read_text(encoding="utf-8"))
                 for p in sorted(data.iterdir(), key=lambda p: p.name) if p.name.endswith(".toml"))


@lru_cache(maxsize=None)
def facts(engine: str, data_file: str | None = None) -> Facts:
    """`engine`'s rows from engines/data/*.toml, plus those of `data_file` (an engine kept outside
    this package brings its own)."""
    files = _files() + ((_read(Path(data_file).read_text(encoding="utf-8")),) if data_file else ())
    sources: dict[str, Source] = {}
    for f in files:
        sources.update({k: v for k, v in f["sources"].items() if k not in sources})
    rows = {kind: tuple(r for f in files for r in f[kind] if r["engine"] == engine)
            for kind in ("rule", "fatality", "remedy")}
    return Facts(rows["rule"], rows["fatality"], rows["remedy"], sources)


def check_family(family: str) -> str:
    from tilefit.kernels.registry import FAMILIES

    f = str(family).strip().lower()
    if f not in FAMILIES:
        raise UsageError(f"unknown kernel family {family!r}; use one of {', '.join(FAMILIES)}")
    return f


def _family_dtype(rule_dtype: str, weight_dtype: str) -> str:
    """The family's dtype: the rule's, or the checkpoint's own ('same'). Per-tensor fp8 and 128x128
    block fp8 stay two names from the checkpoint to the family (their kernels differ)."""
    return weight_dtype if rule_dtype == "same" else rule_dtype


def _architecture_holds(since: str | list[str], version: str | None) -> bool:
    """An `architectures` entry: the first version with it ("0.5.9"), or [first, first without)."""
    low, high = (since, "") if isinstance(since, str) else (since[0], since[1])
    return VersionRange(low, high).contains(version)


def _matches(rule: dict[str, Any], dtype: str, arch: str, version: str | None, layout: Layout,
             environ: Mapping[str, str], flags: Mapping[str, str] | None = None,
             architecture: str | None = None) -> bool:
    if "dtypes" in rule and dtype not in rule["dtypes"]:
        return False
    if "archs" in rule and arch not in rule["archs"]:
        return False
    # `architectures`: the model's config.json architectures[0] -> the engine versions that have
    # this rule for it. An unknown architecture (None) never matches: the rule is the model's.
    if "architectures" in rule and not (
            architecture in rule["architectures"]
            and _architecture_holds(rule["architectures"][architecture], version)):
        return False
    # `when_flags`: launch flags the engine's rule reads at their default, each absent or one of
    # the listed values ([] = absent). No command line (None): the defaults are assumed.
    if flags is not None and any(k in flags and flags[k] not in allowed
                                 for k, allowed in rule.get("when_flags", {}).items()):
        return False
    # `need_flags`: launch flags the rule needs set, each to one of the listed values (sglang's
    # --moe-a2a-backend deepep). No command line (None): every flag is at its default, which the
    # listed values never include, so the rule does not match.
    if "need_flags" in rule and (flags is None or any(flags.get(k) not in allowed
                                                      for k, allowed in rule["need_flags"].items())):
        return False
    if "ep_gt1" in rule and bool(rule["ep_gt1"]) != (layout.ep > 1):
        return False
    if any(environ.get(k) != v for k, v in rule.get("env", {}).items()):
        return False
    # `flags`: launch flags a rule reads (sglang's SM120 rule reads --quantization). None: the
    # command line is not known, so the rule is taken and its caveat says what it assumed.
    if flags is not None and any(flags.get(k) != v for k, v in rule.get("flags", {}).items()):
        return False
    low, high = rule.get("applies", ["", ""])
    return VersionRange(low, high).contains(version)


def _fill(text: str, values: dict[str, str]) -> str:
    # Plain replacement: remedy texts contain JSON braces that str.format would choke on.
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


class TableEngine:
    """The Engine protocol's data-backed methods (backend, fatality, remedies) over `facts(name)`.

    Subclasses set `name`, `title`, `newest`, `select` (family -> the engine's backend name and the
    switch that picks it) and `forced_sources` (family -> source keys for a `--backend` override),
    and may refine `forced_family` and `backend_name`.
    """

    name: str = ""
    title: str = ""
    newest: str = ""
    data_file: str | None = None  # a TOML file of this engine's rows, for an engine kept elsewhere
    select: Mapping[str, tuple[str, str]] = {}
    forced_sources: Mapping[str, tuple[str, ...]] = {}

    @property
    def facts(self) -> Facts:
        return facts(self.name, self.data_file)

    def check_version(self, version: str | None) -> None:
        if version is not None:
            parse_version(version)  # reject garbage early, with the usage message

    def layout(self, *, tp: int = 1, ep: int = 1, dp: int = 1, enable_expert_parallel: bool = False,
               enable_dp_attention: bool = False) -> Layout:
        """The MoE layout of one replica that this engine builds from its --tp/--ep/--dp flags, read
        with the engine's own meaning (tilefit.launch.parallel_of: sglang carves EP out of TP,
        vLLM spans EP over tp x dp, TensorRT-LLM splits tp_size into ep x moe tp)."""
        from tilefit.launch import parallel_of

        return parallel_of(self.name, tp=tp, ep=ep, dp=dp, enable_expert_parallel=enable_expert_parallel,
                           enable_dp_attention=enable_dp_attention).layout

    def backend(self, weight_dtype: str, arch: Arch | str, *, layout: Layout | None = None,
                version: str | None = None, override: str | None = "auto",
                environ: Mapping[str, str] | None = None,
                flags: Mapping[str, str] | None = None,
                architecture: str | None = None) -> BackendChoice:
        """The kernel family this engine runs for experts stored as `weight_dtype` on `arch`.

        `override` is the CLI's `--backend` (auto | triton | flashinfer-cutlass). Paths tilefit
        does not model, and overrides the engine cannot run, are a UsageError saying what the
        engine supports there. `architecture` is the model's (MoEModel.hf_architecture): rules
        that name architectures (sglang's SM100 per-model choices) match only it.
        """
        dtype = check_weight_dtype(weight_dtype)
        a = check_arch(arch)
        self.check_version(version)
        choice = (override or "auto").strip().lower()
        if choice not in OVERRIDES:
            raise UsageError(f"unknown --backend {override!r}; use one of {', '.join(OVERRIDES)}")
        if choice != "auto":
            return self._forced(dtype, a, choice)
        lay, env = layout or Layout(), environ or {}
        for rule in self.facts.rules:
            if not _matches(rule, dtype, a.name, version, lay, env, flags, architecture):
                continue
            if not rule["family"]:
                raise UsageError(f"{self.name} + {dtype} on {a.name}: {rule['rule']}")
            caveats = list(rule.get("caveats", ())) + [f"rule read in {self.name} {rule['verified']}"]
            bs = rule.get("block_shape")
            return BackendChoice(
                engine=self.name, weight_dtype=dtype, arch=a.name, family=rule["family"],
                family_dtype=_family_dtype(rule["family_dtype"], dtype),
                block_shape=(int(bs[0]), int(bs[1])) if bs else None,
                engine_backend=rule["engine_backend"], rule=rule["rule"], selector=rule["selector"],
                versions=VersionRange(*rule.get("applies", ["", ""])), sources=rule["sources"],
                caveats=tuple(caveats))
        raise UsageError(f"{self.name} + {dtype} on {a.name}: no rule known; pass --backend "
                         f"triton or --backend flashinfer-cutlass to check one path")

    def forced_family(self, family: str, dtype: str, arch: Arch) -> tuple[str, tuple[str, ...]]:
        """The family the engine really runs when told to run `family`, and caveats; a UsageError
        where the engine cannot. The checks here are the kernels' own limits."""
        if family == "triton-moe":
            if dtype in ("nvfp4", "mxfp4"):
                raise UsageError(f"the Triton fused-MoE kernel takes bf16, fp16, fp8 and fp8-block weights, "
                                 f"not {dtype}; use --backend flashinfer-cutlass or auto")
            if dtype.startswith("fp8") and arch.cc < FP8_TENSOR_CORE_MIN_CC:
                raise UsageError(f"{arch.name} has no FP8 tensor cores; the Triton fp8 MoE path needs "
                                 f"sm89 or newer")
            return family, ()
        allowed = _FI_CUTLASS_ARCHS[dtype]
        if arch.name not in allowed:
            raise UsageError(f"FlashInfer's CUTLASS MoE takes {dtype} on {', '.join(allowed)} "
                             f"only, not {arch.name}; use --backend auto or triton")
        return family, ()

    def backend_name(self, family: str, dtype: str) -> tuple[str, str]:
        """The engine's own name for `family` and the switch that selects it."""
        return self.select[family]

    def _forced(self, dtype: str, a: Arch, family_opt: str) -> BackendChoice:
        """`--backend triton|flashinfer-cutlass`: the family the user asks for, if the engine can."""
        asked = "triton-moe" if family_opt == "triton" else "flashinfer-cutlass"
        family, caveats = self.forced_family(asked, dtype, a)
        engine_backend, selector = self.backend_name(family, dtype)
        fdtype = "mxfp8-mxfp4" if dtype == "mxfp4" else _family_dtype("same", dtype)
        return BackendChoice(
            engine=self.name, weight_dtype=dtype, arch=a.name, family=family, family_dtype=fdtype,
            block_shape=(128, 128) if dtype == "fp8-block" else None,
            engine_backend=engine_backend,
            rule=f"--backend {family_opt}: {self.name} runs {family} for {dtype} on {a.name} when told "
                 f"to with {selector}",
            selector=selector, versions=VersionRange(),
            sources=tuple(self.facts.sources[s] for s in self.forced_sources[asked]),
            caveats=caveats, overridden=True)

    def default_configs(self, batches: Iterable[int], *, E: int, weight_dtype: str, arch: Arch | str,
                        version: str | None = None) -> dict[int, Any]:
        raise UsageError(self._no_triton_files())

    def block_scales(self, version: str | None = None) -> str:
        raise UsageError(self._no_triton_files())

    def swap_ab_path(self, weight_dtype: str, arch: Arch | str, version: str | None = None) -> bool:
        raise UsageError(self._no_triton_files())

    def find_tuned_config(self, *, E: int, N: int, device_name: str, weight_dtype: str,
                          triton_version: str | None = None, config_dir: str | os.PathLike[str] | None = None,
                          environ: Mapping[str, str] | None = None, version: str | None = None,
                          down: bool = False) -> ConfigLookup:
        raise UsageError(self._no_triton_files())

    def write_tuned_configs(self, out_dir: str | os.PathLike[str], *, E: int, N: int, device_name: str,
                            weight_dtype: str, gemm1: Mapping[int, Mapping[str, int]],
                            gemm2: Mapping[int, Mapping[str, int]] | None,
                            triton_version: str | None) -> list[Path]:
        raise UsageError(self._no_triton_files())

    def _no_triton_files(self) -> str:
        """Engines that run the Triton fused-MoE kernel (engines/triton_moe.TritonEngine) override
        the three methods above; the others say what they do instead."""
        return (f"{self.title} has no Triton fused-MoE config files or default configs; its MoE runs "
                f"kernels it picks itself ({', '.join(self.select)})")

    def reads_down_files(self, version: str | None = None) -> bool:
        return False

    def down_block_m_mismatch(self, version: str | None = None) -> str:
        return "assert"

    def shared_fusion(self, model: Any, layout: Layout, arch: Arch, runner: str, *,
                      version: str | None = None, flags: Mapping[str, str] | None = None) -> SharedFusion:
        """No fusion unless the engine says otherwise (sglang: engines/sglang_shared.py; vLLM fuses
        the shared expert on ROCm only)."""
        return NO_FUSION

    def ep_zero_rows(self, model: Any, runner: str, *, version: str | None = None,
                     flags: Mapping[str, str] | None = None) -> ZeroRows:
        """Nothing, unless the engine says otherwise (its Triton fused MoE: engines/sglang.py,
        engines/vllm.py); TensorRT-LLM's CUTLASS MoE computes only the local experts' pairs."""
        return NO_ZERO_ROWS

    def ep_comm(self, layout: Layout, *, version: str | None = None,
                flags: Mapping[str, str] | None = None,
                environ: Mapping[str, str] | None = None) -> EpComm:
        """Not read for this engine (TensorRT-LLM's MoE all-to-all options): replicated tokens and
        an all-reduced output assumed, and said."""
        return EpComm("allreduce", f"{self.title}'s EP token exchange is not read: tokens "
                      "replicated to every EP rank and the MoE output all-reduced assumed")

    def fatality(self, family: str) -> Fatality:
        """Whether a config/tactic of `family` that cannot launch kills the engine at warmup."""
        family = check_family(family)
        for row in self.facts.fatalities:
            if row["family"] == family:
                return Fatality(self.name, family, bool(row["fatal"]), row["why"], row["log_line"],
                                row["sources"])
        raise UsageError(f"{self.name} does not run the {family} family (see tilefit's backend rules)")

    def remedies(self, family: str, *, arch: Arch | str | None = None, version: str | None = None,
                 kinds: tuple[str, ...] | None = None, dir: str | None = None,
                 name: str | None = None, file: str | None = None) -> list[Remedy]:
        """The fixes this engine offers for `family`, in its own terms, for this version.

        Warnings (kind 'warning') are returned only for the archs they were reported on (SM120/121)
        or when `arch` is None. Placeholders {dir}, {name}, {file} are filled from the arguments.
        """
        family = check_family(family)
        self.check_version(version)
        if kinds is not None:
            bad = [k for k in kinds if k not in REMEDY_KINDS]
            if bad:
                raise UsageError(f"unknown remedy kind {bad[0]!r}; use {', '.join(REMEDY_KINDS)}")
        arch_name = None if arch is None else check_arch(arch).name
        fill = {"dir": dir or "<dir>", "name": name or "<config file>", "file": file or "<file.json>"}
        out = []
        for row in self.facts.remedies:
            if row["family"] != family or (kinds is not None and row["kind"] not in kinds):
                continue
            if row["kind"] == "warning" and arch_name is not None and arch_name not in _WARNING_ARCHS:
                continue
            versions = VersionRange(*row["versions"])
            if not versions.contains(version):
                continue
            text = _fill(row["text"], fill)
            if version is None and (versions.low or versions.high):
                # Version unknown: every range's fix applies to someone; say which is whose.
                text = f"{self.name} {versions}: {text}"
            out.append(Remedy(engine=self.name, kind=row["kind"], setting=_fill(row["setting"], fill),
                              text=text, versions=versions, sources=row["sources"]))
        return out

    def __repr__(self) -> str:
        return f"<engine {self.name}>"
