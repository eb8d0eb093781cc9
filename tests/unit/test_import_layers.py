"""The layers of xtc run one way: `lint-imports` (import-linter) checks the contracts in
.importlinter (models and control below host below the daemon; training and XCo below the policer;
the service chassis below every service; xtc.cli above every part; xtc never imports xtc_lab).
import-linter reads every import statement, function-level ones included."""

from __future__ import annotations

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
