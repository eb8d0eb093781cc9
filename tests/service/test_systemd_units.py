"""The systemd units in packaging/: what an operator signs off, checked by systemd's own tools.

systemd is not PID 1 here, so the units cannot be started.  What is checked instead:

* ``systemd-analyze verify`` accepts every unit with nothing to say.  The units' commands are
  ``/opt/venvs/xtc/bin/xtc`` (where the Debian package puts the product), absent on this machine,
  so verify runs on a copy whose commands name this checkout's own ``xtc`` entry point instead
  (verify checks that the command exists and is executable); every other line is the shipped one.
* ``systemd-analyze security --offline=true`` scores each unit at or below the score that
  docs/guide/systemd-units.md publishes (a unit that loses a hardening setting fails here).
* The settings the product relies on, read from the files: readiness and watchdog, the absolute
  command and its check-config on the same file, the state directory of each service, the user,
  and exactly the capabilities the docs name.

The protocol's half (READY=1, WATCHDOG=1 from the real processes): test_notify_services.py; the
capabilities really being enough: test_service_privileges.py.
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
DOC = ROOT / "docs" / "guide" / "systemd-units.md"
XTC = "/opt/venvs/xtc/bin/xtc"
ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"

#: unit -> (state directory, user, capabilities, config file under /etc/xtc, the command's words)
UNITS = {
    "xtc-daemon.service": ("xtc-daemon", "root", set(), "daemon.toml", ["daemon", "--config"]),
    "xtc-policer.service": ("xtc-policer", "xtc", set(), "policer.toml", ["policer", "serve", "-c"]),
    "xtc-xco-controller.service": ("xtc-xco-controller", "xtc", set(), "xco-controller.toml",
                                   ["xco", "controller", "-c"]),
    "xtc-xco-agent.service": ("xtc-xco-agent", "xtc", {"CAP_NET_ADMIN", "CAP_NET_RAW"}, "xco-agent.toml",
                              ["xco", "agent", "-c"]),
}
CHECK = {"xtc-daemon.service": ["check-config"], "xtc-policer.service": ["policer", "check-config"],
         "xtc-xco-controller.service": ["xco", "check-config"], "xtc-xco-agent.service": ["xco", "check-config"]}

needs_analyze = pytest.mark.skipif(not Path(ANALYZE).exists(), reason="systemd-analyze is not installed")


def _service(unit: str) -> dict[str, list[str]]:
    """The [Service] section: each key with all its values (systemd keys repeat)."""
    out: dict[str, list[str]] = {}
    section = None
    for raw in (PACKAGING / unit).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            k, _, v = line.partition("=")
            out.setdefault(k, []).append(v)
    return out


def test_every_unit_is_here() -> None:
    assert sorted(p.name for p in PACKAGING.glob("*.service")) == sorted(UNITS)


@needs_analyze
@pytest.mark.parametrize("unit", sorted(UNITS))
def test_systemd_analyze_verify_passes(unit: str, tmp_path: Path) -> None:
    here = Path(sys.executable).with_name("xtc")
    assert here.is_file(), "the checkout's venv has no xtc entry point"
    text = (PACKAGING / unit).read_text()
    assert XTC in text
    (tmp_path / unit).write_text(text.replace(XTC, str(here)))
    r = subprocess.run([ANALYZE, "verify", str(tmp_path / unit)], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
    # The shipped file itself: the missing product is all that verify has to say.
    r = subprocess.run([ANALYZE, "verify", str(PACKAGING / unit)], capture_output=True, text=True, timeout=60)
    lines = set((r.stdout + r.stderr).splitlines())
    assert lines <= {f"{unit}: Command {XTC} is not executable: No such file or directory"}, lines


def _published_scores() -> dict[str, float]:
    """The scores in the docs' table: ``| xtc-daemon.service | 1.9 | ...``."""
    return {m[1]: float(m[2]) for m in re.finditer(r"^\| `?([\w-]+\.service)`? \| ([0-9.]+) ", DOC.read_text(), re.M)}


@needs_analyze
@pytest.mark.parametrize("unit", sorted(UNITS))
def test_security_score_is_the_published_one(unit: str) -> None:
    r = subprocess.run([ANALYZE, "security", "--offline=true", "--no-pager", str(PACKAGING / unit)],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
    assert m, r.stdout + r.stderr
    published = _published_scores()
    assert unit in published, f"{DOC} has no score for {unit}"
    assert float(m[1]) <= published[unit], f"{unit}: exposure {m[1]}, the docs say {published[unit]}"
    # Every exposure systemd counts against the unit is explained in the docs.
    doc = DOC.read_text()
    for name in re.findall(r"^✗ (\S+)", r.stdout, re.M):
        assert f"`{name}`" in doc, f"{unit}: {name} is not explained in {DOC.name}"


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_unit_settings(unit: str) -> None:
    state, user, caps, conf, words = UNITS[unit]
    s = _service(unit)
    assert s["Type"] == ["notify"] and s["NotifyAccess"] == ["main"]
    assert float(s["WatchdogSec"][0].rstrip("s")) >= 10
    assert s["ExecStart"] == [" ".join([XTC, *words, f"/etc/xtc/{conf}"])]
    assert " ".join([XTC, *CHECK[unit], f"/etc/xtc/{conf}"]) in s["ExecStartPre"]
    assert all(c.split()[0] == XTC for k in ("ExecStartPre", "ExecStopPost") for c in s.get(k, []))
    assert s["StateDirectory"] == [state] and s["StateDirectoryMode"] == ["0700"]
    assert s["User"] == [user] and "DynamicUser" not in s
    assert set(" ".join(s["CapabilityBoundingSet"]).split()) == caps
    assert set(" ".join(s["AmbientCapabilities"]).split()) == (caps if user != "root" else set())
    for k, v in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
                 "Restart": "on-failure"}.items():
        assert s[k] == [v], k
    if unit.startswith("xtc-xco-"):  # they import numba, which needs a writable cache to import at all
        cache = state  # the same name
        assert s["CacheDirectory"] == [cache] and s["Environment"] == [f"NUMBA_CACHE_DIR=/var/cache/{cache}"]
    if unit == "xtc-daemon.service":
        assert s["RuntimeDirectory"] == ["xtc"] and s["RuntimeDirectoryMode"] == ["0750"]
        assert s["Group"] == ["xtc"] and s["ReadWritePaths"] == ["-/sys/fs/cgroup"]
    else:
        assert "ReadWritePaths" not in s and "RuntimeDirectory" not in s


def test_units_parse_as_ini() -> None:
    # systemd's syntax is close enough to INI for a smoke check of the section names.
    for unit in UNITS:
        cp = configparser.ConfigParser(strict=False, interpolation=None)
        cp.optionxform = str  # type: ignore[assignment,method-assign]
        cp.read_string((PACKAGING / unit).read_text())
        assert cp.sections() == ["Unit", "Service", "Install"]


def test_the_services_defaults_are_their_units_state_directories() -> None:
    """A configuration without the key still keeps its state where the unit lets it write."""
    from dataclasses import fields

    from xtc.daemon.config import DaemonSection
    from xtc.policer.config import PolicerConfig
    from xtc.xco.controller_config import ControllerConfig

    state_dir = next(f.default for f in fields(DaemonSection) if f.name == "state_dir")
    assert state_dir == "/var/lib/" + UNITS["xtc-daemon.service"][0]
    assert PolicerConfig().db_url == f"sqlite:////var/lib/{UNITS['xtc-policer.service'][0]}/policer.db"
    assert ControllerConfig.model_fields["state_file"].default.startswith(
        f"/var/lib/{UNITS['xtc-xco-controller.service'][0]}/")


def test_memory_deny_write_execute_where_the_service_can_run_under_it(tmp_path: Path) -> None:
    """The daemon and the policer have it (their processes run under it in test_notify_services.py);
    the XCo units cannot, because numba needs executable memory to be imported at all: checked here,
    so that the day it can, this fails and the units get it too."""
    from sdnotify import MDWE_MAIN, kernel_has_mdwe, unit_denies_write_execute

    assert {u for u in UNITS if unit_denies_write_execute(u)} == {"xtc-daemon.service", "xtc-policer.service"}
    if not kernel_has_mdwe():
        pytest.skip("this kernel has no PR_SET_MDWE (Linux >= 6.3)")
    (tmp_path / "xco-topology.toml").write_bytes((PACKAGING / "xco-topology.toml").read_bytes())
    r = subprocess.run([sys.executable, "-c", MDWE_MAIN, "xtc.cli", "xco", "check-config",
                        str(tmp_path / "xco-topology.toml")], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "cannot allocate executable memory" in r.stderr, r.stdout + r.stderr
