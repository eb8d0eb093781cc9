"""Shared pieces of the capture scripts under ``tests/data/*/capture.py`` (run as root).

A Dom0-like network namespace holds Xen-style interfaces ``vif7.<n>`` (veth
pairs whose other ends ``eth<n>`` sit in a VR namespace), with IPv6 disabled
and static neighbours, so that only the script's own UDP packets move the
counters.  Addresses are from 198.18.0.0/15 and exist only inside the
namespaces, which are removed at the end.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


def sh(*args: str) -> str:
    """Run a command, fail on a non-zero exit, return its standard output."""
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def in_ns(ns: str, *args: str) -> str:
    """Run a command inside network namespace ``ns``, return its standard output."""
    return sh("ip", "netns", "exec", ns, *args)


def ip_links(ns: str) -> list[dict]:
    """``ip -s -s -j link show`` in ``ns``, each link with its counters converted.

    Returns
    -------
    list of dict
        One a link: ``ifindex``, ``name`` and ``counters`` (the ``IfCounters``
        fields as ``/proc/net/dev`` prints them: ``rx_drops`` = rx dropped + rx missed).
    """
    out = []
    for link in json.loads(in_ns(ns, "ip", "-s", "-s", "-j", "link", "show")):
        s = link["stats64"]
        out.append({
            "ifindex": link["ifindex"],
            "name": link["ifname"],
            "counters": {
                "rx_packets": s["rx"]["packets"],
                "tx_packets": s["tx"]["packets"],
                "rx_bytes": s["rx"]["bytes"],
                "tx_bytes": s["tx"]["bytes"],
                "rx_drops": s["rx"]["dropped"] + s["rx"].get("missed", 0),
                "tx_drops": s["tx"]["dropped"],
            },
        })
    return out


def send_udp(ns: str, dst: str, count: int, size: int) -> None:
    """Send ``count`` UDP datagrams of ``size`` bytes to ``dst`` port 9 from namespace ``ns``."""
    code = (
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"for _ in range({count}): s.sendto(b'x' * {size}, ('{dst}', 9))\n"
    )
    in_ns(ns, sys.executable, "-c", code)


@contextmanager
def dom0_and_vr(prefix: str, pairs: Sequence[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """Build the Dom0 and VR namespaces, one veth pair a ``(dom0 address, VR address)`` of ``pairs``.

    Yields ``(dom0 namespace, VR namespace)``; both are deleted on exit.
    """
    tag = secrets.token_hex(3)
    d0, vr = f"{prefix}-{tag}-d0", f"{prefix}-{tag}-vr"
    try:
        for ns in (d0, vr):
            sh("ip", "netns", "add", ns)
            in_ns(ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
            in_ns(ns, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1")
            in_ns(ns, "ip", "link", "set", "lo", "up")
        for n, (a, b) in enumerate(pairs):
            sh("ip", "link", "add", f"vif7.{n}", "netns", d0, "type", "veth", "peer", "name", f"eth{n}", "netns", vr)
            in_ns(d0, "ip", "addr", "add", f"{a}/30", "dev", f"vif7.{n}")
            in_ns(vr, "ip", "addr", "add", f"{b}/30", "dev", f"eth{n}")
            in_ns(d0, "ip", "link", "set", f"vif7.{n}", "up")
            in_ns(vr, "ip", "link", "set", f"eth{n}", "up")
        # Static neighbours: no ARP, so only our packets move the counters.
        for n, (a, b) in enumerate(pairs):
            mac_vr = json.loads(in_ns(vr, "ip", "-j", "link", "show", f"eth{n}"))[0]["address"]
            mac_d0 = json.loads(in_ns(d0, "ip", "-j", "link", "show", f"vif7.{n}"))[0]["address"]
            in_ns(d0, "ip", "neigh", "replace", b, "lladdr", mac_vr, "dev", f"vif7.{n}")
            in_ns(vr, "ip", "neigh", "replace", a, "lladdr", mac_d0, "dev", f"eth{n}")
        yield d0, vr
    finally:
        for ns in (d0, vr):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
