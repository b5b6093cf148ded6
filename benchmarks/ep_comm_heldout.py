"""How often Engine.ep_comm agrees with blind labels on real launch commands.

    PYTHONPATH=src python3 benchmarks/ep_comm_heldout.py [FILE.toml]

FILE defaults to tests/fixtures/a2a/held_out.toml: [[command]] tables with `source`, `engine`,
`command` and `expect` (engine version -> "alltoall" | "allreduce"). Prints one line per label and
the agreement; a command tilefit cannot read, or a version it refuses, counts as a disagreement.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from tilefit.engines import get_engine
from tilefit.errors import UsageError
from tilefit.launch import parse_launch

DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "a2a" / "held_out.toml"


def main(path: Path) -> int:
    commands = tomllib.loads(path.read_text())["command"]
    agree = total = 0
    for c in commands:
        try:
            spec = parse_launch(c["command"])
        except UsageError as e:
            spec, unread = None, str(e)
        for version, label in c["expect"].items():
            total += 1
            if spec is None:
                got, why = "unread", unread
            else:
                try:
                    comm = get_engine(spec.engine).ep_comm(spec.layout, version=version,
                                                           flags=spec.flags(), environ=spec.environ)
                    got, why = comm.mode, comm.why
                except UsageError as e:
                    got, why = "refused", str(e)
            ok = got == label and spec is not None and spec.engine == c["engine"]
            agree += ok
            print(f"{'ok  ' if ok else 'MISS'} {c['source']} @ {version}: label {label}, tilefit {got} ({why})")
    print(f"agreement {agree}/{total}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT))
