"""docs/results/index.md names every measurement session's folder, and names only folders that exist."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_the_results_index_names_every_folder_once() -> None:
    index = (RESULTS / "index.md").read_text()
    folders = sorted(p.name for p in RESULTS.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    # A folder is named as a link's target ``(NAME/...)`` or as code, `NAME`.
    named = re.findall(r"\]\(([^/.)][^/)]*)/[^)]*\)|^- `([^`]+)`", index, flags=re.M)
    names = [a or b for a, b in named]
    assert sorted(set(names) - set(folders)) == [], "the index names folders that do not exist"
    assert [f for f in folders if f not in names] == [], "folders under docs/results missing from its index"
    assert len(names) == len(set(names)), "a folder named twice in the index"
