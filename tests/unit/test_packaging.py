"""What packaging/ gives an operator: systemd units that systemd accepts, and example
configuration files that the product's own checks accept."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xtc.cli import main as xtc_main

PACKAGING = Path(__file__).resolve().parents[2] / "packaging"
UNITS = sorted(PACKAGING.glob("*.service"))


def directives(unit: Path) -> list[tuple[str, str]]:
    """``(key, value)`` of every directive of a unit file, in order (a key may repeat)."""
    out = []
    for line in unit.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def test_every_service_xtc_installs_has_a_unit() -> None:
    assert {u.name for u in UNITS} == {"xtc-daemon.service", "xtc-policer.service", "xtc-xco-controller.service",
                                       "xtc-xco-agent.service"}


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_systemd_accepts_the_unit(unit: Path, tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    # The units run /opt/venvs/xtc/bin/xtc, which only the Debian package installs: verify a copy
    # that names this environment's xtc instead (tests/service/test_systemd_units.py does more).
    (tmp_path / unit.name).write_text(unit.read_text().replace("/opt/venvs/xtc/bin/xtc",
                                                                str(Path(sys.executable).with_name("xtc"))))
    p = subprocess.run(["systemd-analyze", "verify", str(tmp_path / unit.name)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_the_agent_unit_cleans_the_uplink_before_it_starts_and_after_it_stops() -> None:
    d = directives(PACKAGING / "xtc-xco-agent.service")
    run = [(k, v.split("xtc ", 1)[1]) for k, v in d if k.startswith("Exec")]
    cfg = "/etc/xtc/xco-agent.toml"
    assert run == [("ExecStartPre", f"xco check-config {cfg}"),
                   ("ExecStartPre", f"xco agent -c {cfg} --cleanup"),
                   ("ExecStart", f"xco agent -c {cfg}"),
                   ("ExecStopPost", f"xco agent -c {cfg} --cleanup")]
    keys = dict(d)
    assert keys["KillSignal"] == "SIGTERM"  # the agent restores the uplink on SIGTERM
    assert keys["Restart"] == "on-failure"
    # netlink (tc, gso_max_segs) and the packet socket; SCHED_FIFO through LimitRTPRIO, netns by a drop-in
    assert set(keys["CapabilityBoundingSet"].split()) == {"CAP_NET_ADMIN", "CAP_NET_RAW"}
    assert {"AF_NETLINK", "AF_PACKET", "AF_INET"} <= set(keys["RestrictAddressFamilies"].split())


def test_the_example_agent_configuration_passes_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # installed as the unit says: beside the topology file it names, in /etc/xtc
    shutil.copy(PACKAGING / "xtc-xco-agent.toml", tmp_path / "xco-agent.toml")
    (tmp_path / "xco-topology.toml").write_text(
        'schema = "xco-topology/1"\n[[switch]]\nname = "sw1"\n'
        '[[host]]\nname = "h1"\nnic_bps = 1_000_000_000\nswitch = "sw1"\nvms = ["10.0.1.1"]\n'
        '[[host]]\nname = "h2"\nnic_bps = 1_000_000_000\nswitch = "sw1"\nvms = ["10.0.1.2"]\n')
    assert xtc_main(["xco", "check-config", str(tmp_path / "xco-agent.toml")]) == 0
    out = capsys.readouterr().out
    assert "OK: host h1 (id 0) on eth0, 1000000000 b/s, 1 flows, controller 10.0.0.254:7800" in out


def test_the_example_daemon_configurations_pass_check_config(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("xtc-daemon.toml", "xtc-daemon-sim.toml"):
        assert xtc_main(["check-config", str(PACKAGING / name)]) == 0, capsys.readouterr()
