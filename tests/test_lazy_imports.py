"""`import tilefit`, `tilefit plan` and `tilefit check` (output piped) must not load torch, triton, ray,
nor the terminal and plotting libraries (rich, matplotlib), which only a terminal or `report` needs."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ["torch", "triton", "ray", "pynvml", "rich", "matplotlib"]

PROBE = """
import json, sys
import tilefit
from tilefit.cli.main import main
import io, contextlib
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["plan", "--model", "glm-5", "--ep", "8", "--gpu", "rtx-pro-6000"])
    code |= main(["check", "--model", "glm-5-nvfp4", "--ep", "8", "--gpu", "rtx-pro-6000", "--engine", "sglang"])
print(json.dumps({"code": code, "loaded": [m for m in %r if m in sys.modules]}))
"""


def test_plan_loads_no_heavy_module():
    r = subprocess.run([sys.executable, "-c", PROBE % (HEAVY,)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "loaded": []}
