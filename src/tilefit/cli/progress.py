"""Progress on stderr for long work: a live rich bar when stderr is a terminal, plain lines otherwise.

`Bar` is the generic one (`fit --verify`, `diagnose` on a large file): work done out of a total,
drawn only on a terminal, so that logs and pipes stay quiet. `TuneProgress` turns the tuner's
progress events ("job", "measured", "row", "warning") into a bar with the searches done, the
configs timed, the current batch, the best time so far and the time left against --budget; off a
terminal it prints the plain lines scripts and CI logs read.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _clock(seconds: float) -> str:
    # whole seconds, down; the microsecond added keeps a whole number of seconds that floating
    # point puts a hair under it (600 - ((t + 90) - t) is 509.9999999998 for some monotonic t)
    seconds = max(0, int(seconds + 1e-6))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


class Bar:
    """A bar for `total` units of work, drawn on stderr only when it is a terminal. Use as a
    context manager; `advance(n)` as the work goes."""

    def __init__(self, description: str, total: float, *, stream: TextIO | None = None,
                 live: bool | None = None):
        self.stream = stream or sys.stderr
        self.live = _is_tty(self.stream) if live is None else live
        self._progress: Any = None
        self._task: Any = None
        if self.live:
            from rich.console import Console
            from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress,
                                       TextColumn, TimeRemainingColumn)

            counter = DownloadColumn() if description.startswith("reading") else MofNCompleteColumn()
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), counter,
                                      TimeRemainingColumn(), transient=True,
                                      console=Console(file=self.stream, stderr=True))
            self._task = self._progress.add_task(description, total=total)

    def __enter__(self) -> Bar:
        if self._progress is not None:
            self._progress.start()
        return self

    def advance(self, amount: float = 1) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=amount)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


class TuneProgress:
    """The tuner's progress callback `(event, data)`: a live bar on a terminal, else plain lines."""

    def __init__(self, *, budget_minutes: float | None = None, stream: TextIO | None = None,
                 live: bool | None = None):
        self.stream = stream or sys.stderr
        self.live = _is_tty(self.stream) if live is None else live
        self.budget_s = None if budget_minutes is None else 60.0 * budget_minutes
        self.started = time.monotonic()
        self.timed = 0          # configs compiled and timed so far, all searches
        self.done = 0           # searches (one GEMM at one batch size) finished
        self.total = 0
        # Best time per search in progress, by (GEMM, batch) (microseconds): side by side
        # (tune.schedule: two GEMMs x two batch-size segments), the probes of four searches
        # interleave, two of them the same GEMM's; the bar shows the last started one's.
        self._best: dict[Any, float] = {}
        self._job: Any = None
        self.current = ""
        self._progress: Any = None
        self._task: Any = None

    @property
    def best(self) -> float | None:
        """The best time so far of the search the bar names (microseconds)."""
        return self._best.get(self._job)

    # The fields the bar shows, as text.
    def status(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = now - self.started
        best = f"best {self.best:.2f} us" if self.best is not None else "best -"
        if self.budget_s is not None:
            left = f"{_clock(self.budget_s - elapsed)} of {_clock(self.budget_s)} budget left"
        elif self.done:
            left = f"~{_clock(elapsed / self.done * (self.total - self.done))} left"
        else:
            left = "time left: after the first search"
        return f"{self.timed} configs timed, {best}, {left}"

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if event == "job":
            # `index` counts searches started: with a layer's searches side by side
            # (tune.schedule) one starts before the others end, so only rows count as done.
            self.total = data["total"]
            self.current = f"{data['job']} batch {data['batch']}"
            self._job = (data["job"], data["batch"])
            self._best.pop(self._job, None)
            if self.live:
                self._draw()
            else:
                print(f"tune: {self.current} ({self.done + 1}/{self.total})", file=self.stream, flush=True)
        elif event == "measured":
            self.timed += 1
            t = data.get("time_us")
            job = (data["job"], data["batch"]) if "job" in data else self._job
            if t is not None and t < self._best.get(job, float("inf")):
                self._best[job] = t
            if self.live:
                self._draw()
        elif event == "row":
            self.done += 1
            if self.live:
                self._draw()
            else:
                t = data["time_us"]
                # Named: side by side, the row that ends may be another search's.
                print(f"tune:   {data['job']} batch {data['batch']} -> {data['config'] or 'nothing ran'}"
                      + (f" {t:.2f} us" if t else "")
                      + f" ({data['trials']} trials)", file=self.stream, flush=True)
        elif event == "warning":
            self._print(f"tilefit: warning: {data['message']}")

    def _print(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def _draw(self) -> None:
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._progress = Progress(TextColumn("tune {task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
                                      transient=True, console=Console(file=self.stream, stderr=True))
            self._task = self._progress.add_task(self.current, total=self.total, status=self.status())
            self._progress.start()
        self._progress.update(self._task, description=self.current, completed=self.done,
                              total=self.total, status=self.status())

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
