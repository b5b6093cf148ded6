"""One version parser for every engine and library tilefit reads."""

from __future__ import annotations

import pytest

from tilefit.errors import UsageError
from tilefit.versions import parse_version


@pytest.mark.parametrize("text, want", [("0.7", (0, 7, 0)), ("0.7.0", (0, 7, 0)), ("0.6.8.post1", (0, 6, 8)),
                                        ("v3.6.0", (3, 6, 0)), ("0.7.0rc1", (0, 7, 0)), ("2", (2, 0, 0))])
def test_parse(text, want):
    assert parse_version(text) == want


def test_engines_and_flashinfer_agree():
    from tilefit.engines.types import parse_version as engine_version
    from tilefit.kernels.flashinfer_cutlass.catalog import parse_version as flashinfer_version

    assert engine_version("0.7") == flashinfer_version("0.7.0") == (0, 7, 0)


@pytest.mark.parametrize("bad", ["", "banana", "x1.2"])
def test_bad(bad):
    with pytest.raises(UsageError, match="bad FlashInfer version"):
        parse_version(bad, "FlashInfer version")
