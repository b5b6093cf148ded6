"""The fused-MoE config files vLLM and SGLang read: names, contents, lookup, atomic writes.

Formats (read from the engines' loaders, FACTS.md section 5):
  vLLM   `E={E},N={N},device_name={dev}[,dtype={d}][,block_shape=[bn,bk]].json` (no space in the
         block shape; any H200 variant is named NVIDIA_H200), looked up in VLLM_TUNED_CONFIG_FOLDER.
  SGLang `triton_X_Y_Z/E={E},N={N},device_name={dev}[,dtype={d}][,block_shape=[bn, bk]][_down].json`
         (the block shape is Python's list repr, with a space); `_down` holds gemm2's configs,
         whose BLOCK_SIZE_M must equal gemm1's at the same batch size.
Content: {"triton_version": "x.y.z", "<batch>": {BLOCK_SIZE_M .. num_stages}, ...}. vLLM pops the
version key before reading batch keys; SGLang's loader (through 3.4-era releases) int()s every key,
so its files carry the version only in the folder name and omit the key. An engine
takes the entry whose batch key is nearest to the running batch (ties: the first in file order).
N is the per-rank expert width I/tp (w2's last dimension), not gemm1's 2I/tp.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tilefit._io import write_json_atomic as _write_json_atomic
from tilefit.errors import UsageError

# The six keys both engines store, in their order.
CONFIG_KEYS: tuple[str, ...] = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M",
                                "num_warps", "num_stages")
VERSION_KEY = "triton_version"


def _device_part(device_name: str) -> str:
    name = str(device_name).strip()
    if not name:
        raise UsageError("a config file name needs the device name torch reports, e.g. 'NVIDIA H200'")
    return name.replace(" ", "_")


def _selectors(dtype: str | None, block_shape: tuple[int, int] | list[int] | None,
               *, spaced: bool) -> str:
    text = f",dtype={dtype}" if dtype else ""
    # Both engines drop the block shape when it is absent or has a zero entry.
    if block_shape and all(block_shape):
        bn, bk = (int(v) for v in block_shape)
        text += f",block_shape=[{bn}, {bk}]" if spaced else f",block_shape=[{bn},{bk}]"
    return text


def vllm_device_name(device_name: str) -> str:
    """The device part of a vLLM file name: spaces -> '_', any H200 variant -> 'NVIDIA_H200'."""
    name = _device_part(device_name)
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def vllm_config_name(E: int, N: int, device_name: str, dtype: str | None = None,
                     block_shape: tuple[int, int] | list[int] | None = None) -> str:
    """vLLM's file name, e.g. 'E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json'."""
    return (f"E={int(E)},N={int(N)},device_name={vllm_device_name(device_name)}"
            f"{_selectors(dtype, block_shape, spaced=False)}.json")


def sglang_version_dir(triton_version: str) -> str:
    """'3.4.0' -> 'triton_3_4_0' (SGLang keeps one folder per Triton version)."""
    v = str(triton_version).strip()
    if not v or any(c in v for c in "/\\\0"):
        raise UsageError(f"bad Triton version {triton_version!r} for an SGLang config folder")
    return "triton_" + v.replace(".", "_")


def sglang_config_name(E: int, N: int, device_name: str, dtype: str | None = None,
                       block_shape: tuple[int, int] | list[int] | None = None,
                       down: bool = False) -> str:
    """SGLang's file name (no folder); `down` names the separately tuned gemm2 file."""
    return (f"E={int(E)},N={int(N)},device_name={_device_part(device_name)}"
            f"{_selectors(dtype, block_shape, spaced=True)}{'_down' if down else ''}.json")


def sglang_config_relpath(E: int, N: int, device_name: str, triton_version: str,
                          dtype: str | None = None,
                          block_shape: tuple[int, int] | list[int] | None = None,
                          down: bool = False) -> str:
    """'triton_3_4_0/E=..,N=..,device_name=..[,dtype=..][,block_shape=[bn, bk]][_down].json'."""
    return f"{sglang_version_dir(triton_version)}/" + sglang_config_name(
        E, N, device_name, dtype, block_shape, down)


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


def check_down_configs(gemm1: Mapping[int, Mapping[str, int]],
                       gemm2: Mapping[int, Mapping[str, int]]) -> None:
    """SGLang's rule for a `_down` file: same batch keys, BLOCK_SIZE_M equal to gemm1's."""
    if set(gemm1) != set(gemm2):
        raise ValueError(f"gemm1 and gemm2 configs cover different batches: "
                         f"{sorted(set(gemm1) ^ set(gemm2))}")
    bad = [b for b in gemm1 if gemm1[b]["BLOCK_SIZE_M"] != gemm2[b]["BLOCK_SIZE_M"]]
    if bad:
        raise ValueError(f"SGLang's _down configs need gemm1's BLOCK_SIZE_M; batches {sorted(bad)} differ")


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
        per_batch[batch] = {k: int(value[k]) for k in CONFIG_KEYS}
    return (str(version) if version is not None else None), per_batch


def read_config_file(path: str | os.PathLike[str]) -> tuple[str | None, dict[int, dict[str, int]]]:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"cannot read {p}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{p} is not valid JSON ({e.msg} at line {e.lineno})") from None
    except (RecursionError, UnicodeDecodeError):
        raise UsageError(f"{p} is not a tuned config file (JSON object keyed by batch size)") from None
    return parse_config_content(data, str(p))


def nearest_batch(keys: list[int] | tuple[int, ...], batch: int) -> int:
    """The engines' lookup: the key with the smallest |key - batch|; on a tie the earlier key in
    file order (ascending in files we write) wins, as Python's min() does in their loaders."""
    if not keys:
        raise ValueError("no batch keys to choose from")
    return min(keys, key=lambda k: abs(k - batch))


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Engine config files: 4-space JSON like the engines' own, written atomically."""
    return _write_json_atomic(path, data, indent=4)


def write_vllm_file(out_dir: str | os.PathLike[str], E: int, N: int, device_name: str,
                    per_batch: Mapping[int, Mapping[str, int]], triton_version: str | None,
                    dtype: str | None = None, block_shape: tuple[int, int] | None = None) -> Path:
    name = vllm_config_name(E, N, device_name, dtype, block_shape)
    return write_json_atomic(Path(out_dir) / name, config_content(per_batch, triton_version))


def write_sglang_files(out_dir: str | os.PathLike[str], E: int, N: int, device_name: str,
                       gemm1: Mapping[int, Mapping[str, int]],
                       gemm2: Mapping[int, Mapping[str, int]] | None, triton_version: str,
                       dtype: str | None = None, block_shape: tuple[int, int] | None = None
                       ) -> list[Path]:
    """gemm1's file and, when gemm2 was tuned separately, the `_down` file next to it."""
    if gemm2 is not None:
        check_down_configs(gemm1, gemm2)
    paths = [write_json_atomic(
        Path(out_dir) / sglang_config_relpath(E, N, device_name, triton_version, dtype, block_shape),
        config_content(gemm1, None))]
    if gemm2 is not None:
        paths.append(write_json_atomic(
            Path(out_dir) / sglang_config_relpath(E, N, device_name, triton_version, dtype,
                                                  block_shape, down=True),
            config_content(gemm2, None)))
    return paths
