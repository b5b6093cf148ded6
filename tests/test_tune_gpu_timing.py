"""tune/targets/gpu_timing.py without a GPU: the turn order of configs timed together (the timing
itself runs in tests/test_tune_gpu.py on a GPU)."""

from __future__ import annotations

from tilefit.tune.targets.gpu_timing import _rotated


def test_each_pass_starts_one_config_later():
    assert [_rotated(3, i) for i in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    assert _rotated(1, 5) == [0] and _rotated(0, 2) == []


class _FakeCuda:
    """The parts of torch.cuda a capture uses, recording their order (no GPU here)."""

    def __init__(self, log):
        self.log = log
        cuda = self

        class Graph:
            def capture_begin(self):
                cuda.log.append("begin")

            def capture_end(self):
                cuda.log.append("end")

        class Stream:
            def wait_stream(self, other):
                cuda.log.append(f"wait:{type(self).__name__}<-{type(other).__name__}")

        class Current(Stream):
            pass

        self.CUDAGraph, self.Stream, self._current = Graph, Stream, Current()

    def synchronize(self):
        self.log.append("sync")

    def current_stream(self):
        return self._current

    def stream(self, s):
        from contextlib import contextmanager

        @contextmanager
        def on():
            self.log.append("on-side")
            try:
                yield
            finally:  # as torch.cuda.stream restores the current stream
                self.log.append("off-side")
        return on()

    def empty_cache(self):
        self.log.append("empty_cache")


def test_a_capture_launches_once_eager_then_captures_on_a_side_stream_without_emptying(monkeypatch):
    import sys
    import types

    import pytest

    from tilefit.tune.targets import gpu_timing

    log: list[str] = []
    fake = types.SimpleNamespace(cuda=_FakeCuda(log))
    monkeypatch.setitem(sys.modules, "torch", fake)
    launches = [lambda: log.append("a"), lambda: log.append("b")]
    graph, count = gpu_timing._graph(launches, 3)
    assert count == 4  # 2 launches repeated to at least 3
    assert log == ["a", "sync", "wait:Stream<-Current", "on-side", "begin",
                   "a", "b", "a", "b", "end", "off-side", "wait:Current<-Stream"]
    assert "empty_cache" not in log

    def bad():
        if "begin" in log:
            raise RuntimeError("launch failed while capturing")

    log.clear()
    with pytest.raises(RuntimeError, match="while capturing"):
        gpu_timing._graph([bad], 2)
    assert log[-2:] == ["end", "off-side"]  # the capture is ended, the stream restored
