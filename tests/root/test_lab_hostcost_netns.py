"""The lab's emulated Dom0 delivery cost (``xtc_lab.lab.hostcost``) in a real kernel: the program is
verified and attached on the clsact ingress of the receiving veth end, every packet that arrives
pays the cost (counted, with at least the cost's nanoseconds each), a packet the product's
early-drop limiter drops on the sending end does not pay, and removal leaves the interface with
exactly the queueing it had; an interface that has a clsact already is refused and nothing of ours
stays on the others.

Two namespaces per test (``xtchc-<random>-a`` sends, ``-b`` receives: the VR's side), 198.18.250.0/24
inside them only; removed at the end, also when a test fails.  Nothing here is timed (the cost's
nanoseconds are a lower bound the program guarantees by construction).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hostneeds import namespace_pair

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.timeout(60)]

A_END, B_END = "xtchc-a0", "xtchc-b0"


def sh(*args: str, check: bool = True) -> str:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=30).stdout


def send(ns: str, n: int) -> None:
    code = ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for _ in range({n}):\n    s.sendto(b'x' * 100, ('198.18.250.2', 9))\n")
    sh("ip", "netns", "exec", ns, sys.executable, "-c", code)


def qdiscs(ns: str, dev: str) -> str:
    return sh("ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", dev)


def rx_packets(ns: str, dev: str) -> int:
    return int(json.loads(sh("ip", "-n", ns, "-j", "-s", "link", "show", dev))[0]["stats64"]["rx"]["packets"])


@contextlib.contextmanager
def pair() -> Iterator[tuple[str, str]]:
    with namespace_pair(f"xtchc-{secrets.token_hex(3)}") as (a, b):
        for ns in (a, b):  # no IPv6 chatter (nor ARP, below): the counts are the test's own packets
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
               "net.ipv6.conf.default.disable_ipv6=1")
        sh("ip", "link", "add", A_END, "netns", a, "type", "veth", "peer", "name", B_END, "netns", b)
        sh("ip", "-n", b, "link", "add", "xtchc-d0", "type", "veth", "peer", "name", "xtchc-d1")  # a second port, idle
        sh("ip", "-n", a, "addr", "add", "198.18.250.1/24", "dev", A_END)
        sh("ip", "-n", b, "addr", "add", "198.18.250.2/24", "dev", B_END)
        for ns, dev in ((a, A_END), (b, B_END), (b, "xtchc-d0")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        for ns, dev, peer_ns, peer_dev, addr in ((a, A_END, b, B_END, "198.18.250.2"), (b, B_END, a, A_END, "198.18.250.1")):
            mac = json.loads(sh("ip", "-n", peer_ns, "-j", "link", "show", peer_dev))[0]["address"]  # no ARP either way
            sh("ip", "-n", ns, "neigh", "replace", addr, "lladdr", mac, "dev", dev, "nud", "permanent")
        yield a, b


def test_every_packet_delivered_pays_the_cost_and_removal_leaves_the_queueing_as_it_was() -> None:
    from xtc_lab.lab import hostcost

    with pair() as (a, b):
        before = qdiscs(b, B_END), qdiscs(b, "xtchc-d0")
        cost = hostcost.DeliveryCost(b, (B_END, "xtchc-d0"), 2.5)
        try:
            cost.install()
            assert hostcost.attached(B_END, b) and hostcost.attached("xtchc-d0", b)
            assert "clsact" in qdiscs(b, B_END)
            rx0 = rx_packets(b, B_END)
            send(a, 1000)
            got = rx_packets(b, B_END) - rx0
            c = cost.counts()
        finally:
            cost.remove()
        assert got == 1000
        assert c[B_END].packets == got  # each packet that arrived paid it, once
        assert c[B_END].spent_ns >= got * 2500 and c[B_END].cut_short == 0
        assert c["xtchc-d0"] == hostcost.Slot(0, 0, 0)  # its own slot: nothing arrived there
        assert not hostcost.attached(B_END, b)
        assert (qdiscs(b, B_END), qdiscs(b, "xtchc-d0")) == before
        cost.remove()  # again: nothing to do, no error


def test_a_packet_the_early_drop_limiter_drops_does_not_pay() -> None:
    from xtc_lab.lab import hostcost

    from xtc.host.bpflimiter import BpfLimiter
    from xtc.host.limiter import LimiterSetting

    with pair() as (a, b):
        lim = BpfLimiter(netns=a)  # the product's limiter on the sending (host) side: its egress, before the veth
        cost = hostcost.DeliveryCost(b, (B_END,), 1.0)
        try:
            cost.install()
            lim.install(A_END, LimiterSetting(200 * 142, 20 * 142, rate_pps=200.0, burst_s=0.02))
            send(a, 2000)
            dropped = lim.dropped_packets(A_END)
            paid = cost.counts()[B_END].packets
        finally:
            lim.remove(A_END)
            lim.close()
            cost.remove()
        assert dropped is not None and dropped > 1500
        assert paid + dropped == 2000  # what the limiter dropped never reached the cost


def test_an_interface_with_a_clsact_already_is_refused_and_nothing_of_ours_stays() -> None:
    from xtc_lab.lab import hostcost

    with pair() as (_a, b):
        sh("ip", "netns", "exec", b, "tc", "qdisc", "add", "dev", "xtchc-d0", "clsact")
        before = qdiscs(b, B_END), qdiscs(b, "xtchc-d0")
        cost = hostcost.DeliveryCost(b, (B_END, "xtchc-d0"), 1.0)
        with pytest.raises(OSError, match=r"xtchc-d0 .*clsact or ingress qdisc already"):
            cost.install()
        assert (qdiscs(b, B_END), qdiscs(b, "xtchc-d0")) == before  # ours on B_END taken back, theirs kept
        assert not hostcost.attached(B_END, b)


def test_a_namespace_gone_first_takes_the_cost_with_it() -> None:
    from xtc_lab.lab import hostcost

    with pair() as (_a, b):
        cost = hostcost.DeliveryCost(b, (B_END,), 1.0)
        cost.install()
        sh("ip", "netns", "del", b)
        cost.remove()  # no error: the interface and its filter went with the namespace
        assert cost.counts() == {B_END: hostcost.Slot(0, 0, 0)}
