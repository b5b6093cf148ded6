"""Regenerate the CUTLASS MoE calibration table with the nvcc oracle.

    python scripts/calibrate_cutlass.py --flashinfer-data $SITE/flashinfer/data \
        --flashinfer-data $WHEEL_0_6_9/flashinfer/data --flashinfer-data $WHEEL_0_6_6/flashinfer/data

($SITE: the site-packages of a venv with `pip install --no-deps flashinfer-python`; $WHEEL_x: an
unzipped `pip download --no-deps flashinfer-python==x` wheel, for the CUTLASS 4.4.2 and 4.2.1 pins.)
Each --flashinfer-data is a FlashInfer wheel's data dir (installed, or an unzipped wheel); its pinned
CUTLASS version decides which catalogued FlashInfer versions' tactics it measures. Rows for that CUTLASS
version are replaced in src/tilefit/kernels/flashinfer_cutlass/data/calibration.json (written atomically).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tilefit.kernels.flashinfer_cutlass import calibration, catalog, smem
from tilefit.oracles import nvcc_cutlass

FIELDS = ("stages", "epilogue", "epilogue_tensors", "epilogue_pipeline", "epilogue_tensormaps",
          "mainloop", "mainloop_tensors", "mainloop_pipeline", "mainloop_tensormaps", "kernel_tensors",
          "kernel_pipelines", "kernel_tensormaps", "shared_storage", "align", "mainloop_align",
          "epilogue_align")


def tactics_for(cutlass_version: str, archs: list[str], dtypes: list[str]) -> list[catalog.Tactic]:
    """Every TMA-WS tactic of every catalogued FlashInfer version that pins `cutlass_version`."""
    seen: dict[catalog.Tactic, None] = {}
    prof = smem.profile_by_cutlass(cutlass_version)
    for tl in catalog.tactic_lists():
        lo = max(tl.min, prof.flashinfer_min)
        his = [h for h in (tl.max, prof.flashinfer_max) if h is not None]
        if his and lo >= min(his):
            continue  # the list's FlashInfer range and the CUTLASS pin's range do not overlap
        version = ".".join(str(v) for v in lo)
        arch, dtype = tl.archs[0], tl.dtypes[0]  # sm121 shares sm120's kernels
        if arch not in archs or dtype not in dtypes:
            continue
        for t in catalog.tactics(arch, dtype, version):
            if t.schedule == "tma-ws" and (t.native or arch != "sm103"):  # sm103 runs sm100's otherwise
                seen[nvcc_cutlass.kernel_identity(t)] = None
    return list(seen)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flashinfer-data", action="append", required=True)
    p.add_argument("--arch", action="append", default=None,
                   help="default: sm90, sm100, sm103 (its native NVFP4 kernels) and sm120")
    p.add_argument("--dtype", action="append", default=None, help="default: all")
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--out", default=None, help="write the updated table here instead of the packaged one")
    args = p.parse_args(argv)
    archs = args.arch or ["sm90", "sm100", "sm103", "sm120"]
    dtypes = args.dtype or list(catalog.DTYPES)
    table = calibration.load_raw()
    for data_dir in args.flashinfer_data:
        tc = nvcc_cutlass.toolchain(data_dir)
        todo = tactics_for(tc.cutlass_version, archs, dtypes)
        print(f"{tc.describe()}: {len(todo)} kernel types", file=sys.stderr)
        t0 = time.time()
        _, results = nvcc_cutlass.measure(todo, data_dir, jobs=args.jobs, tc=tc)
        print(f"  measured in {time.time() - t0:.0f} s", file=sys.stderr)
        keep = [r for r in table["rows"] if not (r["cutlass"] == tc.cutlass_version
                                                 and r["arch"] in archs and r["dtype"] in dtypes)]
        for t, res in results.items():
            row = {"cutlass": tc.cutlass_version, "arch": t.arch, "dtype": t.dtype, "enum": t.enum,
                   "tile": list(t.tile), "cluster": list(t.cluster), "fusion": t.fusion,
                   "swap_ab": t.swap_ab, "dynamic": t.dynamic_cluster is not None}
            if t.epilogue != "tma":  # SM100 NO_SMEM schedule; rows without the key are TMA
                row["epilogue_schedule"] = t.epilogue
            if t.native:  # SM103-native kernels; rows without the key are the arch family's
                row["native"] = True
            if "error" in res:
                row["error"] = res["error"]
            else:
                row.update({f: res[f] for f in FIELDS})
            keep.append(row)
        table["rows"] = sorted(keep, key=calibration.row_order)
        table["toolchains"][tc.cutlass_version] = tc.describe()
    calibration.save_raw(table, Path(args.out) if args.out else None)
    print(f"wrote {args.out or calibration.PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
