"""What vLLM and SGLang share about their Triton fused-MoE kernel: the tuned-config file content,
the default-config value, the dtype spelling in file names, and where the installed engine lives.

File names and search order differ per engine and live in engines/vllm.py and engines/sglang.py.
Content (read from both engines' loaders: vllm fused_moe.py get_moe_configs 0.11.0-0.33.0, sglang
fused_moe_triton_config.py 0.5.10-0.5.23): {"triton_version": "x.y.z", "<batch>": {BLOCK_SIZE_M ..
num_stages}, ...}. vLLM pops the version key before reading batch keys; SGLang's loader (through
3.4-era releases) int()s every key, so its files carry the version only in the folder name. An
engine takes the entry whose batch key is nearest to the running batch (ties: the first in file
order). N is the per-rank expert width I/tp (w2's last dimension), not gemm1's 2I/tp.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from tilefit._io import loads_json, read_small_file
from tilefit._io import write_json_atomic as _write_json_atomic
from tilefit.engines.table import TableEngine
from tilefit.engines.types import ConfigLookup, Source, check_arch, check_weight_dtype, parse_version
from tilefit.errors import UsageError
from tilefit.hw.catalog import Arch

# The six keys both engines store, in their order.
CONFIG_KEYS: tuple[str, ...] = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M",
                                "num_warps", "num_stages")
VERSION_KEY = "triton_version"
MAX_CONFIG_FILE_BYTES = 4 * 2**20  # an engine's tuned file is a few KiB (one entry per batch size)
# Keys an engine's default leaves out fall back to Triton's launch defaults.
TRITON_LAUNCH_DEFAULTS = {"num_warps": 4, "num_stages": 3}
TRITON_DEFAULTS_SRC = Source("triton-lang/triton", "python/triton/backends/nvidia/compiler.py "
                             "(CUDAOptions num_warps=4, num_stages=3)", "3.6.0 (installed wheel)")


@dataclass(frozen=True, slots=True)
class DefaultConfig:
    """An engine's default config for one batch size: all six keys, which ones the engine set
    itself (the rest are Triton's launch defaults), the branch taken and its source."""

    engine: str
    version_range: str
    config: dict[str, int] = field(hash=False)
    from_engine: tuple[str, ...]
    branch: str
    sources: tuple[Source, ...] = field(compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "version_range": self.version_range,
                "config": dict(self.config), "from_engine": list(self.from_engine),
                "branch": self.branch, "sources": [str(s) for s in self.sources]}

    def as_moe_config(self) -> Any:
        """The triton-moe family's config value (imports the family lazily)."""
        from tilefit.kernels.triton_moe.config import MoEConfig

        return MoEConfig.from_dict(self.config)


def complete_default(engine: str, raw: Mapping[str, int], branch: str, source: Source,
                     version_range: str) -> DefaultConfig:
    """An engine's partial default dict completed with Triton's launch defaults, with sources."""
    from_engine = tuple(k for k in CONFIG_KEYS if k in raw)
    config = {k: int(raw[k]) if k in raw else TRITON_LAUNCH_DEFAULTS[k] for k in CONFIG_KEYS}
    sources = (source,) if len(from_engine) == len(CONFIG_KEYS) else (source, TRITON_DEFAULTS_SRC)
    return DefaultConfig(engine=engine, version_range=version_range, config=config,
                         from_engine=from_engine, branch=branch, sources=sources)


def engine_dtype(weight_dtype: str) -> tuple[str | None, tuple[int, int] | None]:
    """tilefit weight dtype -> the engines' Triton fused-MoE dtype string and block shape, as
    their config file names and default-config branches spell them."""
    d = check_weight_dtype(weight_dtype)
    if d in ("bf16", "fp16"):
        return None, None
    if d == "fp8":
        return "fp8_w8a8", None
    if d == "fp8-block":
        return "fp8_w8a8", (128, 128)
    raise UsageError(f"the Triton fused-MoE path takes bf16, fp16, fp8 or fp8-block weights, not "
                     f"{weight_dtype}; its engines run {weight_dtype} on other kernels")


def device_part(device_name: str) -> str:
    name = str(device_name).strip()
    if not name:
        raise UsageError("a config file name needs the device name torch reports, e.g. 'NVIDIA H200'")
    return name.replace(" ", "_")


def selectors(dtype: str | None, block_shape: tuple[int, int] | list[int] | None,
              *, spaced: bool) -> str:
    """',dtype=..,block_shape=[..]' as a file name spells it (SGLang: Python's list repr)."""
    text = f",dtype={dtype}" if dtype else ""
    # Both engines drop the block shape when it is absent or has a zero entry.
    if block_shape and all(block_shape):
        bn, bk = (int(v) for v in block_shape)
        text += f",block_shape=[{bn}, {bk}]" if spaced else f",block_shape=[{bn},{bk}]"
    return text


def config_content(per_batch: Mapping[int, Mapping[str, int]], triton_version: str | None
                   ) -> dict[str, Any]:
    """The JSON object the engines read: version first, then batch keys in ascending order."""
    out: dict[str, Any] = {}
    if triton_version:
        out[VERSION_KEY] = str(triton_version)
    for batch in sorted(per_batch):
        cfg = per_batch[batch]
        missing = [k for k in CONFIG_KEYS if k not in cfg]
        if missing:
            raise ValueError(f"config for batch {batch} lacks {', '.join(missing)}")
        out[str(int(batch))] = {k: int(cfg[k]) for k in CONFIG_KEYS}
    return out


def parse_config_content(data: Mapping[str, Any], source: str = "config file"
                         ) -> tuple[str | None, dict[int, dict[str, int]]]:
    """(triton_version, {batch: config}) from an engine file's JSON object; bad entries are a UsageError."""
    if not isinstance(data, Mapping):
        raise UsageError(f"{source}: expected a JSON object keyed by batch size")
    version = data.get(VERSION_KEY)
    per_batch: dict[int, dict[str, int]] = {}
    for key, value in data.items():
        if key == VERSION_KEY:
            continue
        try:
            batch = int(key)
        except ValueError:
            raise UsageError(f"{source}: key {key!r} is not a batch size") from None
        if not isinstance(value, Mapping) or any(k not in value for k in CONFIG_KEYS):
            raise UsageError(f"{source}: entry {key!r} needs the keys {', '.join(CONFIG_KEYS)}")
        if not all(isinstance(value[k], int) and not isinstance(value[k], bool) for k in CONFIG_KEYS):
            raise UsageError(f"{source}: entry {key!r}: {', '.join(CONFIG_KEYS)} must be integers")
        per_batch[batch] = {k: int(value[k]) for k in CONFIG_KEYS}
    return (str(version) if version is not None else None), per_batch


def read_config_file(path: str | os.PathLike[str]) -> tuple[str | None, dict[int, dict[str, int]]]:
    p = Path(path)
    what = "a tuned config file (JSON object keyed by batch size)"
    data = loads_json(read_small_file(p, limit=MAX_CONFIG_FILE_BYTES, what=what), source=str(p), what=what)
    return parse_config_content(data, str(p))


def read_tuned_configs(path: str | os.PathLike[str]) -> tuple[str | None, dict[int, Any]]:
    """(triton_version, {batch: the triton-moe family's config}) from a tuned file, batches ascending."""
    from tilefit.kernels.triton_moe.config import MoEConfig

    version, per_batch = read_config_file(path)
    return version, {b: MoEConfig.from_dict(c) for b, c in sorted(per_batch.items())}


def nearest_batch(keys: list[int] | tuple[int, ...], batch: int) -> int:
    """The engines' lookup: the key with the smallest |key - batch|; on a tie the earlier key in
    file order (ascending in files we write) wins, as Python's min() does in their loaders."""
    if not keys:
        raise ValueError("no batch keys to choose from")
    return min(keys, key=lambda k: abs(k - batch))


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Engine config files: 4-space JSON like the engines' own, written atomically."""
    return _write_json_atomic(path, data, indent=4)


def package_dir(module: str) -> Path | None:
    """An installed engine's package folder, found without importing it; None if absent."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or spec.origin in ("namespace", "built-in"):
        locs = list(spec.submodule_search_locations or []) if spec else []
        return Path(locs[0]) if locs else None
    return Path(spec.origin).parent


def installed_triton_version() -> str | None:
    """The Triton version pip recorded, read from metadata (Triton is not imported)."""
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


class TritonEngine(TableEngine):
    """An engine that runs the Triton fused-MoE kernel (vLLM, SGLang): its default configs per
    batch and its tuned-config lookup, over the subclass's `default_branch` and `_find`."""

    default_sources: Mapping[str, Source] = {}  # range key -> where that range's branches were read
    default_ranges: Mapping[str, str] = {}  # range key -> the versions it covers, for people

    def default_branch(self, M: int, E: int, dtype: str | None, block: tuple[int, int] | None,
                       version: tuple[int, int, int], arch: Arch) -> tuple[dict[str, int], str, str]:
        """get_default_config's answer for batch M: (partial config, branch, range key)."""
        raise NotImplementedError

    def default_configs(self, batches: Iterable[int], *, E: int, weight_dtype: str,
                        arch: Arch | str, version: str | None = None) -> dict[int, DefaultConfig]:
        """The engine's get_default_config per batch (CUDA, not ROCm or batch-invariant modes);
        N, K and top-k enter no branch of the versions read. `version` None: the newest read."""
        a = check_arch(arch)
        dtype, block = engine_dtype(weight_dtype)
        v = parse_version(version or self.newest)
        out = {}
        for m in (int(b) for b in batches):
            if m < 1 or E < 1:
                raise UsageError(f"batch M and experts E must be >= 1, got M={m}, E={E}")
            raw, branch, key = self.default_branch(m, E, dtype, block, v, a)
            out[m] = complete_default(self.name, raw, branch, self.default_sources[key],
                                      self.default_ranges[key])
        return out

    def runs_as_tuned(self, config: Mapping[str, int], weight_dtype: str) -> str | None:
        """None when the engine's fused-MoE kernel runs `config` for `weight_dtype` as tilefit's
        kernel ran it while tuning; else one line saying what the engine does instead. Only
        block-scaled fp8 can differ in what it computes: on a BLOCK_SIZE_K wider than the scale
        block. (How the weight scales are applied, `block_scales`, changes the time, not the
        result: tune times the engine's form.)"""
        _dtype, block = engine_dtype(weight_dtype)
        if block is None or int(config["BLOCK_SIZE_K"]) <= min(block):
            return None
        return self.wide_block_k(int(config["BLOCK_SIZE_K"]), block)

    def wide_block_k(self, block_k: int, block: tuple[int, int]) -> str:
        """What the engine's kernel does with a BLOCK_SIZE_K wider than the scale block."""
        raise NotImplementedError

    # The first version read whose fp8-block kernel applies one weight scale per row and K group
    # to a tile whose BLOCK_SIZE_N is at most the scale block (its columns share the block's scale)
    # instead of one per column; None: per column in every version read.
    row_scale_since: str | None = None

    def block_scales(self, version: str | None = None) -> str:
        return "row" if self._since(self.row_scale_since, version) else "column"

    # The first version read whose fp8 kernel computes a tile with BLOCK_SIZE_M < 64 and
    # BLOCK_SIZE_N >= 64 on sm90 as B x A (swap-AB; tilefit's kernel follows it with `swap_ab`);
    # None: no such path in the versions read.
    swap_ab_since: str | None = None

    # The first version read that reads a separately tuned gemm2 (`_down`) file; None: none does.
    down_files_since: str | None = None

    def reads_down_files(self, version: str | None = None) -> bool:
        return self._since(self.down_files_since, version)

    # The first version read that runs a gemm2 (`_down`) entry whose BLOCK_SIZE_M differs from
    # gemm1's at the same batch with gemm1's BLOCK_SIZE_M (both share one alignment) and a warning;
    # before it the engine asserts they are equal. None: the engine reads no gemm2 file.
    down_block_m_override_since: str | None = None

    def down_block_m_mismatch(self, version: str | None = None) -> str:
        """What the engine (`version`; None: the newest read) does with a gemm2 entry whose
        BLOCK_SIZE_M is not gemm1's: "override" (runs gemm1's) or "assert" (fails)."""
        return "override" if self._since(self.down_block_m_override_since, version) else "assert"

    def _since(self, first: str | None, version: str | None) -> bool:
        """Whether `version` (None: the newest read) is at or after `first` (None: never)."""
        return first is not None and parse_version(version or self.newest) >= parse_version(first)

    def swap_ab_path(self, weight_dtype: str, arch: Arch | str, version: str | None = None) -> bool:
        """Whether the engine (`version`; None: the newest read) has its swap-AB path for
        `weight_dtype` on `arch`: fp8 on sm90 (the triton-moe family's `swap_ab` option)."""
        dtype, _block = engine_dtype(weight_dtype)
        return (dtype == "fp8_w8a8" and check_arch(arch).cc[0] == 9
                and self._since(self.swap_ab_since, version))

    def swaps_ab(self, config: Mapping[str, int], weight_dtype: str, arch: Arch | str,
                 version: str | None = None) -> bool:
        """Whether the engine runs `config` through its swap-AB path (the tiles
        kernels.triton_moe.config.swap_ab_tile names): same result, another kernel."""
        from tilefit.kernels.triton_moe.config import MoEConfig, swap_ab_tile

        return self.swap_ab_path(weight_dtype, arch, version) and swap_ab_tile(MoEConfig.from_dict(config))

    def find_tuned_config(self, *, E: int, N: int, device_name: str, weight_dtype: str,
                          triton_version: str | None = None,
                          config_dir: str | os.PathLike[str] | None = None,
                          environ: Mapping[str, str] | None = None, version: str | None = None,
                          down: bool = False) -> ConfigLookup:
        """The file the engine would load for (E, N, device, dtype), searching `config_dir` (a
        folder the user will point the engine at) first; `environ` defaults to this process's."""
        if E < 1 or N < 1:
            raise UsageError(f"E and N must be >= 1, got E={E}, N={N}")
        user = Path(config_dir).expanduser() if config_dir is not None else None
        try:
            is_folder = user is None or user.is_dir()
        except OSError as e:  # a name over 255 characters, a parent without search permission
            raise UsageError(f"--config-dir {str(user)!r}: {e.strerror or e}") from None
        if not is_folder:
            raise UsageError(f"--config-dir {str(user)!r} is not a folder")
        dtype, block = engine_dtype(weight_dtype)
        self.check_version(version)
        return self._find(E, N, device_name, dtype, block, user,
                          os.environ if environ is None else environ, triton_version, version, down)

    def _find(self, E: int, N: int, device: str, dtype: str | None, block: tuple[int, int] | None,
              user: Path | None, env: Mapping[str, str], triton_version: str | None,
              version: str | None, down: bool) -> ConfigLookup:
        raise NotImplementedError
