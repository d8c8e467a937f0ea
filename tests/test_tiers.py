"""tests/tiers.py: which ids the full tier takes, and a listed id that matches nothing is reported."""

from __future__ import annotations

import pytest

from tests import tiers


def test_a_listed_file_test_or_parameter_takes_exactly_its_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = {"tests/a.py": 1, "tests/b.py::test_x": 1, "tests/c.py::test_p[one]": 1}
    monkeypatch.setattr(tiers, "FULL_ONLY", listed)
    taken = ["tests/a.py::test_any", "tests/b.py::test_x", "tests/b.py::test_x[2]", "tests/c.py::test_p[one]"]
    kept = ["tests/b.py::test_xy", "tests/b.py::test_y", "tests/c.py::test_p[two]", "tests/ab.py::test_any"]
    assert [n for n in taken + kept if tiers.is_full_only(n)] == taken


def test_a_renamed_test_is_reported_only_when_its_file_was_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiers, "FULL_ONLY", {"tests/b.py::test_gone": 1, "tests/c.py::test_elsewhere": 1})
    assert tiers.unmatched(["tests/b.py::test_x", "tests/a.py::test_y"]) == ["tests/b.py::test_gone"]


def test_every_listed_id_names_a_test_file_that_exists() -> None:
    from tests.conftest import REPO_ROOT

    assert [key for key in tiers.FULL_ONLY if not (REPO_ROOT / key.split("::", 1)[0]).is_file()] == []
