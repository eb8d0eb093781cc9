"""``xtc lab up / status / down`` as an operator runs them: the real command, real namespaces,
cgroups, bridges, forwarders and (lxc mode) real LXC domains under the lab's libvirtd.

Each test uses its own random lab name and removes the lab afterwards, also when it fails
(``xtc lab down`` and then :func:`xtc_lab.lab.netlab.teardown_prefix` on the name).

What is proved:

* netns mode, 2 VRs: ``up`` builds a lab whose forwarders outlive the command (own session, own
  cgroup) and forward; ``teardown_orphans`` leaves it alone; ``status`` is healthy; ``up`` again
  changes nothing; a killed forwarder and a removed namespace are reported by ``status`` (exit 1)
  and repaired by ``up``; ``up`` with another shape is refused; ``down`` leaves no namespace, link,
  cgroup or record with the prefix; ``down`` again succeeds; bad input creates nothing; a lab whose
  record was lost is still removed by name, and its leftovers are rebuilt by ``up``;
* lxc mode, 1 VR: the same cycle with a domain destroyed behind the lab's back;
* ``--hops 3`` (lxc): ping from the generator reaches the probe after TF1, the probe after TF2 and
  the receiver through the chain, and only through it: with TF2's domain gone the probe after TF1
  still answers and nothing beyond it does; each router gets its own daemon configuration.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(120)]

REGISTRY = Path("/run/xtc/labs")


def xtc_lab(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``xtc lab ARGS`` as a separate process (as an operator does)."""
    return subprocess.run([sys.executable, "-m", "xtc.cli", "lab", *args], capture_output=True, text=True,
                          timeout=timeout_s, stdin=subprocess.DEVNULL)


def lab_up(name: str, mode: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``xtc lab up`` of lab ``name`` in ``mode``, which must succeed."""
    up = xtc_lab("up", "--name", name, "--mode", mode, *args)
    assert up.returncode == 0, up.stderr
    return up


def record(name: str) -> dict[str, Any]:
    return json.loads((REGISTRY / name).read_text())


def status(name: str) -> tuple[int, dict[str, Any]]:
    p = xtc_lab("status", "--name", name, "--json", "--rates-s", "0")
    return p.returncode, json.loads(p.stdout)


def leftovers(name: str) -> list[str]:
    from xtc_lab.lab.lifecycle import leftovers as left

    return left(name) + ([f"record {name}"] if (REGISTRY / name).exists() else [])


def ping(ns: str, addr: str, count: int = 2) -> bool:
    p = subprocess.run(["ip", "netns", "exec", ns, "ping", "-c", str(count), "-i", "0.2", "-W", "1", addr],
                       capture_output=True, text=True, timeout=15)
    return p.returncode == 0


def need(mode: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates namespaces, bridges, cgroups and domains")
    from xtc_lab.lab.lifecycle import host_problem

    problem = host_problem(mode)
    if problem:
        pytest.skip(f"this host cannot build a {mode} lab: {problem}")


def destroy_domain(uri: str, domain: str) -> None:
    """Stop the libvirt domain ``domain`` (at ``uri``) behind the lab's back."""
    import libvirt

    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    conn = libvirt.open(uri)
    try:
        conn.lookupByName(domain).destroy()
    finally:
        conn.close()


@pytest.fixture
def lab_name() -> Iterator[str]:
    from xtc_lab.lab.netlab import random_prefix, teardown_prefix

    name = random_prefix("xtcl")
    try:
        yield name
    finally:
        xtc_lab("down", "--name", name)
        teardown_prefix(name)  # in case down itself failed
        (REGISTRY / name).unlink(missing_ok=True)


@pytest.mark.beside  # times nothing and uses only its own lab's namespaces, cgroups and forwarders
def test_netns_lab_cycle(lab_name: str) -> None:
    need("netns")
    from xtc_lab.lab.libvirtd import process_start_time
    from xtc_lab.lab.netlab import teardown_orphans

    name = lab_name
    bad = xtc_lab("up", "--name", name, "--mode", "netns", "--vrs", "0")
    assert bad.returncode == 2 and "--vrs 0 out of range" in bad.stderr
    assert leftovers(name) == []  # refused before anything was made

    up = lab_up(name, "netns", "--vrs", "2", "--json")
    out = json.loads(up.stdout)
    assert out["healthy"] and out["action"] == "built"
    rec = record(name)
    assert rec["persistent"] is True and rec["owner"] == "lab" and rec["mode"] == "netns"
    # The command has exited; its forwarders live on, each in its own session and cgroup.
    for v in rec["vrs"]:
        pid = v["forwarder"]["pid"]
        assert process_start_time(pid) == v["forwarder"]["start"]
        assert os.getsid(pid) == pid
        assert str(pid) in Path(v["cgroup"], "cgroup.procs").read_text().split()
        assert Path(v["cgroup"]).name == v["name"] and Path(v["cgroup"]).parent == Path(rec["cpu_cgroup"]["root"])
    vr1 = rec["vrs"][0]
    assert ping(vr1["tg_ns"], vr1["tr_addr"])  # it forwards
    assert name not in teardown_orphans()  # a persistent lab is nobody's orphan
    rc, st = status(name)
    assert rc == 0 and st["healthy"] and all(v["cap"] == "unlimited" for v in st["vrs"].values())

    again = xtc_lab("up", "--name", name, "--mode", "netns", "--vrs", "2")
    assert again.returncode == 0 and "nothing changed" in again.stderr
    assert record(name) == rec
    other = xtc_lab("up", "--name", name, "--mode", "netns", "--vrs", "3")
    assert other.returncode == 1 and "another shape" in other.stderr and "down" in other.stderr
    assert record(name) == rec

    # Damage 1: a forwarder killed.
    os.kill(vr1["forwarder"]["pid"], signal.SIGKILL)
    rc, st = status(name)
    assert rc == 1 and not st["healthy"]
    assert any(f"forwarder {vr1['name']}" in p for p in st["problems"]), st["problems"]
    fix = xtc_lab("up", "--name", name, "--mode", "netns", "--vrs", "2")
    assert fix.returncode == 0 and "damaged" in fix.stderr and "repaired" in fix.stderr, fix.stderr
    assert status(name)[0] == 0
    rec2 = record(name)
    assert rec2["vrs"][0]["forwarder"] != vr1["forwarder"]
    assert ping(rec2["vrs"][0]["tg_ns"], rec2["vrs"][0]["tr_addr"])

    # Damage 2: a namespace removed.
    subprocess.run(["ip", "netns", "del", rec2["vrs"][1]["tr_ns"]], check=True)
    rc, st = status(name)
    assert rc == 1 and f"netns {rec2['vrs'][1]['tr_ns']}: missing" in st["problems"]
    assert xtc_lab("up", "--name", name, "--mode", "netns", "--vrs", "2").returncode == 0
    assert status(name)[0] == 0

    # A lost record: down still removes everything by name; up rebuilds from leftovers.
    (REGISTRY / name).unlink()
    rc, _ = status(name)
    assert rc == 1  # leftovers without a record: damaged
    rebuilt = xtc_lab("up", "--name", name, "--mode", "netns", "--vrs", "2")
    assert rebuilt.returncode == 0 and "leftovers" in rebuilt.stderr
    pids = [v["forwarder"]["pid"] for v in record(name)["vrs"]]
    (REGISTRY / name).unlink()
    down = xtc_lab("down", "--name", name)
    assert down.returncode == 0 and "removed" in down.stderr
    assert leftovers(name) == []
    assert all(process_start_time(p) is None for p in pids)
    assert not [d for d in Path(rec["cpu_cgroup"]["root"]).iterdir() if d.name.startswith(name + "-")]
    again = xtc_lab("down", "--name", name)
    assert again.returncode == 0 and "nothing to remove" in again.stderr
    rc, _ = status(name)
    assert rc == 3


@pytest.mark.libvirt
@pytest.mark.beside  # times nothing (pings with their timeouts) and uses only its own lab
def test_lxc_lab_cycle(lab_name: str) -> None:
    need("lxc")
    name = lab_name
    lab_up(name, "lxc", "--vrs", "1")
    rec = record(name)
    vr = rec["vrs"][0]
    assert vr["domain"] == f"{name}-vr1" and rec["uri"]
    rc, st = status(name)
    assert rc == 0 and st["healthy"] and st["vrs"][vr["name"]]["cap"] == "unlimited"
    assert ping(vr["tg_ns"], vr["tr_addr"])
    assert xtc_lab("up", "--name", name, "--mode", "lxc").returncode == 0 and record(name) == rec

    destroy_domain(rec["uri"], vr["domain"])  # the VR dies behind the lab's back
    rc, st = status(name)
    assert rc == 1 and f"domain {vr['domain']}: not running" in st["problems"]
    fix = xtc_lab("up", "--name", name, "--mode", "lxc")
    assert fix.returncode == 0 and "repaired" in fix.stderr, fix.stderr
    assert status(name)[0] == 0
    rec2 = record(name)
    assert ping(rec2["vrs"][0]["tg_ns"], rec2["vrs"][0]["tr_addr"])

    down = xtc_lab("down", "--name", name)
    assert down.returncode == 0, down.stderr
    assert leftovers(name) == []
    assert xtc_lab("down", "--name", name).returncode == 0


@pytest.mark.libvirt
@pytest.mark.beside  # times nothing (pings with their timeouts) and uses only its own lab
def test_three_routers_in_a_line(lab_name: str) -> None:
    need("lxc")
    from xtc.daemon.config import loads_config
    from xtc_lab.lab.lifecycle import load_lab

    name = lab_name
    up = lab_up(name, "lxc", "--hops", "3")
    rec, vrs, chain = load_lab(name)
    assert chain is not None and chain.routers == ("tf1", "tf2", "tf3")
    assert [v.router for v in vrs] == ["tf1", "tf2", "tf3"] and len({v.name for v in vrs}) == 3
    assert "tf1 (" in up.stdout and "[probe" in up.stdout
    targets = chain.targets()
    assert [t[0] for t in targets] == ["after-tf1", "after-tf2", "tr"]
    for label, addr in targets:
        assert ping(chain.tg_ns, addr), f"no answer from {label} {addr}"

    for r in chain.routers:
        cfg = loads_config(xtc_lab("status", "--name", name, "--daemon-config", "--router", r).stdout)
        assert cfg.libvirt.domains == (chain.router_vr(r).name,)

    # Only the chain connects them: without TF2, the probe after TF1 answers and nothing beyond.
    destroy_domain(rec["uri"], chain.router_vr("tf2").name)
    assert ping(chain.tg_ns, targets[0][1])
    assert not ping(chain.tg_ns, targets[1][1], count=1)
    assert not ping(chain.tg_ns, targets[2][1], count=1)
    rc, st = status(name)
    assert rc == 1

    assert xtc_lab("down", "--name", name).returncode == 0
    assert leftovers(name) == []
