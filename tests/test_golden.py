"""check_golden can fail: a missing golden file is an error (nothing is written without the flag)."""

import pytest

from conftest import GOLDEN, check_golden


def test_missing_golden_file_fails_and_writes_nothing(monkeypatch):
    monkeypatch.delenv("TILEFIT_UPDATE_GOLDEN", raising=False)
    monkeypatch.delenv("CI", raising=False)
    name = "no-such-golden-file.txt"
    with pytest.raises(AssertionError, match="is missing"):
        check_golden(name, "text")
    assert not (GOLDEN / name).exists()


def test_changed_output_fails(monkeypatch):
    monkeypatch.delenv("TILEFIT_UPDATE_GOLDEN", raising=False)
    with pytest.raises(AssertionError, match="differs"):
        check_golden("plan_glm5_ep8.txt", "not the plan")
