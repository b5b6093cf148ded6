"""sglang's start as its log shows it: uvicorn comes up ("Application startup complete", "Uvicorn
running on"), then sglang asks itself for /model_info (/get_model_info before 0.5.5) and sends one
warmup request (/generate, /encode, or /v1/chat/completions for a VLM) whose batch the scheduler
logs like any other, and only then logs "The server is fired up and ready to roll!"
(entrypoints/http_server.py _wait_and_warmup, read in the 0.4.6, 0.5.4 and 0.5.23 wheels).

So in an sglang log that shows uvicorn's start, only "fired up" means ready: what is served between
them is the warmup (or a request answered while the warmup has not finished) and counts for
nothing, and a ready line taken before the log named sglang is taken back. Served lines change no
state here, so a reader that skips repeated served lines (diagnose/parallel.py) reads alike.
The tracker (diagnose/verdict.py) hands each marker line to `see`.
"""

from __future__ import annotations

from tilefit.diagnose import events as ev
from tilefit.diagnose.events import Event

STARTING = "HTTP server up, sglang's warmup not finished"


class SglangWarmup:
    def __init__(self) -> None:
        self.uvicorn_start: int | None = None  # the first uvicorn start line
        self.waiting = False  # sglang known, uvicorn started, no "fired up" yet
        self.fired = False

    def see(self, e: Event, ready: Event | None, engines: dict[str, int]) -> tuple[Event | None, bool]:
        """(the ready line to keep, whether the tracker should take `e` at all); `e` itself is
        turned from ready into progress where it is uvicorn's start in an sglang log."""
        weak = e.kind == ev.READY and bool(e.fields.get("weak"))
        if weak and self.uvicorn_start is None:
            self.uvicorn_start = e.line
        if "sglang" not in engines or self.fired or self.uvicorn_start is None:
            return ready, True
        if not self.waiting:
            self.waiting = True
            if ready is not None and ready.line >= self.uvicorn_start:
                if ready.fields.get("weak"):  # uvicorn's start: progress after all
                    ready.kind, ready.fields["phase"] = ev.PROGRESS, STARTING
                ready = None  # read as ready before the log named sglang
        if e.kind != ev.READY:
            return ready, True
        if weak:
            e.kind, e.fields["phase"] = ev.PROGRESS, STARTING
            return ready, True
        if e.fields.get("phase") == "serving":
            return ready, False
        self.waiting, self.fired = False, True  # "fired up"
        return ready, True
