"""Re-derive tilefit's engine facts from the engines' released wheels and compare, per version.

    pip download --no-deps sglang==0.5.23 -d /tmp/wheels      # and vllm, flashinfer-python
    PYTHONPATH=src python scripts/engine_facts.py /tmp/wheels --cache /tmp/engine_src
    PYTHONPATH=src python scripts/engine_facts.py --download sglang:0.5.10..0.5.23 \
        --download vllm:0.9.0.. --download flashinfer-python:0.5.2..0.7.4 --cache /tmp/engine_src

Wheels are opened as zips and only the files the readers need are kept under --cache (a vLLM
wheel is ~300 MB; its Python sources are what is read); --download fetches with pip and deletes
each wheel after extraction. Prints one row per (fact, version): what the wheel says, what
tilefit's data says, and whether they agree; then a summary. Exit 1 when any row disagrees.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from wheel_facts import flashinfer, sglang, tilefit_side, vllm, wheels  # noqa: E402

READERS = {"sglang": sglang.facts, "vllm": vllm.facts, "flashinfer-python": flashinfer.facts}


def _index_versions(package: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package],
                         capture_output=True, text=True).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith("Available versions:")), "")
    return [v.strip() for v in line.split(":", 1)[-1].split(",") if v.strip()]


def _in_range(version: str, spec: str) -> bool:
    low, _, high = spec.partition("..")
    key = wheels.version_key
    return (not low or key(version) >= key(low)) and (not high or key(version) <= key(high))


def download(specs: list[str], cache: Path) -> list[str]:
    """'pkg:low..high' -> fetch every index version in range; returns the versions not found."""
    missing = []
    for spec in specs:
        package, _, rng = spec.partition(":")
        for v in sorted(_index_versions(package), key=wheels.version_key):
            if ("rc" in v or "dev" in v) or not _in_range(v, rng or ".."):
                continue
            if wheels.download(package, v, cache) is None:
                missing.append(f"{package} {v}")
            print(f"extracted {package} {v}", file=sys.stderr)
    return missing


def rows(cache: Path) -> list[tuple[str, str, str, str, bool]]:
    out = []
    for package, read in READERS.items():
        for version in wheels.versions_cached(cache, package):
            for fact, says in read(cache / package / version).items():
                if fact in tilefit_side.LOG_LINES:
                    ours = tilefit_side.recognised(says)
                else:
                    try:
                        ours = tilefit_side.SAYS[fact](version)
                    except Exception as e:  # a fact tilefit's data does not encode (yet)
                        ours = f"not encoded ({type(e).__name__})"
                out.append((fact, version, says, ours, says == ours))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheels", nargs="*", type=Path, help="wheel files or folders holding wheels")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/engine_src"))
    ap.add_argument("--download", action="append", default=[], metavar="PKG:LOW..HIGH")
    ap.add_argument("--only-disagreements", action="store_true")
    ap.add_argument("--write-flags", type=Path, metavar="TOML",
                    help="also write the engines' flag table (src/tilefit/launch/data/flags.toml)")
    ap.add_argument("--flags-cache", type=Path, default=None, metavar="DIR",
                    help="extracted older releases read for the flag table only (e.g. sglang 0.4.0-0.5.9)")
    ap.add_argument("--write-pins", type=Path, metavar="TOML",
                    help="also write the FlashInfer pins (src/tilefit/engines/data/flashinfer_pins.toml)")
    args = ap.parse_args(argv)
    for item in args.wheels:
        for whl in sorted(item.glob("*.whl")) if item.is_dir() else [item]:
            wheels.extract(whl, args.cache)
    missing = download(args.download, args.cache) if args.download else []
    for target, module in ((args.write_flags, "flag_table"), (args.write_pins, "pins")):
        if target:
            maker = __import__(f"wheel_facts.{module}", fromlist=["table"]).table
            table_text = (maker(args.cache, args.flags_cache) if module == "flag_table" else maker(args.cache))
            tmp = target.with_suffix(".tmp")
            tmp.write_text(table_text)
            tmp.replace(target)  # atomic: a reader never sees half a table
    table = rows(args.cache)
    width = max((len(r[0]) for r in table), default=10)
    print(f"{'fact':<{width}}  {'version':<13} {'wheel says':<55} {'tilefit says':<55} agree")
    for fact, version, says, ours, ok in table:
        if ok and args.only_disagreements:
            continue
        print(f"{fact:<{width}}  {version:<13} {says:<55} {ours:<55} {'yes' if ok else 'NO'}")
    bad = [r for r in table if not r[4]]
    per = {p: len(wheels.versions_cached(args.cache, p)) for p in READERS}
    print(f"\n{len(table)} facts checked over {', '.join(f'{n} {p}' for p, n in per.items())} "
          f"versions; {len(bad)} disagree"
          + (f"; not on the index: {', '.join(missing)}" if missing else ""))
    for fact in sorted({r[0] for r in bad}):
        vs = [r[1] for r in bad if r[0] == fact]
        print(f"  {fact}: {len(vs)} versions ({vs[0]} .. {vs[-1]})")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
