"""The counter readers against the real kernel, in network namespaces the tests make.

Needs root and iproute2; every namespace is named ``xtcct-<random>-*`` and
removed at the end, also when a test fails.  Addresses are from 198.18.0.0/15
and exist only inside the namespaces.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hostneeds import need_root_and_ip

from xtc.host.counters import (
    CounterReadError,
    IfCounters,
    NetlinkCounters,
    ProcNetDevCounters,
    Netns,
    open_counters,
)

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.timeout(60)]


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def netns_exists(name: str) -> bool:
    return os.path.exists(f"/run/netns/{name}")


@dataclass
class Lab:
    host: str  # Dom0-like namespace: vif7.0, vif7.1
    vr: str  # the VR's namespace: eth0, eth1


@contextlib.contextmanager
def veth_lab() -> Iterator[Lab]:
    """Two namespaces joined by two veth pairs with static neighbours, IPv6 off."""
    need_root_and_ip("network namespaces")
    tag = secrets.token_hex(3)
    lab = Lab(f"xtcct-{tag}-h", f"xtcct-{tag}-v")
    try:
        for ns in (lab.host, lab.vr):
            try:
                ip("netns", "add", ns)
            except subprocess.CalledProcessError as e:
                pytest.skip(f"cannot create a network namespace: {e.stderr.strip()}")
            for key in ("all", "default"):
                ip("netns", "exec", ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{key}.disable_ipv6=1")
            ip("-n", ns, "link", "set", "lo", "up")
        for n in range(2):
            a, b = f"198.18.9.{4 * n + 1}", f"198.18.9.{4 * n + 2}"
            ip("link", "add", f"vif7.{n}", "netns", lab.host, "type", "veth", "peer", "name", f"eth{n}", "netns", lab.vr)
            ip("-n", lab.host, "addr", "add", f"{a}/30", "dev", f"vif7.{n}")
            ip("-n", lab.vr, "addr", "add", f"{b}/30", "dev", f"eth{n}")
            ip("-n", lab.host, "link", "set", f"vif7.{n}", "up")
            ip("-n", lab.vr, "link", "set", f"eth{n}", "up")
            mac_vr = json.loads(ip("-n", lab.vr, "-j", "link", "show", f"eth{n}"))[0]["address"]
            ip("-n", lab.host, "neigh", "replace", b, "lladdr", mac_vr, "dev", f"vif7.{n}")
        yield lab
    finally:
        for ns in (lab.host, lab.vr):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def lab() -> Iterator[Lab]:
    with veth_lab() as made:
        yield made
    assert not netns_exists(made.host) and not netns_exists(made.vr)


def send_udp(netns: str, dst: str, count: int, size: int = 64) -> None:
    """Send ``count`` UDP datagrams from inside ``netns`` (socket opened there)."""
    sock = Netns(netns, "test sender").run(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    with sock:
        for _ in range(count):
            sock.sendto(b"x" * size, (dst, 9))


def stable_pair(lab: Lab, nl: NetlinkCounters, proc: ProcNetDevCounters) -> tuple[dict, dict]:
    """Read both sources at a moment when nothing moved (the kernel may send the odd
    IGMP report of its own): netlink, /proc, netlink again, until both netlink reads agree."""
    for _ in range(50):
        before = nl.read()
        from_proc = proc.read()
        if nl.read() == before:
            return before, from_proc
    raise AssertionError("the counters never stood still")


def test_netlink_and_proc_agree_and_see_the_packets_sent(lab: Lab) -> None:
    with NetlinkCounters(lab.host) as nl, ProcNetDevCounters(netns=lab.host) as proc:
        n0, p0 = stable_pair(lab, nl, proc)
        assert n0 == p0
        assert set(n0) == {"lo", "vif7.0", "vif7.1"}
        assert nl.ifindex["vif7.0"] != nl.ifindex["vif7.1"]
        send_udp(lab.host, "198.18.9.6", 1234, size=100)
        n1, p1 = stable_pair(lab, nl, proc)
        assert n1 == p1
        sent = n1["vif7.1"].tx_packets - n0["vif7.1"].tx_packets
        assert 1234 <= sent <= 1240  # ours, and at most a few of the kernel's own
        assert n1["vif7.1"].tx_bytes - n0["vif7.1"].tx_bytes >= 1234 * (100 + 8 + 20 + 14)
        # The VR side received them: read the other namespace with the same code.
        vr = NetlinkCounters(lab.vr).read()
        assert vr["eth1"].rx_packets == n1["vif7.1"].tx_packets
        # The caller's own namespace is not the lab's.
        assert "vif7.1" not in NetlinkCounters().read()


def test_netlink_follows_renames_new_and_deleted_interfaces(lab: Lab) -> None:
    with NetlinkCounters(lab.host) as nl:
        first = nl.read()
        refreshes = nl.name_refreshes
        assert nl.read().keys() == first.keys() and nl.name_refreshes == refreshes
        ip("-n", lab.host, "link", "set", "vif7.0", "down")
        ip("-n", lab.host, "link", "set", "vif7.0", "name", "vif8.0")
        assert set(nl.read()) == {"lo", "vif8.0", "vif7.1"}
        ip("-n", lab.host, "link", "add", "xtcct-n0", "type", "veth", "peer", "name", "xtcct-n1")
        assert {"xtcct-n0", "xtcct-n1"} <= set(nl.read())
        ip("-n", lab.host, "link", "del", "xtcct-n0")
        assert set(nl.read()) == {"lo", "vif8.0", "vif7.1"}


def test_netns_deleted_or_recreated(lab: Lab) -> None:
    nl = NetlinkCounters(lab.vr)
    proc = ProcNetDevCounters(netns=lab.vr)
    assert set(nl.read()) == set(proc.read()) == {"lo", "eth0", "eth1"}
    ip("netns", "del", lab.vr)
    with pytest.raises(CounterReadError, match="no such network namespace"):
        nl.read()
    with pytest.raises(CounterReadError, match="no such network namespace"):
        proc.read()
    ip("netns", "add", lab.vr)  # the same name, a new namespace: only lo
    assert set(nl.read()) == set(proc.read()) == {"lo"}
    nl.close()
    proc.close()


def test_open_counters_prefers_netlink_here(lab: Lab) -> None:
    src = open_counters(netns=lab.host)
    assert isinstance(src, NetlinkCounters) and src.read()["vif7.0"] == IfCounters(*src.read()["vif7.0"].as_tuple())
    src.close()


def test_namespaces_are_removed_when_the_test_body_fails() -> None:
    names: list[str] = []
    with pytest.raises(RuntimeError, match="boom"):
        with veth_lab() as made:
            names += [made.host, made.vr]
            assert netns_exists(made.host)
            raise RuntimeError("boom")
    assert names and not any(netns_exists(n) for n in names)
