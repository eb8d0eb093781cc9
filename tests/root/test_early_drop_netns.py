"""Early drop's limiter on real interfaces (xtc.host.tclimiter.TcLimiter, xtc.daemon.limiter_state.EarlyDrop).

Each test makes its own network namespace (``xtced-<random>``) with a veth pair whose host side
is named like a Xen vif (``vif7.0``, ``vif7.1``), and removes it at the end, also when a test
fails.  Addresses from 198.18.0.0/15, only inside the namespace.  The faults must leave exactly
the queueing the interfaces had before: compared as ``tc qdisc show`` text.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
from hostneeds import need_root_and_ip

from xtc.daemon.limiter_state import EarlyDrop, VrLoad
from xtc.host.limiter import LimiterError, LimiterSetting
from xtc.host.netns import NETNS_DIR, run_in_netns
from xtc.host.tclimiter import TcLimiter

pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]

IFS = ("vif7.0", "vif7.1")


def sh(*args: str, check: bool = True) -> str:
    return subprocess.run(list(args), check=check, capture_output=True, text=True).stdout


@contextlib.contextmanager
def netns() -> Iterator[str]:
    need_root_and_ip("network namespaces")
    ns = f"xtced-{secrets.token_hex(3)}"
    try:
        sh("ip", "netns", "add", ns)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot create a network namespace: {e.stderr.strip()}")
    try:
        for key in ("all", "default"):  # no IPv6 neighbour discovery: the interfaces stay silent
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1")
        for n, host_if in enumerate(IFS):
            sh("ip", "-n", ns, "link", "add", host_if, "type", "veth", "peer", "name", f"eth{n}")
            for dev in (host_if, f"eth{n}"):
                sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield ns
    finally:
        sh("ip", "netns", "del", ns, check=False)


def qdiscs(ns: str) -> str:
    """The interfaces' queueing as ``tc qdisc show`` prints it, without HTB's packet counter."""
    text = "".join(sh("tc", "-n", ns, "qdisc", "show", "dev", i) for i in IFS)
    return re.sub(r"direct_packets_stat \d+ ", "", text)


@pytest.mark.beside  # its own xtced-<random> namespace; times nothing
def test_install_update_remove_on_a_real_vif_leaves_what_was_there():
    with netns() as ns:
        before = qdiscs(ns)
        lim = TcLimiter(ns)
        try:
            lim.install("vif7.0", LimiterSetting(24_000 * 524, 251_520))
            shown = sh("tc", "-n", ns, "qdisc", "show", "dev", "vif7.0")
            assert "tbf ed0: root" in shown, shown
            got = lim.adopt("vif7.0")
            assert got is not None and got[0].rate_bytes_per_s == 24_000 * 524 and got[1] == 0
            assert abs(got[0].burst_bytes - 251_520) <= 2
            lim.update("vif7.0", LimiterSetting(40_000 * 524, 419_200))
            assert lim.adopt("vif7.0")[0].rate_bytes_per_s == 40_000 * 524
            lim.install("vif7.0", LimiterSetting(30_000 * 524, 314_400))  # install over its own: a change
            assert lim.adopt("vif7.0")[0].rate_bytes_per_s == 30_000 * 524
            assert lim.adopt("vif7.1") is None
            assert lim.remove("vif7.0") is True and lim.remove("vif7.0") is False
            assert qdiscs(ns) == before
            with pytest.raises(LimiterError, match="vif7.0.*none to change"):
                lim.update("vif7.0", LimiterSetting(1000, 6056))
            with pytest.raises(LimiterError, match="vif9.9.*no such interface"):
                lim.install("vif9.9", LimiterSetting(1000, 6056))
        finally:
            lim.close()


@pytest.mark.beside  # its own xtced-<random> namespace; times nothing
def test_someone_elses_root_qdisc_is_refused_and_left_exactly_as_it_was():
    with netns() as ns:
        sh("tc", "-n", ns, "qdisc", "add", "dev", "vif7.1", "root", "handle", "1:", "htb", "default", "1")
        before = qdiscs(ns)
        lim = TcLimiter(ns)
        try:
            with pytest.raises(LimiterError, match=r"vif7.1.*htb root qdisc 1.*not replaced"):
                lim.install("vif7.1", LimiterSetting(1_000_000, 20_000))
            assert lim.remove("vif7.1") is False  # not ours: never removed
            assert qdiscs(ns) == before
        finally:
            lim.close()


@pytest.mark.beside  # its own xtced-<random> namespace; times nothing
def test_a_failed_tc_change_in_the_daemon_leaves_the_queueing_that_was_there_before():
    """vif7.1 carries someone else's qdisc: the kernel side refuses the limiter there; early drop
    reports it and takes its limiter off vif7.0 too (never a partial or tighter limit)."""
    with netns() as ns:
        lim = TcLimiter(ns)
        try:
            sh("tc", "-n", ns, "qdisc", "add", "dev", "vif7.1", "root", "handle", "1:", "htb", "default", "1")
            before = qdiscs(ns)
            seen = []
            ed = EarlyDrop(lim, default_on=True, on_failure=lambda vr, op: seen.append((vr, op)))
            ed.choose("vr7", None)
            udp = VrLoad(setpoint_pps=20_000, forwarded_pps=19_500, handed_pps=93_000, model_forwarded_pps=20_000)
            ed.period(1.0, {"vr7": IFS}, {"vr7": udp}, {})
            assert seen == [("vr7", "install")]
            assert ed.limit_of("vr7") is None
            assert qdiscs(ns) == before
            # without the foreign qdisc it goes on both, and SIGTERM's remove_all takes it off both
            sh("tc", "-n", ns, "qdisc", "del", "dev", "vif7.1", "root")
            clean = qdiscs(ns)
            ed.period(1.0, {"vr7": IFS}, {"vr7": udp}, {})
            assert qdiscs(ns).count("tbf ed0: root") == 2
            ed.remove_all()
            assert qdiscs(ns) == clean
            # a restart after SIGKILL: a leftover is found and removed
            lim.install("vif7.0", LimiterSetting(1_000_000, 20_000))
            assert EarlyDrop(lim).start({"vr7": IFS}) == ["vif7.0"]
            assert qdiscs(ns) == clean
        finally:
            lim.close()


@pytest.mark.beside  # its own xtced-<random> namespace; times nothing
def test_a_vr_reboot_recreates_its_interface_and_the_limit_comes_back():
    with netns() as ns:
        lim = TcLimiter(ns)
        try:
            ed = EarlyDrop(lim, default_on=True)
            ed.choose("vr7", None)
            udp = VrLoad(setpoint_pps=20_000, forwarded_pps=19_500, handed_pps=93_000, model_forwarded_pps=20_000)
            ed.period(1.0, {"vr7": IFS}, {"vr7": udp}, {})
            ed.period(1.0, {"vr7": IFS}, {"vr7": udp}, {})
            # the VR reboots: its veth goes and comes back without the qdisc
            sh("ip", "-n", ns, "link", "del", "vif7.0")
            sh("ip", "-n", ns, "link", "add", "vif7.0", "type", "veth", "peer", "name", "eth0")
            sh("ip", "-n", ns, "link", "set", "vif7.0", "up")
            assert "tbf" not in sh("tc", "-n", ns, "qdisc", "show", "dev", "vif7.0")
            ed.period(1.0, {"vr7": IFS}, {"vr7": udp}, {})
            assert qdiscs(ns).count("tbf ed0: root") == 2
            ed.remove_all()
        finally:
            lim.close()


@pytest.mark.exclusive
def test_the_limiter_drops_the_excess_before_the_vr_gets_it():
    """2,000 UDP packets of 524 bytes in a burst into a limiter of 200 packets/s with a 20-packet
    bucket: the peer (the VR side) receives about the bucket, the limiter counts the rest dropped."""
    with netns() as ns:
        sh("ip", "-n", ns, "addr", "add", "198.18.7.1/24", "dev", "vif7.0")
        peer_mac = sh("ip", "-n", ns, "-br", "link", "show", "eth0").split()[2]
        sh("ip", "-n", ns, "neigh", "add", "198.18.7.2", "lladdr", peer_mac, "dev", "vif7.0", "nud", "permanent")
        lim = TcLimiter(ns)
        try:
            lim.install("vif7.0", LimiterSetting(200 * 524, 20 * 524))

            def rx() -> int:  # the VR side's received packets (netlink; /sys shows the host's namespace)
                return json.loads(sh("ip", "-n", ns, "-j", "-s", "link", "show", "eth0"))[0]["stats64"]["rx"]["packets"]

            def blast() -> None:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                for _ in range(2000):
                    try:
                        s.sendto(b"x" * 482, ("198.18.7.2", 9))
                    except OSError:
                        pass
                s.close()

            path = f"{NETNS_DIR}/{ns}"
            a = rx()
            run_in_netns(path, blast, "xtced-tx")
            time.sleep(0.2)
            got = rx() - a
            dropped = lim.dropped_packets("vif7.0")
            assert 10 <= got < 200, got  # the bucket (20) plus what the rate lets through while sending
            assert dropped is not None and dropped >= 1800 - got
        finally:
            lim.close()
