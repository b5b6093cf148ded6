"""tilefit's own store of tuned configs: one JSON file per (target, layer shape, device), holding
each GEMM job's configs keyed by batch size, plus the versions they were measured with.

`{"format": 1, "target": .., "shape": {..}, "versions": {..}, "gemm1": {"1": {BLOCK_SIZE_M..}, ..},
"gemm2": {..}}`. Lookup by batch uses the engines' nearest-key rule (engines.triton_moe.nearest_batch);
configs are read back with the target's `config_space.from_dict`, so the store holds any family's.
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

FORMAT = 1


def store_name(target: str, shape: TuneShape, device_name: str) -> str:
    dev = device_name.strip().replace(" ", "_")
    return (f"{target}/E={shape.experts},H={shape.hidden},I={shape.width},k={shape.topk},"
            f"dtype={shape.dtype},device_name={dev}.json")


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
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"cannot read tuned configs from {path}: {e}") from None
    table = data.get(job) or {}
    if not table:
        raise UsageError(f"{path} has no configs for {job}")
    keys = [int(k) for k in table]
    return space.from_dict(table[str(nearest_batch(keys, batch))])
