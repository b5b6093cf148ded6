"""How often `tilefit diagnose` agrees with what a real log excerpt alone shows.

Reads tests/fixtures/real/*.toml (sidecars written by hand from public GitHub threads: `expected`,
`holdout`, `set`, ...), diagnoses each `.log`, and prints the confusion matrix, fatal recall, non-fatal
logs called fatal, and agreement. By default only the working set (holdout = false) is read; --holdout
reads only the first held-out set (the fifth kept aside in session 3), --holdout2 only the second one
(sidecars with set = "holdout2", collected later from threads not in the corpus), --holdout3 only the
third one (set = "holdout3", collected 2026-12-02 the same way), --holdout4 only the fourth one
(set = "holdout4", collected 2026-12-02 from threads new to the corpus), --holdout5 the fifth
(set = "holdout5", collected 2026-12-02 in session 14, labelled blind), --all everything.

    python benchmarks/diagnose_corpus.py             # working set
    python benchmarks/diagnose_corpus.py --holdout   # the first held-out set, measured once at the end
    python benchmarks/diagnose_corpus.py --holdout2  # the second held-out set, measured once
    python benchmarks/diagnose_corpus.py --holdout3  # the third held-out set, measured once
    python benchmarks/diagnose_corpus.py --holdout4  # the fourth held-out set, measured once
    python benchmarks/diagnose_corpus.py --holdout5  # the fifth held-out set, measured once
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REAL = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "real"
VERDICTS = ("fatal", "recovered", "in-progress", "healthy", "unknown")


def which_set(meta: dict) -> str:
    """'work', 'holdout' (the first held-out set), or the later set's name ('holdout2'...'holdout5')."""
    if not meta.get("holdout"):
        return "work"
    return meta["set"] if meta.get("set") in ("holdout2", "holdout3", "holdout4", "holdout5") else "holdout"


def entries(which: str) -> list[tuple[Path, dict]]:
    out = []
    for toml in sorted(REAL.glob("*.toml")):
        meta = tomllib.loads(toml.read_text())
        if which == "all" or which_set(meta) == which:
            out.append((toml.with_suffix(".log"), meta))
    return out


def measure(which: str, verbose: bool) -> dict:
    from tilefit.diagnose import diagnose_file

    matrix = {e: {g: 0 for g in VERDICTS} for e in VERDICTS}
    wrong = []
    for log, meta in entries(which):
        got = diagnose_file(str(log), workers=1).verdict
        want = meta["expected"]
        matrix[want][got] += 1
        if got != want:
            wrong.append((log.name, want, got))
    total = sum(sum(r.values()) for r in matrix.values())
    agree = sum(matrix[v][v] for v in VERDICTS)
    fatal = sum(matrix["fatal"].values())
    called_fatal = sum(matrix[v]["fatal"] for v in VERDICTS if v != "fatal")
    print(f"{which}: {total} logs; agreement {agree}/{total} = {agree / max(total, 1):.1%}; "
          f"fatal recall {matrix['fatal']['fatal']}/{fatal} = {matrix['fatal']['fatal'] / max(fatal, 1):.1%}; "
          f"non-fatal called fatal: {called_fatal}")
    print("| expected \\ got | " + " | ".join(VERDICTS) + " |")
    print("|---|" + "---:|" * len(VERDICTS))
    for v in VERDICTS:
        print(f"| {v} | " + " | ".join(str(matrix[v][g]) for g in VERDICTS) + " |")
    if verbose:
        for name, want, got in wrong:
            print(f"  {name}: expected {want}, got {got}")
    return {"matrix": matrix, "wrong": wrong}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--holdout", action="store_const", const="holdout", dest="which")
    group.add_argument("--holdout2", action="store_const", const="holdout2", dest="which")
    group.add_argument("--holdout3", action="store_const", const="holdout3", dest="which")
    group.add_argument("--holdout4", action="store_const", const="holdout4", dest="which")
    group.add_argument("--holdout5", action="store_const", const="holdout5", dest="which")
    group.add_argument("--all", action="store_const", const="all", dest="which")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the logs that disagree")
    args = ap.parse_args()
    measure(args.which or "work", args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
