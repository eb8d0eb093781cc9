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
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from capture_netns import dom0_and_vr, in_ns, ip_links, send_udp  # noqa: E402


def netlink_counters(ns: str) -> dict[str, dict[str, int]]:
    return {link["name"]: link["counters"] for link in ip_links(ns)}


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
    with dom0_and_vr("xtct", (("198.18.7.1", "198.18.7.2"), ("198.18.7.5", "198.18.7.6"))) as (d0, vr):
        send_udp(d0, "198.18.7.2", 300, 18)  # offered to the VR on vif7.0
        send_udp(vr, "198.18.7.1", 120, 18)  # sent by the VR on eth0 -> host RX on vif7.0
        capture(d0, "dom0_veth_t0")
        send_udp(d0, "198.18.7.6", 2000, 64)
        send_udp(vr, "198.18.7.5", 1500, 64)
        send_udp(d0, "198.18.7.2", 700, 1200)
        capture(d0, "dom0_veth_t1")
        capture(vr, "vr_side_t1")


if __name__ == "__main__":
    main()
