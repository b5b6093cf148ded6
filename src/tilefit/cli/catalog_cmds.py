"""`tilefit gpus` and `tilefit models`: list what the catalogs know."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from tilefit.cli.args import add_json_arg
from tilefit.cli.output import print_json, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gpus", help="list GPUs and arch limits in the catalog",
                       description="The GPUs tilefit knows (SM count, shared memory per block, memory "
                                   "bandwidth, dense tensor-core TFLOP/s per dtype) and the per-arch "
                                   "limits the fit models use. Any command's --gpu takes these names or "
                                   "their aliases; --arch takes the arch names.")
    add_json_arg(p)
    p.add_argument("--sources", action="store_true", help="show where each figure comes from")
    p.set_defaults(func=run_gpus)
    p = sub.add_parser("models", help="list MoE model presets",
                       description="The MoE model presets (hidden size H, expert width I, experts E, "
                                   "top-k, MoE layers, shared-expert width, weight dtype). Any command's "
                                   "--model takes these names, their aliases, or a Hugging Face "
                                   "config.json file or folder.")
    add_json_arg(p)
    p.set_defaults(func=run_models)


def run_gpus(args: argparse.Namespace) -> int:
    from tilefit.hw.catalog import all_archs, all_gpus

    gpus, archs = all_gpus(), all_archs()
    if args.json:
        print_json({
            "archs": [{**asdict(a), "cc": list(a.cc)} for a in archs],
            "gpus": [{**g.as_dict(), "aliases": list(g.aliases), "mem_bandwidth_gbps": g.mem_bandwidth_gbps,
                      "smem_per_sm": g.arch.smem_per_sm, "smem_per_block_optin": g.arch.smem_per_block_optin,
                      "regs_per_sm": g.arch.regs_per_sm, "max_threads_per_sm": g.arch.max_threads_per_sm,
                      "tflops_dense": dict(g.tflops), "nvlink_gbps": g.nvlink_gbps, "pcie_gen": g.pcie_gen,
                      "sources": dict(g.sources)} for g in gpus],
        })
        return 0
    rows = [(g.key, g.arch.name, g.sm_count, g.arch.smem_per_block_optin, f"{g.mem_bandwidth_gbps:g}",
             *(f"{g.peak_tflops(t):g}" if g.peak_tflops(t) else "-" for t in ("bf16", "fp8", "fp4")),
             g.name) for g in gpus]
    print(table(["gpu", "arch", "SMs", "smem/block", "GB/s", "bf16 TF", "fp8 TF", "fp4 TF", "name"], rows,
                align="llrrrrrrl"))
    print()
    rows = [(a.name, f"{a.cc[0]}.{a.cc[1]}", a.smem_per_sm, a.smem_per_block_optin, a.regs_per_sm,
             a.max_threads_per_sm) for a in archs]
    print(table(["arch", "cc", "smem/SM", "smem/block (opt-in)", "regs/SM", "threads/SM"], rows))
    if args.sources:
        print()
        for g in gpus:
            for fig, src in g.sources:
                print(f"{g.key} {fig}: {src}")
        for a in archs:
            print(f"{a.name}: " + "; ".join(a.sources))
    return 0


def run_models(args: argparse.Namespace) -> int:
    from tilefit.models.catalog import all_presets, preset_aliases

    models = all_presets()
    if args.json:
        print_json([{**m.as_dict(), "aliases": preset_aliases(m.name)} for m in models])
        return 0
    rows = [(m.name, m.hidden_size, m.expert_width, m.num_experts, m.top_k, f"{m.moe_layers}/{m.num_layers}",
             m.shared_expert_width or "-", m.weight_dtype, ", ".join(preset_aliases(m.name)) or "-")
            for m in models]
    print(table(["model", "H", "I", "E", "top-k", "MoE layers", "shared I", "weights", "aliases"], rows,
                align="lrrrrrrll"))
    return 0
