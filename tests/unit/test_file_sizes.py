"""Files with one job (issue 47): a Python file of the product (xtc/) or the testbed (lab/xtc_lab/)
over MAX_LINES lines says at its top why it is one file, in a paragraph of its module docstring
that starts with ``Why one file:``.  A file with two jobs is split instead (xtc/host/actuators.py
was)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 700
MARKER = "Why one file:"
TREES = ("xtc", "lab/xtc_lab")

#: Long files that other work in progress splits or shrinks; each entry goes when that work lands
#: (the test fails on an entry that is no longer needed, so the list cannot go stale).
PENDING = {
}


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _has_reason(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return any(line.strip().startswith(MARKER) for line in doc.splitlines())


def _long_files() -> dict[str, int]:
    out = {}
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            n = _lines(path)
            if n > MAX_LINES:
                out[path.relative_to(ROOT).as_posix()] = n
    return out


def test_every_long_file_says_why_it_is_one_file() -> None:
    missing = [f"{name} ({n} lines)" for name, n in _long_files().items()
               if name not in PENDING and not _has_reason(ROOT / name)]
    assert not missing, (
        f"over {MAX_LINES} lines without a '{MARKER}' paragraph in the module docstring (split the "
        f"file where it has two jobs, else say why it is one): {', '.join(missing)}")


def test_no_pending_entry_is_stale() -> None:
    long = _long_files()
    stale = [name for name in PENDING
             if not (ROOT / name).exists() or name not in long or _has_reason(ROOT / name)]
    assert not stale, f"remove from PENDING in {Path(__file__).name} (split, shorter or with a reason now): {stale}"


def test_the_check_sees_a_long_file_without_a_reason(tmp_path: Path) -> None:
    """The marker is read from the module docstring only, not from a comment or a string elsewhere."""
    body = "x = 1\n" * (MAX_LINES + 1)
    bare = tmp_path / "bare.py"
    bare.write_text(f'"""A module."""\n# {MARKER} a comment is not the docstring\n{body}')
    told = tmp_path / "told.py"
    told.write_text(f'"""A module.\n\n{MARKER} one state machine.\n"""\n{body}')
    assert _lines(bare) > MAX_LINES and not _has_reason(bare)
    assert _has_reason(told)
