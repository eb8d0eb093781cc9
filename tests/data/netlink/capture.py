"""Record real rtnetlink dump replies for the counter decoder's tests (run as root, once).

Builds a Dom0-like network namespace with three Xen-style interfaces vif7.0,
vif7.1 and vif7.2 (veth pairs whose other ends eth0..eth2 sit in a VR
namespace), sends UDP packets both ways, and for each of two moments stores,
read inside the Dom0 namespace (before the second, eth2 is set down and 50
more packets are sent to it, which vif7.2 drops):

* ``<name>.stats.bin``: every datagram of the kernel's reply to an
  ``RTM_GETSTATS`` dump request with filter ``IFLA_STATS_LINK_64``,
  concatenated (netlink messages are self-delimiting);
* ``<name>.link.bin``: the same for an ``RTM_GETLINK`` dump;
* ``<name>.expected.json``: the sequence numbers and datagram sizes of both
  replies, and what they must decode to, taken from an independent source:
  ``ip -s -s -j link show`` (ifindex, name, 64-bit counters converted to
  the ``IfCounters`` fields as ``/proc/net/dev`` prints them:
  ``rx_drops`` = rx dropped + rx missed).

The requests are encoded with pyroute2's message classes, not with the code
under test.  IPv6 is disabled and the neighbours are static, so nothing but
the script's packets moves the counters; the script checks that by reading
``ip -j`` before and after the dumps.  Addresses are from 198.18.0.0/15 and
exist only inside the namespaces, which are removed at the end.

Usage: ``python tests/data/netlink/capture.py`` (as root, with pyroute2).
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from capture_netns import dom0_and_vr, in_ns, ip_links, send_udp  # noqa: E402

PAIRS = (("198.18.7.1", "198.18.7.2"), ("198.18.7.5", "198.18.7.6"), ("198.18.7.9", "198.18.7.10"))


def expected_links(ns: str) -> dict[str, dict]:
    return {str(link["ifindex"]): {"name": link["name"], "counters": link["counters"]} for link in ip_links(ns)}


def raw_dumps() -> None:
    """(Runs inside the namespace.)  Print both raw replies as JSON of hex datagrams."""
    from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
    from pyroute2.netlink.rtnl.ifstatsmsg import ifstatsmsg

    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.bind((0, 0))
    sock.settimeout(5)
    result = {}
    for key, msg, msg_type, seq in (
        ("stats", ifstatsmsg(), 94, 4242),
        ("link", ifinfmsg(), 18, 4243),
    ):
        if key == "stats":
            msg["filter_mask"] = 1  # IFLA_STATS_LINK_64 only
        msg["header"]["type"] = msg_type
        msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
        msg["header"]["sequence_number"] = seq
        msg.encode()
        sock.send(bytes(msg.data))
        datagrams = []
        while True:
            data = sock.recv(1 << 16)
            datagrams.append(data.hex())
            # the dump ends with a datagram holding NLMSG_DONE (or an error)
            off, done = 0, False
            while off + 16 <= len(data):
                mlen = int.from_bytes(data[off : off + 4], sys.byteorder)
                mtype = int.from_bytes(data[off + 4 : off + 6], sys.byteorder)
                done = done or mtype in (NLMSG_DONE, NLMSG_ERROR)
                off += (mlen + 3) & ~3
            if done:
                break
        result[key] = {"seq": seq, "datagrams": datagrams}
    print(json.dumps(result))


def capture(ns: str, name: str) -> None:
    before = expected_links(ns)
    raw = json.loads(in_ns(ns, sys.executable, __file__, "--raw"))
    after = expected_links(ns)
    if before != after:
        raise SystemExit(f"{name}: counters moved during the capture; run again")
    meta = {}
    for key in ("stats", "link"):
        datagrams = [bytes.fromhex(h) for h in raw[key]["datagrams"]]
        (HERE / f"{name}.{key}.bin").write_bytes(b"".join(datagrams))
        meta[key] = {"seq": raw[key]["seq"], "datagram_bytes": [len(d) for d in datagrams]}
    expected = {"replies": meta, "links": before}
    (HERE / f"{name}.expected.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
    print(f"wrote {name}.stats.bin, {name}.link.bin, {name}.expected.json ({len(before)} interfaces)")


def main() -> None:
    with dom0_and_vr("xtcct", PAIRS) as (d0, vr):
        send_udp(d0, "198.18.7.2", 300, 18)
        send_udp(vr, "198.18.7.1", 120, 18)
        capture(d0, "dom0_veth_t0")
        send_udp(d0, "198.18.7.6", 2000, 64)
        send_udp(vr, "198.18.7.5", 1500, 64)
        send_udp(d0, "198.18.7.10", 700, 1200)
        # With its peer down, a veth drops what it is given to send: tx_drops.
        in_ns(vr, "ip", "link", "set", "eth2", "down")
        send_udp(d0, "198.18.7.10", 50, 100)
        capture(d0, "dom0_veth_t1")


if __name__ == "__main__":
    if sys.argv[1:] == ["--raw"]:
        raw_dumps()
    else:
        main()
