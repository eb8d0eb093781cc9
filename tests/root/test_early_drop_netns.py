"""Early drop's limiters on real interfaces (xtc.host.tclimiter.TcLimiter, the TBF;
xtc.host.bpflimiter.BpfLimiter, the eBPF bucket; xtc.daemon.limiter_state.EarlyDrop).

Each test makes its own network namespace (``xtced-<random>``) with a veth pair whose host side
is named like a Xen vif (``vif7.0``, ``vif7.1``), and removes it at the end, also when a test
fails.  Addresses from 198.18.0.0/15, only inside the namespace.  The faults must leave exactly
the queueing the interfaces had before: compared as ``tc qdisc show`` text (and, for the eBPF
bucket, ``tc filter show`` of the clsact hooks).
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

from xtc.daemon.limiter_policy import BPF_TUNING
from xtc.daemon.limiter_state import EarlyDrop, VrLoad
from xtc.host.bpflimiter import BpfLimiter, read_attached
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


#: A UDP VR handed far more than its setpoint: early drop limits it.
UDP_OVER = VrLoad(setpoint_pps=20_000, forwarded_pps=19_500, handed_pps=93_000, model_forwarded_pps=20_000)


def reboot_vif(ns: str, vif: str = "vif7.0") -> None:
    """The VR reboots: its veth goes and comes back, without any qdisc or filter."""
    sh("ip", "-n", ns, "link", "del", vif)
    sh("ip", "-n", ns, "link", "add", vif, "type", "veth", "peer", "name", "eth0")
    sh("ip", "-n", ns, "link", "set", vif, "up")


def vr_side_reachable(ns: str) -> None:
    """vif7.0 at 198.18.7.1 reaches the VR side (eth0) as 198.18.7.2, without waiting for ARP."""
    sh("ip", "-n", ns, "addr", "add", "198.18.7.1/24", "dev", "vif7.0")
    peer_mac = sh("ip", "-n", ns, "-br", "link", "show", "eth0").split()[2]
    sh("ip", "-n", ns, "neigh", "add", "198.18.7.2", "lladdr", peer_mac, "dev", "vif7.0", "nud", "permanent")


def vr_side_rx_packets(ns: str) -> int:
    """The VR side's received packets (netlink; /sys shows the host's namespace)."""
    return json.loads(sh("ip", "-n", ns, "-j", "-s", "link", "show", "eth0"))[0]["stats64"]["rx"]["packets"]


def udp_burst(ns: str, packets: int = 2000) -> int:
    """``packets`` UDP packets of 524 bytes on the wire from the host side to the VR side, as fast as
    the socket takes them; how many it took."""

    def blast() -> int:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sent = 0
        for _ in range(packets):
            try:
                s.sendto(b"x" * 482, ("198.18.7.2", 9))
                sent += 1
            except OSError:
                pass
        s.close()
        return sent

    return run_in_netns(f"{NETNS_DIR}/{ns}", blast, "xtced-tx")[0]


def limited(kind: str, ns: str, vif: str) -> bool:
    """Whether ``vif`` carries a limit of early drop's ``kind`` (tbf, bpf), seen from outside the limiter."""
    if kind == "tbf":
        return "tbf ed0: root" in sh("tc", "-n", ns, "qdisc", "show", "dev", vif)
    return "rate_pps" in (read_attached(vif, ns) or {})


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
            udp = UDP_OVER
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
@pytest.mark.parametrize("kind", ["tbf", "bpf"])
def test_a_vr_reboot_recreates_its_interface_and_the_limit_comes_back(kind: str) -> None:
    with netns() as ns:
        before = queueing(ns)
        lim = TcLimiter(ns) if kind == "tbf" else BpfLimiter(ns)
        try:
            ed = EarlyDrop(lim, default_on=True, **({"tuning": BPF_TUNING} if kind == "bpf" else {}))
            ed.choose("vr7", None)
            ed.period(1.0, {"vr7": IFS}, {"vr7": UDP_OVER}, {})
            ed.period(1.0, {"vr7": IFS}, {"vr7": UDP_OVER}, {})
            assert [limited(kind, ns, i) for i in IFS] == [True, True]
            reboot_vif(ns)  # its veth comes back without the qdisc or the filter
            assert [limited(kind, ns, i) for i in IFS] == [False, True]
            ed.period(1.0, {"vr7": IFS}, {"vr7": UDP_OVER}, {})
            assert [limited(kind, ns, i) for i in IFS] == [True, True]
            ed.remove_all()
            assert queueing(ns) == before
        finally:
            lim.close()


@pytest.mark.exclusive
def test_the_limiter_drops_the_excess_before_the_vr_gets_it():
    """2,000 UDP packets of 524 bytes in a burst into a limiter of 200 packets/s with a 20-packet
    bucket: the peer (the VR side) receives about the bucket, the limiter counts the rest dropped."""
    with netns() as ns:
        vr_side_reachable(ns)
        lim = TcLimiter(ns)
        try:
            lim.install("vif7.0", LimiterSetting(200 * 524, 20 * 524))
            a = vr_side_rx_packets(ns)
            udp_burst(ns)
            time.sleep(0.2)
            got = vr_side_rx_packets(ns) - a
            dropped = lim.dropped_packets("vif7.0")
            assert 10 <= got < 200, got  # the bucket (20) plus what the rate lets through while sending
            assert dropped is not None and dropped >= 1800 - got
        finally:
            lim.close()


# ------------------------------------------------------------------ the eBPF bucket (the default limiter)
def queueing(ns: str) -> str:
    """The interfaces' qdiscs and the filters on their clsact hooks (program ids left out)."""
    text = qdiscs(ns) + "".join(f"{i} {hook}: " + sh("tc", "-n", ns, "filter", "show", "dev", i, hook, check=False)
                                for i in IFS for hook in ("ingress", "egress"))
    return re.sub(r" id \d+ ", " ", text)


def bpf_setting(rate_pps: float, credit_s: float = 0.3) -> LimiterSetting:
    return LimiterSetting(max(1, round(rate_pps * 524)), 6056, rate_pps=rate_pps, burst_s=credit_s)


@pytest.mark.beside  # its own xtced-<random> namespace; times nothing
def test_the_bpf_bucket_installs_changes_and_removes_and_leaves_what_was_there():
    with netns() as ns:
        before = queueing(ns)
        lim = BpfLimiter(ns)
        try:
            assert lim.install("vif7.0", bpf_setting(24_000)) is True
            egress = sh("tc", "-n", ns, "filter", "show", "dev", "vif7.0", "egress")
            assert "handle 0xed0 xtc_ed+clsact direct-action" in egress and "pref 3792 bpf" in egress, egress
            assert "clsact ffff:" in sh("tc", "-n", ns, "qdisc", "show", "dev", "vif7.0")
            got = read_attached("vif7.0", ns)  # from outside the adapter: through the attached program's maps
            assert got is not None and got["rate_pps"] == pytest.approx(24_000, rel=1e-4) and got["dropped_packets"] == 0
            assert lim.install("vif7.0", bpf_setting(30_000, 0.5)) is False  # a change: one map update
            got = read_attached("vif7.0", ns)
            assert got["rate_pps"] == pytest.approx(30_000, rel=1e-4) and got["credit_s"] == pytest.approx(0.5)
            lim.update("vif7.0", bpf_setting(40_000))
            setting, dropped = lim.adopt("vif7.0")
            assert setting.rate_pps == pytest.approx(40_000, rel=1e-4) and dropped == 0
            assert lim.adopt("vif7.1") is None and read_attached("vif7.1", ns) is None
            assert lim.dropped_by_interface(["vif7.0", "vif7.1"]) == {"vif7.0": 0}
            assert lim.remove("vif7.0") is True and lim.remove("vif7.0") is False
            assert queueing(ns) == before
            with pytest.raises(LimiterError, match="vif7.0.*none to change"):
                lim.update("vif7.0", bpf_setting(1000))
            with pytest.raises(LimiterError, match="vif9.9.*no such interface"):
                lim.install("vif9.9", bpf_setting(1000))
            with pytest.raises(LimiterError, match="counts packets"):
                lim.install("vif7.0", LimiterSetting(1000, 6056))
            assert queueing(ns) == before
            # someone puts a filter on the clsact we added: it stays, with theirs, when ours goes
            lim.install("vif7.0", bpf_setting(1000))
            sh("tc", "-n", ns, "filter", "add", "dev", "vif7.0", "ingress", "prio", "7", "protocol", "ip", "u32",
               "match", "ip", "dst", "198.18.7.9/32", "classid", "1:1")
            assert lim.remove("vif7.0") is True
            assert "clsact ffff:" in qdiscs(ns) and "pref 7 u32" in queueing(ns)
        finally:
            lim.close()


@pytest.mark.beside  # its own xtced-<random> namespace; times nothing
def test_the_bpf_bucket_keeps_someone_elses_clsact_with_its_filters_and_refuses_an_ingress_qdisc():
    with netns() as ns:
        sh("tc", "-n", ns, "qdisc", "add", "dev", "vif7.0", "clsact")
        for hook, prio in (("ingress", "7"), ("egress", "9")):
            sh("tc", "-n", ns, "filter", "add", "dev", "vif7.0", hook, "prio", prio, "protocol", "ip", "u32",
               "match", "ip", "dst", "198.18.7.9/32", "classid", "1:1")
        sh("tc", "-n", ns, "qdisc", "add", "dev", "vif7.1", "ingress")
        before = queueing(ns)
        assert "pref 9 u32" in before and "qdisc ingress ffff:" in before
        lim = BpfLimiter(ns)
        try:
            assert lim.install("vif7.0", bpf_setting(20_000)) is True
            egress = sh("tc", "-n", ns, "filter", "show", "dev", "vif7.0", "egress")
            assert "handle 0xed0 xtc_ed direct-action" in egress and "pref 9 u32" in egress, egress
            with pytest.raises(LimiterError, match=r"vif7.1.*ingress qdisc.*not replaced"):
                lim.install("vif7.1", bpf_setting(20_000))
            assert lim.remove("vif7.0") is True
            assert queueing(ns) == before  # their clsact and both their filters stay; ours went
        finally:
            lim.close()


@pytest.mark.beside  # its own xtced-<random> namespace; times nothing
def test_after_a_kill_the_restart_finds_the_bpf_leftovers_by_their_mark_and_removes_them():
    """A daemon killed with its limiters on: the filters stay attached (they hold the program and its
    maps) and go on dropping; the next daemon's start removes them, with the clsact it had added and
    not someone else's.  A failed install (vif7.1's ingress qdisc) takes the limit off vif7.0 too."""
    with netns() as ns:
        before = queueing(ns)
        udp = UDP_OVER
        killed = BpfLimiter(ns)
        ed = EarlyDrop(killed, default_on=True, tuning=BPF_TUNING)
        ed.choose("vr7", None)
        ed.period(1.0, {"vr7": IFS}, {"vr7": udp}, {})
        assert ed.limit_of("vr7").rate_pps == pytest.approx(1.05 * 20_000)
        killed.close()  # SIGKILL: nothing removed, the fds gone with the process
        left = [read_attached(i, ns) for i in IFS]
        assert all(x is not None and x["rate_pps"] == pytest.approx(21_000, rel=1e-4) for x in left), left
        lim = BpfLimiter(ns)
        try:
            assert EarlyDrop(lim).start({"vr7": IFS}) == list(IFS)
            assert queueing(ns) == before
            # a foreign clsact on vif7.1 is kept when our leftover goes from it
            sh("tc", "-n", ns, "qdisc", "add", "dev", "vif7.1", "clsact")
            with_theirs = queueing(ns)
            other = BpfLimiter(ns)
            other.install("vif7.1", bpf_setting(5000))
            other.close()
            assert EarlyDrop(lim).start({"vr7": IFS}) == ["vif7.1"]
            assert queueing(ns) == with_theirs
            # a failed install: reported, and no limit left on the VR's other interface
            sh("tc", "-n", ns, "qdisc", "del", "dev", "vif7.1", "clsact")
            sh("tc", "-n", ns, "qdisc", "add", "dev", "vif7.1", "ingress")
            with_ingress = queueing(ns)
            seen = []
            ed = EarlyDrop(lim, default_on=True, tuning=BPF_TUNING, on_failure=lambda vr, op: seen.append((vr, op)))
            ed.choose("vr7", None)
            ed.period(1.0, {"vr7": IFS}, {"vr7": udp}, {})
            assert seen == [("vr7", "install")] and ed.limit_of("vr7") is None
            assert queueing(ns) == with_ingress
        finally:
            lim.close()


@pytest.mark.beside  # its own xtced-<random> namespace; counts packets, times nothing
def test_the_bpf_bucket_drops_real_packets_and_counts_every_one_it_drops():
    """2,000 UDP packets in a burst into a bucket of 200 packets/s with 50 ms of credit: every packet
    the host sends either reaches the VR side or is counted dropped, and most are dropped."""
    with netns() as ns:
        vr_side_reachable(ns)
        lim = BpfLimiter(ns)
        try:
            lim.install("vif7.0", bpf_setting(200, 0.05))
            a = vr_side_rx_packets(ns)
            sent = udp_burst(ns)
            time.sleep(0.2)
            got = vr_side_rx_packets(ns) - a
            dropped = lim.dropped_by_interface(["vif7.0"])["vif7.0"]
            assert got + dropped == sent, (got, dropped, sent)
            assert dropped > sent // 2, (got, dropped, sent)
            assert read_attached("vif7.0", ns)["dropped_packets"] == dropped
        finally:
            lim.close()


@pytest.mark.beside  # its own xtced-<random> namespace; times nothing
def test_a_limit_no_longer_needed_is_parked_idle_and_deactivation_removes_it_all():
    """The VR stops exceeding: its filter stays attached but idle (no map entry: every packet
    passes), so the next limit is map updates only; deactivation takes everything away."""
    with netns() as ns:
        before = queueing(ns)
        lim = BpfLimiter(ns)
        try:
            ed = EarlyDrop(lim, default_on=True, tuning=BPF_TUNING)
            ed.choose("vr7", None)
            udp = UDP_OVER
            keeps_up = VrLoad(setpoint_pps=20_000, forwarded_pps=19_500, handed_pps=19_600, model_forwarded_pps=None)
            ed.period(1.0, {"vr7": IFS}, {"vr7": udp}, {})
            assert ed.limit_of("vr7") is not None
            ed.period(1.0, {"vr7": IFS}, {"vr7": keeps_up}, {})
            assert ed.limit_of("vr7") is None
            for i in IFS:  # attached, idle: no limit
                assert "handle 0xed0 xtc_ed+clsact" in sh("tc", "-n", ns, "filter", "show", "dev", i, "egress")
                assert "rate_pps" not in read_attached(i, ns) and lim.adopt(i) is None
            assert lim.dropped_by_interface(IFS) == {}
            ed.period(1.0, {"vr7": IFS}, {"vr7": udp}, {})  # back: the same filters, new entries
            assert all(read_attached(i, ns)["rate_pps"] == pytest.approx(21_000, rel=1e-4) for i in IFS)
            ed.period(1.0, {"vr7": IFS}, {"vr7": keeps_up}, {})
            ed.forget("vr7")  # deactivation: parked ones go too
            assert queueing(ns) == before
            ed.choose("vr7", None)  # SIGTERM with a parked limiter
            ed.period(1.0, {"vr7": IFS}, {"vr7": udp}, {})
            ed.period(1.0, {"vr7": IFS}, {"vr7": keeps_up}, {})
            ed.remove_all()
            assert queueing(ns) == before
        finally:
            lim.close()
