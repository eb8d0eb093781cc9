"""Record real /proc/net/dev files for the meter's parser tests (run as root, once).

Builds a Dom0-like network namespace with two Xen-style interfaces vif7.0 and
vif7.1 (veth pairs whose other ends, eth0 and eth1, sit in a VR namespace),
sends UDP packets both ways, and for each of two moments stores:

* ``<name>.txt``: ``/proc/net/dev`` as read inside the Dom0 namespace;
* ``<name>.expected.json``: the same counters read through netlink
  (``ip -s -s -j link show``), an independent source, converted to the
  parser's fields (``rx_drops`` = rx dropped + rx missed, as the kernel
  prints it in /proc/net/dev).

IPv6 is disabled in both namespaces so no background traffic changes the
counters between the two reads; the script checks that the two sources agree
by reading /proc/net/dev again after netlink.  Addresses are from
198.18.0.0/15 and exist only inside the namespaces, which are removed at the end.

Usage: ``python tests/data/proc_net_dev/capture.py`` (as root).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sh(*args: str, check: bool = True) -> str:
    return subprocess.run(args, check=check, capture_output=True, text=True).stdout


def in_ns(ns: str, *args: str) -> str:
    return sh("ip", "netns", "exec", ns, *args)


def netlink_counters(ns: str) -> dict[str, dict[str, int]]:
    out = {}
    for link in json.loads(in_ns(ns, "ip", "-s", "-s", "-j", "link", "show")):
        s = link["stats64"]
        out[link["ifname"]] = {
            "rx_packets": s["rx"]["packets"],
            "tx_packets": s["tx"]["packets"],
            "rx_bytes": s["rx"]["bytes"],
            "tx_bytes": s["tx"]["bytes"],
            "rx_drops": s["rx"]["dropped"] + s["rx"].get("missed", 0),
            "tx_drops": s["tx"]["dropped"],
        }
    return out


def send_udp(ns: str, dst: str, count: int, size: int) -> None:
    code = (
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"for _ in range({count}): s.sendto(b'x' * {size}, ('{dst}', 9))\n"
    )
    in_ns(ns, sys.executable, "-c", code)


def capture(ns: str, name: str) -> None:
    text = in_ns(ns, "cat", "/proc/net/dev")
    expected = netlink_counters(ns)
    again = in_ns(ns, "cat", "/proc/net/dev")
    if again != text:
        raise SystemExit(f"{name}: counters moved between reads; run again")
    (HERE / f"{name}.txt").write_text(text)
    (HERE / f"{name}.expected.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
    print(f"wrote {name}.txt and {name}.expected.json ({len(expected)} interfaces)")


def main() -> None:
    tag = secrets.token_hex(3)
    d0, vr = f"xtct-{tag}-d0", f"xtct-{tag}-vr"
    try:
        for ns in (d0, vr):
            sh("ip", "netns", "add", ns)
            in_ns(ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
            in_ns(ns, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1")
            in_ns(ns, "ip", "link", "set", "lo", "up")
        for n, (a, b) in enumerate((("198.18.7.1", "198.18.7.2"), ("198.18.7.5", "198.18.7.6"))):
            sh("ip", "link", "add", f"vif7.{n}", "netns", d0, "type", "veth", "peer", "name", f"eth{n}", "netns", vr)
            in_ns(d0, "ip", "addr", "add", f"{a}/30", "dev", f"vif7.{n}")
            in_ns(vr, "ip", "addr", "add", f"{b}/30", "dev", f"eth{n}")
            in_ns(d0, "ip", "link", "set", f"vif7.{n}", "up")
            in_ns(vr, "ip", "link", "set", f"eth{n}", "up")
        # Static neighbours: no ARP, so only our packets move the counters.
        for n, (a, b) in enumerate((("198.18.7.1", "198.18.7.2"), ("198.18.7.5", "198.18.7.6"))):
            mac_vr = json.loads(in_ns(vr, "ip", "-j", "link", "show", f"eth{n}"))[0]["address"]
            mac_d0 = json.loads(in_ns(d0, "ip", "-j", "link", "show", f"vif7.{n}"))[0]["address"]
            in_ns(d0, "ip", "neigh", "replace", b, "lladdr", mac_vr, "dev", f"vif7.{n}")
            in_ns(vr, "ip", "neigh", "replace", a, "lladdr", mac_d0, "dev", f"eth{n}")
        send_udp(d0, "198.18.7.2", 300, 18)  # offered to the VR on vif7.0
        send_udp(vr, "198.18.7.1", 120, 18)  # sent by the VR on eth0 -> host RX on vif7.0
        capture(d0, "dom0_veth_t0")
        send_udp(d0, "198.18.7.6", 2000, 64)
        send_udp(vr, "198.18.7.5", 1500, 64)
        send_udp(d0, "198.18.7.2", 700, 1200)
        capture(d0, "dom0_veth_t1")
        capture(vr, "vr_side_t1")
    finally:
        for ns in (d0, vr):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


if __name__ == "__main__":
    main()
