"""The lab's input-side limiters on real interfaces (issue 48 item 3): the IFB + TBF of
``xtc_lab.lab.inputdrop`` and the eBPF bucket of ``xtc_lab.lab.bpfbucket``, each on the ingress of a
veth end in a namespace of its own, drop what a burst sends beyond their rate, count it, and leave
the port with exactly the queueing it had.

Two namespaces per test (``xtcil-<random>-a`` sends, ``-b`` receives), 198.18.251.0/24 inside
them only; removed at the end, also when a test fails.  The limiters act on the namespace they run
in, so the checks run in a child process inside ``-b`` (``ip netns exec``).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from hostneeds import namespace_pair

pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]

SEND = ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for _ in range(3000):\n    s.sendto(b'x' * 100, ('198.18.251.2', 9))\n")


def sh(*args: str, check: bool = True) -> str:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=30).stdout


@contextlib.contextmanager
def pair() -> Iterator[tuple[str, str, str]]:
    with namespace_pair(f"xtcil-{secrets.token_hex(3)}") as (a, b):
        sh("ip", "link", "add", "xtcil-a0", "netns", a, "type", "veth", "peer", "name", "xtcil-b0", "netns", b)
        sh("ip", "-n", a, "addr", "add", "198.18.251.1/24", "dev", "xtcil-a0")
        sh("ip", "-n", b, "addr", "add", "198.18.251.2/24", "dev", "xtcil-b0")
        for ns, dev in ((a, "xtcil-a0"), (b, "xtcil-b0")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        mac = json.loads(sh("ip", "-n", b, "-j", "link", "show", "xtcil-b0"))[0]["address"]
        sh("ip", "-n", a, "neigh", "replace", "198.18.251.2", "lladdr", mac, "dev", "xtcil-a0", "nud", "permanent")
        yield a, b, mac


def run_in_b(b: str, a: str, make: str) -> dict[str, object]:
    """In namespace ``b``: the port's qdiscs, install the limiter ``make`` builds, have ``a`` send a burst
    of 3000 frames, read the drops, remove it, the port's qdiscs again."""
    script = textwrap.dedent(f"""
        import json, subprocess, sys
        from xtc_lab.lab import bpfbucket, inputdrop
        def q():
            return subprocess.run(["tc", "qdisc", "show", "dev", "xtcil-b0"], capture_output=True, text=True).stdout
        before = q()
        lim = {make}
        lim.install()
        try:
            subprocess.run(["ip", "netns", "exec", {a!r}, sys.executable, "-c", {SEND!r}], check=True, timeout=30)
            dropped = lim.dropped_packets()
        finally:
            lim.remove()
        print(json.dumps({{"before": before, "after": q(), "dropped": dropped,
                          "ifb_left": "xtcil-i" in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout}}))
    """)
    out = sh("ip", "netns", "exec", b, sys.executable, "-c", script)
    return json.loads(out.strip().splitlines()[-1])


def test_the_ifb_tbf_at_the_input_drops_the_excess_and_leaves_nothing() -> None:
    with pair() as (a, b, _mac):
        # 200 packets/s of 142-byte frames, a bucket and queue of 4 full frames: a 3000-frame burst mostly dropped
        r = run_in_b(b, a, 'inputdrop.InputDrop("xtcil-b0", "xtcil-i0", "198.18.251.2", 200 * 142, 6056, 6056)')
    assert r["dropped"] > 2000
    assert r["after"] == r["before"] and not r["ifb_left"]


def test_the_ebpf_bucket_at_the_input_drops_the_excess_and_leaves_nothing() -> None:
    with pair() as (a, b, mac):
        r = run_in_b(b, a, f'bpfbucket.BpfBucket(port="xtcil-b0", mac={mac!r}, rate_pps=200.0, burst_s=0.02)')
    assert r["dropped"] > 2000
    assert r["after"] == r["before"]
