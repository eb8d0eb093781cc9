"""The layout's rules: the product never imports the testbed, and a router host's daemon needs
only the daemon's dependencies."""

from __future__ import annotations

import json
import subprocess
import sys

_IMPORT_ALL = """
import importlib, json, pkgutil, sys
import xtc
skipped = {}
for m in pkgutil.walk_packages(xtc.__path__, "xtc."):
    try:
        importlib.import_module(m.name)
    except ModuleNotFoundError as e:  # an extra that is not installed
        skipped[m.name] = e.name
print(json.dumps({"loaded": sorted(sys.modules), "skipped": skipped}))
"""


def _modules(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_product_never_imports_the_testbed() -> None:
    doc = _modules(_IMPORT_ALL)
    assert not doc["skipped"], doc["skipped"]  # everything importable here (the test extras are installed)
    assert [m for m in doc["loaded"] if m.split(".")[0] == "xtc_lab"] == []


def test_the_daemon_imports_only_the_daemons_dependencies() -> None:
    doc = _modules(
        "import json, sys\n"
        "import xtc.cli, xtc.daemon.service, xtc.daemon.cli, xtc.daemon.ctl, xtc.host.libvirt, xtc.host.cgroup\n"
        "print(json.dumps({'loaded': sorted(sys.modules)}))"
    )
    tops = {m.split(".")[0] for m in doc["loaded"]}
    extras_only = {"fastapi", "uvicorn", "starlette", "matplotlib", "scipy", "control", "httpx", "xtc_lab"}
    assert tops & extras_only == set()
