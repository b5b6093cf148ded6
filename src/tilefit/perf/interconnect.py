"""Interconnect catalog (hw/data/interconnects.toml) and collective-time formulas."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from tilefit._toml import load_package_toml
from tilefit.errors import unknown_name
from tilefit.hw.catalog import GPU


@dataclass(frozen=True, slots=True)
class Interconnect:
    key: str
    description: str
    link_gbps: float
    bandwidth_gbps: float  # achievable bus bandwidth of large collectives, per GPU, one direction
    latency_us: float  # fixed cost of one collective
    source: str

    def all_reduce_us(self, nbytes: float, gpus: int) -> float:
        """Ring all-reduce: each GPU sends and receives 2(p-1)/p of the buffer."""
        if gpus <= 1:
            return 0.0
        return self.latency_us + 2 * (gpus - 1) / gpus * nbytes / (self.bandwidth_gbps * 1e3)

    def all_to_all_us(self, nbytes_per_gpu: float, gpus: int) -> float:
        """All-to-all where each GPU holds `nbytes_per_gpu` and keeps 1/p of it."""
        if gpus <= 1:
            return 0.0
        return self.latency_us + (gpus - 1) / gpus * nbytes_per_gpu / (self.bandwidth_gbps * 1e3)


@lru_cache(maxsize=1)
def _table() -> dict[str, Interconnect]:
    raw = load_package_toml("tilefit.hw", "interconnects.toml")["interconnect"]
    return {k: Interconnect(k, v["description"], float(v["link_gbps"]), float(v["bandwidth_gbps"]),
                            float(v["latency_us"]), v["source"]) for k, v in raw.items()}


def get_interconnect(name: str) -> Interconnect:
    table = _table()
    if name.lower() not in table:
        raise unknown_name("interconnect", name, table, "tilefit compare --help")
    return table[name.lower()]


def default_interconnect(gpu: GPU) -> Interconnect:
    """The fabric a multi-GPU host of this part usually has: NVLink where the part has it (by link
    rate), else PCIe of the part's generation without peer-to-peer."""
    if gpu.nvlink_gbps >= 900:
        return get_interconnect("nvlink5")
    if gpu.nvlink_gbps >= 450:
        return get_interconnect("nvlink4")
    if gpu.nvlink_gbps >= 300:
        return get_interconnect("nvlink3")
    return get_interconnect("pcie5" if gpu.pcie_gen >= 5 else "pcie4")
