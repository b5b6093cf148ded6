"""tilefit's own store of tuned configs: one JSON file per (target, layer shape, device), holding
each GEMM job's configs keyed by batch size, plus the versions they were measured with.

`{"format": 1, "target": .., "shape": {..}, "versions": {..}, "gemm1": {"1": {BLOCK_SIZE_M..}, ..},
"gemm2": {..}}`. Lookup by batch uses the engines' nearest-key rule (engines.triton_moe.nearest_batch);
configs are read back with the target's `config_space.from_dict`, so the store holds any family's.
Format 1 stores were written when the tuner's only fp8 was 128x128 block-scaled and named "fp8" (in
the file name and the shape): `find_store` and `load_store` read them as "fp8-block".
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tilefit.errors import UsageError
from tilefit._io import write_json_atomic
from tilefit.engines.triton_moe import nearest_batch
from tilefit.tune.targets.base import ConfigSpace, TuneShape

FORMAT = 2
_LEGACY_DTYPE = {"fp8-block": "fp8"}  # today's name -> the name format 1 stores used


def store_name(target: str, shape: TuneShape, device_name: str, *, legacy: bool = False) -> str:
    dev = device_name.strip().replace(" ", "_")
    dtype = _LEGACY_DTYPE.get(shape.dtype, shape.dtype) if legacy else shape.dtype
    return (f"{target}/E={shape.experts},H={shape.hidden},I={shape.width},k={shape.topk},"
            f"dtype={dtype},device_name={dev}.json")


def find_store(out_dir: str | os.PathLike[str], target: str, shape: TuneShape,
               device_name: str) -> Path | None:
    """The store file for (target, shape, device) under `out_dir`: today's name, else the name an
    older tilefit gave it (dtype=fp8 for fp8-block); None when neither exists."""
    for legacy in (False, True):
        path = Path(out_dir) / store_name(target, shape, device_name, legacy=legacy)
        if path.is_file():
            return path
    return None


def load_store(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A store file's JSON object, its shape's dtype in today's names."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"cannot read tuned configs from {path}: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not a tilefit store (expected a JSON object)")
    shape = data.get("shape")
    if int(data.get("format", 1)) < 2 and isinstance(shape, dict) and shape.get("dtype") == "fp8":
        data["shape"] = {**shape, "dtype": "fp8-block"}
    return data


def write_tilefit_store(out_dir: str | os.PathLike[str], target: str, shape: TuneShape,
                        device_name: str, winners: dict[str, dict[int, Any]],
                        versions: dict[str, str]) -> Path:
    data: dict[str, Any] = {"format": FORMAT, "target": target,
                            "shape": {k: v for k, v in shape.as_dict().items() if k != "gemm"},
                            "device_name": device_name, "versions": dict(versions)}
    for job, per_batch in sorted(winners.items()):
        data[job] = {str(int(b)): per_batch[b].as_dict() for b in sorted(per_batch)}
    return write_json_atomic(Path(out_dir) / store_name(target, shape, device_name), data, indent=4)


def lookup(path: str | os.PathLike[str], job: str, batch: int, space: ConfigSpace) -> Any:
    """The stored config for `job` nearest to `batch`, as `space`'s config type."""
    table = load_store(path).get(job) or {}
    if not table:
        raise UsageError(f"{path} has no configs for {job}")
    keys = [int(k) for k in table]
    return space.from_dict(table[str(nearest_batch(keys, batch))])
