"""The root-qdisc look-up (:func:`xtc.host.qdiscs.root_qdisc`, early drop's and the XCo gate's)
reads one interface's root, not every interface's: on this kernel a qdisc *dump* ignores the
interface index, so a dump-based look-up cost 28 ms of CPU per call on a host with 4,000
interfaces (``xtc bench daemon --early-drop``, docs/design/early-drop.md).

A namespace of its own (random name, removed afterwards, also on failure) with 64 veth
pairs, one end carrying a TBF: the look-up gives each interface the root a dump gives it, and
receives no more than one reply's worth of bytes whatever the number of interfaces.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from collections.abc import Iterator

import pytest

from xtc.host import qdiscs
from xtc.host.netlink import in_netns, open_route_socket
from xtc.host.tccodec import RTM_GETQDISC, TC_H_ROOT, decode_tc_dump

pytestmark = [pytest.mark.root, pytest.mark.beside]

N_IFACES = 64


@pytest.fixture
def netns() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a network namespace")
    ns = f"xtc-qlook-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        lines = "".join(f"link add d{i} up type veth peer name p{i}\n" for i in range(N_IFACES))
        subprocess.run(["ip", "-n", ns, "-batch", "-"], input=lines, text=True, check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", "d7", "root", "handle", "ed0:", "tbf",
                        "rate", "1mbit", "burst", "10k", "limit", "10k"], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_the_root_look_up_reads_one_interfaces_root_only(netns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    nl = open_route_socket(netns)
    try:
        index = {f"d{i}": in_netns(netns, lambda i=i: socket.if_nametoindex(f"d{i}")) for i in range(N_IFACES)}
        dumped = {o.ifindex: o for o in decode_tc_dump(qdiscs.dump_tc(nl, RTM_GETQDISC, index["d0"]))
                  if o.parent == TC_H_ROOT}
        assert len(dumped) >= N_IFACES  # what a dump "of d0" gives on this kernel: every interface's root
        received: list[int] = []

        class Counting:  # the kernel socket, its received bytes counted
            def __init__(self, sock: socket.socket) -> None:
                self.sock = sock

            def recv_into(self, buf, *a):  # type: ignore[no-untyped-def]
                n = self.sock.recv_into(buf, *a)
                received.append(n)
                return n

            def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
                return getattr(self.sock, name)

        monkeypatch.setattr(nl, "sock", Counting(nl.sock))
        for name, i in index.items():
            received.clear()
            got = qdiscs.root_qdisc(nl, i)
            want = dumped.get(i)
            assert (got is None) == (want is None), name
            if got is not None and want is not None:
                assert (got.kind, got.handle, got.parent) == (want.kind, want.handle, want.parent), name
            one_reply = 0 if want is None else len(want.raw)
            assert sum(received) <= one_reply + 256, (name, received, one_reply)
        d7 = qdiscs.root_qdisc(nl, index["d7"])
        assert d7 is not None and d7.kind == "tbf" and d7.handle == 0x0ED0_0000
        assert qdiscs.root_qdisc(nl, 999_999) is None  # no such interface: none
    finally:
        nl.close()
