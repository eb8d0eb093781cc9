"""The layers of xtc run one way: `lint-imports` (import-linter) checks the contracts in
.importlinter (models and control below host below the daemon; training and XCo below the policer;
the service chassis below every service; xtc.cli above every part; xtc never imports xtc_lab).
import-linter reads every import statement, function-level ones included."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.exists(), "lint-imports is missing: pip install 'xtc[test]' (import-linter is in the test extra)"
    r = subprocess.run([str(lint), "--config", str(ROOT / ".importlinter"), "--no-cache"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout and " kept" in r.stdout, r.stdout[-2000:]


def test_no_private_name_is_imported_across_packages() -> None:
    """ruff's PLC2701 (import-private-name) over the product and the testbed: a name with a leading
    underscore stays in its own package."""
    ruff = Path(sys.executable).with_name("ruff")
    assert ruff.exists(), "ruff is missing: pip install 'xtc[test]' (ruff is in the test extra)"
    r = subprocess.run([str(ruff), "check", "--no-cache", "--preview", "--select", "PLC2701", "--output-format",
                        "concise", "xtc", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


#: Private modules their own package imports (a package's private module is the package's business).
PRIVATE_MODULES_OF_THEIR_PACKAGE = {("xtc/xco/scheduler/fast.py", "_kernel")}


def test_no_private_name_is_imported_across_modules() -> None:
    """Stricter than PLC2701, which lets a package's modules share private names: no module imports
    another module's ``_name``, inside its package or not (a name another module needs is public)."""
    found = []
    for root in ("xtc", "lab/xtc_lab"):
        for path in sorted((ROOT / root).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, ast.ImportFrom):
                    found += [f"{rel}:{node.lineno} {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")
                              and (rel, a.name) not in PRIVATE_MODULES_OF_THEIR_PACKAGE]
    assert not found, found
