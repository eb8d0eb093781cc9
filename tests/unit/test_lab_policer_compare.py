"""The before/after fleet comparison's checks (xtc_lab.policer_compare), before any fleet starts."""

from __future__ import annotations

import sys

import pytest

from xtc_lab import policer_compare


@pytest.fixture
def isolated_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 'before' run puts its tree first on this process's path and its children's: undone after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")


@pytest.mark.parametrize("argv", [[], ["/t", "sideways", "sqlite", "10", "1", "o.json"], ["/t", "after", "pg", "10"]])
def test_bad_arguments_print_the_usage_and_exit_2(argv, tmp_path, capsys) -> None:
    assert policer_compare.main(argv) == 2
    assert "BEFORE_TREE before|after" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_before_run_whose_tree_is_not_the_product_in_use_stops_before_the_fleet(isolated_path, tmp_path,
                                                                                    capsys) -> None:
    """The product was imported before the tree went on the path (here: by the test run), so the run
    would measure the installed policer as 'before': refused, nothing written."""
    out = tmp_path / "before.json"
    assert policer_compare.main([str(tmp_path / "tree"), "before", "sqlite", "10", "1", str(out)]) == 1
    assert "before: the policer in use is" in capsys.readouterr().err
    assert not out.exists()
