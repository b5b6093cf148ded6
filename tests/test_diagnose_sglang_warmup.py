"""sglang's start looks like serving: uvicorn comes up, then sglang's own /model_info request and
warmup prefill, then "fired up" (diagnose/sglang_warmup.py). The sglang lines are those of
sgl-project/sglang#17494 (the warmup failed: the server never came up); the vLLM lines are vLLM
0.11's own."""

from __future__ import annotations

import pytest

from tilefit.diagnose import diagnose_bytes

UP = ("[2026-01-21 19:43:29] INFO:     Application startup complete.",
      "[2026-01-21 19:43:29] INFO:     Uvicorn running on http://0.0.0.0:8080 (Press CTRL+C to quit)")
OWN = '[2026-01-21 19:43:30] INFO:     127.0.0.1:35294 - "GET /model_info HTTP/1.1" 200 OK'
PREFILL = ("[2026-01-21 19:43:30 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, "
           "token usage: 0.00, #running-req: 0, #queue-req: 0,")
FIRED = "[2026-01-21 19:43:31] The server is fired up and ready to roll!"


def verdict(*lines: str) -> str:
    return diagnose_bytes(("\n".join(lines) + "\n").encode()).verdict


@pytest.mark.parametrize("lines,expected", [
    ((*UP, OWN, PREFILL), "in-progress"),  # the warmup in flight
    ((*UP, OWN, PREFILL, FIRED), "healthy"),
    ((*UP, "[2026-01-21 19:43:31 TP0] Load weight end. avail mem=20.00 GB", OWN, PREFILL), "in-progress"),
    ((PREFILL, PREFILL), "healthy"),  # an excerpt of a running server: no start in it
    ((*UP, OWN, PREFILL, "[2026-01-21 19:43:50] Received sigquit from a child process. It usually means the "
      "child failed."), "fatal"),
])
def test_sglang_start_and_serving(lines, expected):
    assert verdict(*lines) == expected


def test_vllm_uvicorn_start_is_its_ready_line():
    """vLLM logs uvicorn's start only once the engine is up; a loopback request after it is served."""
    assert verdict("(APIServer pid=4000) INFO 10-06 20:09:03 [api_server.py:1971] Starting vLLM API server 0 on "
                   "http://0.0.0.0:8000", "(APIServer pid=4000) INFO:     Application startup complete.",
                   '(APIServer pid=4000) INFO:     127.0.0.1:51234 - "GET /v1/models HTTP/1.1" 200 OK') == "healthy"
