"""Every example configuration in packaging/ passes its own ``check-config``, where the Debian
package installs it (``/etc/xtc/<name without its xtc- prefix>``, here a copy under a temporary
directory), and uses the paths all services share: the state in ``/var/lib/xtc-<service>``, the
daemon's manager API on ``ipc:///run/xtc/manager.sock``.  Each unit's configuration file has its
example here."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"

#: schema -> the command that checks it
CHECK = {
    "xtc-daemon/1": ["check-config"],
    "xtc-policer/1": ["policer", "check-config"],
    "xco-controller/1": ["xco", "check-config"],
    "xco-agent/1": ["xco", "check-config"],
    "xco-topology/1": ["xco", "check-config"],
}
EXAMPLES = sorted(p.name for p in PACKAGING.glob("*.toml"))


def installed_name(name: str) -> str:
    """``xtc-policer.toml`` -> ``policer.toml`` (the name under /etc/xtc)."""
    return name.removeprefix("xtc-")


def test_every_service_has_an_example() -> None:
    assert {tomllib.loads((PACKAGING / n).read_text())["schema"] for n in EXAMPLES} == set(CHECK)
    for unit in PACKAGING.glob("*.service"):
        for conf in set(re.findall(r"/etc/xtc/([\w.-]+\.toml)", unit.read_text())):
            assert conf in {installed_name(n) for n in EXAMPLES}, f"{unit.name} reads /etc/xtc/{conf}: no example"


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_config_passes_its_check_config(name: str, tmp_path: Path) -> None:
    etc = tmp_path / "etc" / "xtc"
    etc.mkdir(parents=True)
    for n in EXAMPLES:  # all of them, as installed: the XCo files name the topology by its installed name
        (etc / installed_name(n)).write_bytes((PACKAGING / n).read_bytes())
    doc = tomllib.loads((PACKAGING / name).read_text())
    r = subprocess.run([sys.executable, "-m", "xtc.cli", *CHECK[doc["schema"]], str(etc / installed_name(name))],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout, r.stdout  # every check-config: a line with OK; its JSON with --json
    if name == "xtc-daemon-sim.toml":
        return  # the simulated plant, for a try without root: its own state in /tmp, TCP on loopback
    if doc["schema"] == "xtc-daemon/1":
        assert doc["daemon"]["state_dir"] == "/var/lib/xtc-daemon"
        assert doc["manager"]["endpoint"] == "ipc:///run/xtc/manager.sock"
        assert doc["manager"]["pub_endpoint"] == "ipc:///run/xtc/samples.sock"
    elif doc["schema"] == "xtc-policer/1":
        assert doc["database"]["url"] == "sqlite:////var/lib/xtc-policer/policer.db"
    elif doc["schema"] == "xco-controller/1":
        assert doc["state_file"].startswith("/var/lib/xtc-xco-controller/")
