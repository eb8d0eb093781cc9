"""TcGate (the XCo gate: HTB + TBF + u32 over netlink, a class per destination host) on a real
kernel, with real UDP traffic.

Needs root and iproute2.  Two namespaces ``xtcgt-<random>-s`` (sender, the gated uplink ``gs0``)
and ``-r`` (receiver, ``gr0``) joined by a veth pair; addresses 198.18.21.0/24 only; both
namespaces are removed at the end, also when a test fails.  The traffic is small UDP datagrams
(no GSO: one datagram is one frame).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import errno
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any
from dataclasses import dataclass, field

import pytest
from netns_udp import TimestampReceiver
from procs import until

from xtc.host import tcgate
from xtc.host.tcgate import (
    ROOT_HANDLE,
    TcGate,
    in_netns,
    cleanup,
)
from xtc.host.gate import CLOSED, OPEN, Flow, GateError

pytestmark = [pytest.mark.timeout(120)]
root = pytest.mark.root  # every test that builds the namespaces (the codec's tests: tests/unit/test_tccodec.py)

SRC, DST, OTHER_SRC = "198.18.21.1", "198.18.21.2", "198.18.21.11"
LINK_BPS = 1_000_000_000
PORT = 5301
FRAME = 200 + 8 + 20 + 14  # a 200-byte UDP datagram on the wire


def sh(*args: str) -> str:
    return subprocess.run(list(args), check=True, capture_output=True, text=True).stdout


@dataclass
class Lab:
    snd: str
    rcv: str
    ifname: str = "gs0"
    flow: Flow = field(default_factory=lambda: Flow(ipaddress.ip_address(SRC), ipaddress.ip_address(DST), 1))

    def tc_json(self, *what: str) -> list[dict]:
        out = sh("ip", "netns", "exec", self.snd, "tc", "-j", *what, "show", "dev", self.ifname)
        return json.loads(out) if out.strip() else []

    def classes(self) -> list[str]:
        """The HTB classes (``tc class show`` has no JSON output)."""
        out = sh("ip", "netns", "exec", self.snd, "tc", "class", "show", "dev", self.ifname)
        return [line for line in out.splitlines() if line.startswith("class htb")]

    def root(self) -> dict:
        return next(q for q in self.tc_json("qdisc") if q.get("root"))

    def gate(self, **kw: object) -> TcGate:
        return TcGate(self.ifname, link_bps=LINK_BPS, netns=self.snd, **kw)

    def hold(self, gate: TcGate, state: int, *flows: Flow) -> None:
        """Add the destination of :attr:`flow` in ``state``, and :attr:`flow` (or ``flows``) moved
        into its class (large flows)."""
        gate.add_dest(self.flow.dest_host, state)
        for f in flows or (self.flow,):
            gate.add_flow(f)
            gate.move_to_dest(f)


@pytest.fixture
def lab() -> Iterator[Lab]:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates network namespaces")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("iproute2 (ip, tc) is not installed")
    tag = secrets.token_hex(3)
    lab = Lab(f"xtcgt-{tag}-s", f"xtcgt-{tag}-r")
    try:
        for ns in (lab.snd, lab.rcv):
            sh("ip", "netns", "add", ns)
            sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", "gs0", "netns", lab.snd, "type", "veth", "peer", "name", "gr0", "netns", lab.rcv)
        sh("ip", "-n", lab.snd, "addr", "add", f"{SRC}/24", "dev", "gs0")
        sh("ip", "-n", lab.snd, "addr", "add", f"{OTHER_SRC}/24", "dev", "gs0")
        sh("ip", "-n", lab.rcv, "addr", "add", f"{DST}/24", "dev", "gr0")
        for ns, dev in ((lab.snd, "gs0"), (lab.rcv, "gr0")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        mac = json.loads(sh("ip", "-n", lab.rcv, "-j", "link", "show", "gr0"))[0]["address"]
        sh("ip", "-n", lab.snd, "neigh", "replace", DST, "lladdr", mac, "dev", "gs0")
        yield lab
    finally:
        for ns in (lab.snd, lab.rcv):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


class Receiver(TimestampReceiver):
    """A UDP socket in the receiver namespace; a thread keeps each datagram's kernel receive time."""

    def __init__(self, netns: str, port: int = PORT) -> None:
        self.arrivals_ns: list[int] = []
        self.sources: list[str] = []
        super().__init__(netns, DST, port)

    def record(self, data: bytes, src: str, dst: str, t_ns: int | None) -> None:
        if t_ns is not None:
            self.arrivals_ns.append(t_ns)
            self.sources.append(src)

    def count(self) -> int:
        return len(self.arrivals_ns)


@contextlib.contextmanager
def receiver(netns: str) -> Iterator[Receiver]:
    r = Receiver(netns)
    try:
        yield r
    finally:
        r.close()


def bound_socket(netns: str, kind: int, addr: str, listen: bool = False) -> socket.socket:
    """An IPv4 socket of ``kind`` bound to ``addr`` (an ephemeral port) in ``netns``, listening if asked."""
    def make() -> socket.socket:
        s = socket.socket(socket.AF_INET, kind)
        s.bind((addr, 0))
        if listen:
            s.listen(1)
        return s

    return in_netns(netns, make)


def udp_sender(netns: str, src: str = SRC) -> socket.socket:
    return bound_socket(netns, socket.SOCK_DGRAM, src)


def tcp_listener(netns: str) -> socket.socket:
    """A listening TCP socket on DST (an ephemeral port) in the receiver namespace."""
    return bound_socket(netns, socket.SOCK_STREAM, DST, listen=True)


def tcp_client(netns: str) -> socket.socket:
    """A TCP socket bound to SRC in the sender namespace (not connected)."""
    return bound_socket(netns, socket.SOCK_STREAM, SRC)


def send(sock: socket.socket, n: int, payload: int = 200) -> None:
    for i in range(n):
        sock.sendto(i.to_bytes(4, "big").ljust(payload, b"x"), (DST, PORT))


def soon(pred) -> bool:
    """Whether ``pred()`` comes true within a second (the gate's packets and counters settle in milliseconds)."""
    return until(pred, 1.0, 0.005)


@contextlib.contextmanager
def installed(gate: TcGate) -> Iterator[TcGate]:
    """``gate`` installed; restored and closed at the end, also when the test fails."""
    try:
        gate.install()
        yield gate
    finally:
        gate.restore()
        gate.close()


@root
def test_a_closed_destination_holds_all_its_flows_and_releases_them_when_opened(lab: Lab) -> None:
    with installed(lab.gate()) as gate:
        other = Flow(ipaddress.ip_address(OTHER_SRC), ipaddress.ip_address(DST), lab.flow.dest_host)
        lab.hold(gate, CLOSED, lab.flow, other)  # two VMs of this host towards one VM of host 1
        assert len(lab.classes()) == 2  # the default class and host 1's
        sock, sock2 = udp_sender(lab.snd), udp_sender(lab.snd, OTHER_SRC)
        with receiver(lab.rcv) as rx:
            send(sock, 50)
            send(sock2, 20)
            time.sleep(0.1)
            held = gate.stats()[1]
            # A new (or just changed) TBF starts with a full bucket: up to closed_burst_bytes
            # (MTU + 18 = 1518 here: 6 of these 242-byte frames) get out when a class closes.
            assert gate.closed_burst_bytes == 1518
            assert rx.count() == gate.closed_burst_bytes // FRAME
            assert held.backlog_packets == 70 - rx.count()
            assert held.backlog_bytes == held.backlog_packets * FRAME
            time.sleep(0.1)
            assert gate.stats()[1] == held  # nothing more leaves
            gate.set_states({1: OPEN})
            assert soon(lambda: rx.count() == 70), rx.count()
            assert rx.sources.count(OTHER_SRC) == 20
            st = gate.stats()[1]
            assert (st.sent_packets, st.backlog_packets) == (70, 0)
            assert st.sent_bytes == 70 * FRAME
            # open stays open: the next packets go straight through
            send(sock, 10)
            assert soon(lambda: rx.count() == 80)
        sock.close()
        sock2.close()


class _FullClassFrames:
    """The gate's packet socket, but every frame is refused as a full class refuses it (ENOBUFS)."""

    def __init__(self, real: socket.socket) -> None:
        self.real = real
        self.refused = 0

    def send(self, *a: object) -> int:
        self.refused += 1
        raise OSError(errno.ENOBUFS, "No buffer space available")

    sendto = send

    def close(self) -> None:
        self.real.close()


def test_frames_a_full_class_drops_do_not_undo_the_recorded_states(lab: Lab) -> None:
    """A held class flooded by a UDP sender refuses the drain frames (ENOBUFS; measured on the XCo lab:
    44-105 such errors per agent in a 3 s run).  The TBF changes were applied by then: set_states
    must not raise, and the states it records must be the kernel's, else the next turns go wrong."""
    with installed(lab.gate()) as gate:
        lab.hold(gate, CLOSED)
        sock = udp_sender(lab.snd)
        with receiver(lab.rcv) as rx:
            gate._pk = fake = _FullClassFrames(gate._pk)
            gate.set_states({1: OPEN})
            gate.set_states({1: CLOSED})  # wake and drain frames refused
            assert fake.refused >= 2 and gate.frames_dropped == fake.refused
            assert gate.states()[1] == CLOSED
            n0 = rx.count()
            send(sock, 50)
            time.sleep(0.1)
            assert rx.count() - n0 <= gate.closed_burst_bytes // FRAME  # closed in the kernel, too
            gate._pk = fake.real  # frames go out again (a real refusal kicks the qdisc all the same)
            gate.set_states({1: OPEN})  # recorded CLOSED, so this is sent: everything comes
            assert gate.states()[1] == OPEN
            assert soon(lambda: rx.count() - n0 == 50), rx.count() - n0
        sock.close()


@root
def test_a_slice_budget_holds_in_the_kernel_once_spent(lab: Lab) -> None:
    """``open_for_us``: the class lets out what the link carries in that time (plus the opening
    burst, from closed) and then holds by itself, with no further change; a second budget while
    open adds only the link's bytes for its time; a plain OPEN then lets everything go."""
    with installed(lab.gate(open_burst_bytes=10 * FRAME)) as gate:
        lab.hold(gate, CLOSED)
        sock = udp_sender(lab.snd)
        with receiver(lab.rcv) as rx:
            send(sock, 120)  # within the socket's send buffer while held
            time.sleep(0.05)
            n0 = rx.count()  # the closed bucket (see the test above)
            assert n0 == gate.closed_burst_bytes // FRAME
            slot_us = 30 * FRAME * 8 * 1_000_000 // LINK_BPS + 1  # 30 frames at the link rate: 59 us
            assert gate.slot_budget_bytes(slot_us, True) // FRAME == 30 + 10
            gate.set_states({1: OPEN}, {1: slot_us})
            assert gate.states()[1] == tcgate._BUDGET
            time.sleep(0.1)  # a thousand times the slot: the kernel alone held the rest
            assert rx.count() - n0 == 40, rx.count() - n0
            st = gate.stats()[1]
            assert st.backlog_packets == 120 - rx.count()
            gate.set_states({1: OPEN}, {1: slot_us})  # the next slot, same destination: no burst
            time.sleep(0.1)
            assert rx.count() - n0 == 70, rx.count() - n0
            gate.set_states({1: OPEN})  # budget recorded, so a plain OPEN is a change: all of it goes
            assert gate.states()[1] == OPEN
            assert soon(lambda: rx.count() == 120), rx.count()
            assert gate.slot_budget_bytes(-5, False) == gate.closed_burst_bytes  # never below a frame
        sock.close()


@root
def test_rate_limited_destination(lab: Lab) -> None:
    rate_bps = 2_000_000  # 250 kB/s
    with installed(lab.gate()) as gate:
        lab.hold(gate, OPEN)
        gate.set_states({1: rate_bps})
        sock = udp_sender(lab.snd)
        start = time.monotonic()
        send(sock, 100)  # 24 kB at once
        time.sleep(0.05)
        st = gate.stats()[1]
        elapsed = time.monotonic() - start
        burst = gate.closed_burst_bytes  # a rate limit's burst: max(closed burst, rate_burst_us at the rate)
        assert 0.5 * rate_bps / 8 * 0.05 <= st.sent_bytes <= burst + rate_bps / 8 * elapsed + FRAME
        assert st.backlog_packets == 100 - st.sent_packets > 0
        sock.close()


@root
def test_a_rate_limited_destination_that_went_idle_sends_its_rate_burst_at_once(lab: Lab) -> None:
    """``rate_burst_us``: a rate limit's bucket holds that long at the rate, so a destination that
    went idle catches up that much at once (a late flow's lost time), then keeps to its rate; the
    default (1 ms, here one frame's worth) lets almost nothing ahead."""
    rate_bps = 2_000_000  # 250 kB/s: 20 ms at the rate are 5,000 bytes (20 frames)
    with installed(lab.gate(rate_burst_us=20_000)) as gate:
        assert gate._rate_burst(rate_bps) == 5_000
        lab.hold(gate, OPEN)
        gate.set_states({1: rate_bps})  # a change starts with a full bucket
        sock = udp_sender(lab.snd)
        for _ in range(2):  # fresh, then after an idle stretch that refilled the bucket
            before = gate.stats()[1].sent_bytes
            start = time.monotonic()
            send(sock, 40)  # 9.7 kB at once
            time.sleep(0.005)
            sent = gate.stats()[1].sent_bytes - before
            elapsed = time.monotonic() - start
            assert 5_000 - FRAME <= sent <= 5_000 + rate_bps / 8 * elapsed + FRAME, (sent, elapsed)
            assert soon(lambda: gate.stats()[1].backlog_packets == 0)
            time.sleep(0.06)  # idle: 20 ms refill the bucket
        sock.close()
    with installed(lab.gate()) as gate:  # the default: 1 ms at 2 Mb/s is less than a frame
        assert gate.rate_burst_us == 1000 and gate._rate_burst(rate_bps) == gate.closed_burst_bytes
    with pytest.raises(GateError, match="rate_burst_us 0 out of range"):
        lab.gate(rate_burst_us=0)


@root
def test_icmp_and_unknown_flows_pass_a_closed_destination(lab: Lab) -> None:
    with installed(lab.gate()) as gate:
        lab.hold(gate, CLOSED)
        ping = subprocess.run(["ip", "netns", "exec", lab.snd, "ping", "-c", "3", "-i", "0.2", "-W", "1", DST],
                              capture_output=True, text=True, check=False)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        other = udp_sender(lab.snd, OTHER_SRC)  # 198.18.21.11 -> .2: a flow the gate does not know
        with receiver(lab.rcv) as rx:
            send(other, 20)
            assert soon(lambda: rx.count() == 20), rx.count()
            assert set(rx.sources) == {OTHER_SRC}
        other.close()
        assert gate.stats()[1].sent_packets == 0  # the pings went through the default class


def _until(t_ns: int) -> None:
    """Wait until ``time.time_ns() >= t_ns``: asleep until 1 ms before, then spinning.  Spinning the
    whole time starves the receiver's thread of the GIL (it gets it back once per switch interval,
    5 ms, after each ``recvmsg``), it falls behind by thousands of datagrams, and its socket buffer
    overflows near the end of a run: the last slices then look empty though the gate sent them."""
    ahead_ns = t_ns - time.time_ns() - 1_000_000
    if ahead_ns > 0:
        time.sleep(ahead_ns / 1e9)
    while time.time_ns() < t_ns:
        pass


def _gate_slices(lab: Lab, gate: Any, program: str, n_slices: int, slice_ns: int) -> dict[str, Any]:
    """One run: open ``slice_ns`` / closed ``slice_ns`` for ``n_slices`` slices under a paced UDP
    stream; the receiver's arrivals (kernel timestamps) against the open windows."""
    from xtc_lab.lab.traffic import udpsend_argv

    with receiver(lab.rcv) as rx:
        # The stream outlasts the measurement (0.3 s + 80 x 20 ms and the loop's own work) by far: a
        # stream that ended during the last slices left them empty though packets were held.
        proc = subprocess.Popen(["ip", "netns", "exec", lab.snd, *udpsend_argv(program, DST, 20000, 4.0, 1400, PORT)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            time.sleep(0.3)
            windows, backlogged = [], []
            t0 = time.time_ns()
            for i in range(n_slices):
                _until(t0 + 2 * i * slice_ns)
                backlogged.append(gate.stats()[1].backlog_packets > 0)
                start = time.time_ns()
                gate.set_states({1: OPEN})
                _until(t0 + (2 * i + 1) * slice_ns)
                gate.set_states({1: CLOSED})
                windows.append((start, time.time_ns()))
            end = time.time_ns()
        finally:
            # held datagrams count against the sender's socket buffer: open, or it blocks
            gate.set_states({1: OPEN})
            proc.wait(timeout=10)
        arrivals = [t for t in rx.arrivals_ns if windows[0][0] <= t <= end]
    gate.set_states({1: CLOSED})
    inside = outside = 0
    j = 0
    for t in sorted(arrivals):
        while j < len(windows) and windows[j][1] < t:
            j += 1
        if j < len(windows) and windows[j][0] <= t <= windows[j][1]:
            inside += 1
        else:
            outside += 1
    used = [any(a <= t <= b for t in arrivals) for a, b in windows]
    held_but_empty = sum(1 for u, b in zip(used, backlogged) if b and not u)
    fraction = inside / max(1, inside + outside)
    print(f"\nslices: {inside} inside / {outside} outside open windows ({100 * fraction:.2f}%), "
          f"{sum(used)}/{n_slices} open slices carried packets, {sum(backlogged)} opened on a backlog, "
          f"{held_but_empty} of those carried nothing; the receiver's socket dropped {rx.dropped}")
    return {"inside": inside, "outside": outside, "fraction": fraction, "backlogged": sum(backlogged),
            "held_but_empty": held_but_empty, "receiver_dropped": rx.dropped}


@root
def test_gating_by_10ms_slices(lab: Lab) -> None:
    """Open 10 ms / closed 10 ms for 1.6 s under a paced UDP stream; arrivals vs the open windows.

    The host that runs the suite may stall the sender or the receiver's softirq for a slice now and
    then; the same measurement is then repeated (up to 3 runs, all printed), and one run must meet
    every bound.
    """
    from xtc_lab.lab.build import build_udpsend

    try:
        program = str(build_udpsend())
    except Exception as e:  # noqa: BLE001 - no compiler: nothing to test with
        pytest.skip(f"cannot build udpsend: {e}")
    with installed(lab.gate()) as gate:
        lab.hold(gate, CLOSED)
        for _ in range(3):
            r = _gate_slices(lab, gate, program, 80, 10_000_000)
            if (r["inside"] + r["outside"] > 2000 and r["fraction"] >= 0.98 and r["backlogged"] >= 10
                    and r["held_but_empty"] == 0 and r["receiver_dropped"] == 0):
                break
        # a receiver that dropped datagrams did not see all that arrived: that run measured nothing
        assert r["receiver_dropped"] == 0
        assert r["inside"] + r["outside"] > 2000  # the stream ran: about 200 packets per open slice
        # Measured 99.76-99.90 % (outside: what a closing TBF lets out, one 1442-byte frame per
        # close); the goal is 98 %.
        assert r["fraction"] >= 0.98
        # the wake frame: a slice that opens on held packets lets them out at once (the notes
        # measured 69 of 150 open slices empty without it; with the wake frame switched off here,
        # 72-79 of 73-80).  How many slices open on a backlog depends on how much CPU the sender
        # gets (29-76 of 80 on the shared 2-core host).
        assert r["backlogged"] >= 10 and r["held_but_empty"] == 0


@root
def test_restore_gives_back_the_default_root(lab: Lab) -> None:
    assert lab.root()["kind"] == "noqueue"
    gate = lab.gate()
    gate.install()
    lab.hold(gate, CLOSED)
    assert lab.root()["kind"] == "htb" and lab.root()["handle"] == "7c0:"
    gate.restore()
    gate.restore()  # idempotent
    gate.close()
    assert [q["kind"] for q in lab.tc_json("qdisc")] == ["noqueue"]
    assert lab.tc_json("filter") == []


@root
def test_restore_gives_back_a_recorded_root(lab: Lab) -> None:
    sh("ip", "netns", "exec", lab.snd, "tc", "qdisc", "add", "dev", "gs0", "root", "handle", "5:", "bfifo",
       "limit", "12345")
    gate = lab.gate()
    gate.install()
    lab.hold(gate, OPEN)
    gate.restore()
    gate.close()
    (q,) = lab.tc_json("qdisc")
    assert (q["kind"], q["handle"], q["options"]["limit"]) == ("bfifo", "5:", 12345)


@root
def test_cleanup_after_a_crash_leaves_nothing(lab: Lab) -> None:
    gate = lab.gate()
    gate.install()
    for n in range(5):
        gate.add_dest(n, CLOSED)
        gate.add_flow(Flow(ipaddress.ip_address(SRC), ipaddress.ip_address(f"198.18.21.{100 + n}"), n))
    gate.close()  # as if SIGKILLed: nothing restored
    with pytest.raises(GateError, match="closed before restore"):
        gate.restore()
    with pytest.raises(GateError, match="already installed"):
        again = lab.gate()
        try:
            again.install()
        finally:
            again.close()
    assert lab.root()["handle"] == "7c0:"
    assert cleanup("gs0", netns=lab.snd) is True
    assert [q["kind"] for q in lab.tc_json("qdisc")] == ["noqueue"]
    assert lab.classes() == [] and lab.tc_json("filter") == []
    assert cleanup("gs0", netns=lab.snd) is False
    # a root that is not ours is left alone
    sh("ip", "netns", "exec", lab.snd, "tc", "qdisc", "add", "dev", "gs0", "root", "handle", "1:", "htb")
    assert cleanup("gs0", netns=lab.snd) is False
    assert lab.root()["handle"] == "1:"


@root
def test_cleanup_after_sigkill(lab: Lab) -> None:
    """A process that installed the gate and holds a flow is SIGKILLed; cleanup() removes it all."""
    import sys

    code = (
        "import ipaddress, sys, time\n"
        "from xtc.host.tcgate import TcGate\n"
        "from xtc.host.gate import CLOSED, Flow\n"
        f"g = TcGate('gs0', link_bps={LINK_BPS}, netns={lab.snd!r})\n"
        "g.install()\n"
        "g.add_dest(1, CLOSED)\n"
        f"g.add_flow(Flow(ipaddress.ip_address({SRC!r}), ipaddress.ip_address({DST!r}), 1))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.kill()
        proc.wait(timeout=10)
        assert lab.root()["handle"] == "7c0:" and len(lab.classes()) == 3  # default, host 1's, the flow's
        assert cleanup("gs0", netns=lab.snd) is True
        assert [q["kind"] for q in lab.tc_json("qdisc")] == ["noqueue"]
        assert lab.classes() == [] and lab.tc_json("filter") == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _held_tcp_packet_bytes(lab: Lab, gate: TcGate) -> tuple[int, int]:
    """Run a TCP connection SRC -> DST through the open gate for 0.3 s (so that TCP sizes its
    packets for its rate), close its destination while it sends, and return what then waits in
    its class: (packets, bytes)."""
    import threading

    def drain(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while conn.recv(1 << 16):
                pass

    srv, cli = tcp_listener(lab.rcv), tcp_client(lab.snd)
    conn = None
    try:
        gate.add_dest(lab.flow.dest_host, OPEN)
        gate.add_flow(lab.flow)
        gate.move_to_dest(lab.flow)
        cli.settimeout(5)
        cli.connect(srv.getsockname())
        conn, _ = srv.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()
        chunk = b"x" * 65536
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            cli.send(chunk)
        gate.set_states({lab.flow.dest_host: CLOSED})
        cli.setblocking(False)
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            with contextlib.suppress(BlockingIOError):
                cli.send(chunk)
            time.sleep(0.01)
        st = gate.stats()[lab.flow.dest_host]
        return st.backlog_packets, st.backlog_bytes
    finally:
        for s in (cli, conn, srv):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


@root
def test_tcp_control_packets_pass_a_closed_destination_and_data_does_not(lab: Lab) -> None:
    """With the destination closed, a TCP handshake completes (SYN, SYN-ACK and ACK are under
    TCP_CONTROL_BYTES) while the data and short UDP datagrams wait; without ``pass_tcp_control``
    the SYN itself is held."""

    assert tcgate.TCP_CONTROL_BYTES == 128
    for passing in (True, False):
        with installed(lab.gate(pass_tcp_control=passing)) as gate:
            lab.hold(gate, OPEN)
            gate.set_states({1: CLOSED})  # the drain frames take the refilled bucket
            srv, cli = tcp_listener(lab.rcv), tcp_client(lab.snd)
            cli.settimeout(1.0)
            try:
                if not passing:
                    with pytest.raises(OSError):  # the SYN waits in the closed class: timeout
                        cli.connect(srv.getsockname())
                    assert gate.stats()[1].backlog_packets >= 1
                    continue
                cli.connect(srv.getsockname())
                conn, _ = srv.accept()
                conn.settimeout(0.3)
                cli.sendall(b"d" * 5000)  # a new TBF's full bucket lets the first frame out (see above)
                got = b""
                with contextlib.suppress(TimeoutError):
                    while True:
                        got += conn.recv(10000)
                assert len(got) <= gate.closed_burst_bytes
                held = gate.stats()[1]
                assert held.backlog_packets >= 1 and held.backlog_bytes >= 5000 - len(got)
                udp = udp_sender(lab.snd)
                send(udp, 5, payload=40)  # 82-byte frames: short, but not TCP
                assert soon(lambda: gate.stats()[1].backlog_packets == held.backlog_packets + 5)
                gate.set_states({1: OPEN})
                while len(got) < 5000:
                    got += conn.recv(10000)
                conn.close()
                udp.close()
            finally:
                cli.close()
                srv.close()


def _gso_max_segs(lab: Lab) -> int:
    return int(json.loads(sh("ip", "-n", lab.snd, "-j", "-d", "link", "show", lab.ifname))[0]["gso_max_segs"])


@root
def test_gso_max_segs_one_hands_the_gate_frames_and_is_given_back(lab: Lab) -> None:
    """A slot budget's TBF leaf takes a packet whole, so the gate wants frames, not GSO packets.
    TCP builds GSO packets whatever the device's offload features say (GSO is off on this veth
    by default and TCP still hands the qdisc ~64 KB packets); ``gso_max_segs=1`` makes it send
    one segment per packet.  The recorded value comes back on restore, and cleanup() after a
    kill gives the kernel's default back."""
    frame = 1500 + 14
    assert _gso_max_segs(lab) == 65535
    # without it: GSO packets (some held packet is bigger than a frame; how big depends on TCP's
    # pacing rate: 2.9-14 KB on average here, smaller on a loaded host, and once in a CI run every one
    # of 90 held packets was a single frame), so the connection is run again, up to three times, until
    # TCP shows it
    tries = []
    for _ in range(3):
        with installed(lab.gate()) as gate:
            tries.append(_held_tcp_packet_bytes(lab, gate))
        packets, nbytes = tries[-1]
        if packets > 0 and nbytes > packets * frame:
            break
    assert packets > 0 and nbytes > packets * frame, tries
    assert _gso_max_segs(lab) == 65535
    # with it: frames only, judged over at least 10 held packets; a loaded host may leave fewer in the
    # class when the gate closes (9 once in a fresh-clone run), so the connection is run again, each time
    # through a gate of its own, up to three times
    tries = []
    for _ in range(3):
        with installed(lab.gate(gso_max_segs=1)) as gate:
            assert _gso_max_segs(lab) == 1
            tries.append(_held_tcp_packet_bytes(lab, gate))
        packets, nbytes = tries[-1]
        if packets >= 10 and nbytes <= packets * frame:
            break
    print("held with gso_max_segs=1 (packets, bytes):", tries)
    assert packets >= 10 and nbytes <= packets * frame, (packets, nbytes)
    assert _gso_max_segs(lab) == 65535
    # killed while installed: cleanup() knows the value the gate sets and puts the default back
    gate = lab.gate(gso_max_segs=1)
    gate.install()
    gate.close()
    assert _gso_max_segs(lab) == 1
    assert cleanup(lab.ifname, netns=lab.snd, gso_max_segs=1) is True
    assert _gso_max_segs(lab) == 65535 and [q["kind"] for q in lab.tc_json("qdisc")] == ["noqueue"]
    # an operator's own value is left alone by a gate that does not set one
    sh("ip", "-n", lab.snd, "link", "set", lab.ifname, "gso_max_segs", "7")
    with installed(lab.gate()):
        assert _gso_max_segs(lab) == 7
    assert _gso_max_segs(lab) == 7
    with pytest.raises(GateError, match="gso_max_segs 0 out of range"):
        lab.gate(gso_max_segs=0)


@root
def test_bad_input_is_named_and_changes_nothing(lab: Lab) -> None:
    with pytest.raises(GateError, match="nosuch0.*no such interface"):
        TcGate("nosuch0", link_bps=LINK_BPS, netns=lab.snd)
    with pytest.raises(GateError, match="netns"):
        TcGate("gs0", link_bps=LINK_BPS, netns=lab.snd + "-missing")
    with pytest.raises(GateError, match="nosuch0"):
        cleanup("nosuch0", netns=lab.snd)
    gate = lab.gate()
    with pytest.raises(GateError, match="not installed"):
        gate.add_dest(1)
    with pytest.raises(GateError, match="not installed"):
        gate.add_flow(lab.flow)
    with installed(gate):
        lab.hold(gate, CLOSED)
        before = (lab.tc_json("qdisc"), lab.classes(), lab.tc_json("filter"))
        with pytest.raises(GateError, match=r"gs0.*198\.18\.21\.1->198\.18\.21\.2 already added"):
            gate.add_flow(lab.flow)
        with pytest.raises(GateError, match=r"gs0 \(netns .*\): dest host 1 already added"):
            gate.add_dest(1)
        with pytest.raises(GateError, match=r"198\.18\.21\.1->198\.18\.21\.2 already moved to dest host 1"):
            gate.move_to_dest(lab.flow)
        other = Flow(ipaddress.ip_address(SRC), ipaddress.ip_address("198.18.21.50"), 2)
        with pytest.raises(GateError, match=r"198\.18\.21\.1->198\.18\.21\.50: dest host 2 not added"):
            gate.add_flow(other)
        with pytest.raises(GateError, match="dest host 2 unknown"):
            gate.set_states({2: OPEN})
        with pytest.raises(GateError, match="dest host 1: bad state"):
            gate.set_states({1: -7})
        with pytest.raises(GateError, match="dest host 3: bad state"):
            gate.add_dest(3, -7)
        with pytest.raises(GateError, match="mixes"):
            gate.add_flow(Flow(ipaddress.ip_address(SRC), ipaddress.ip_address("2001:db8::2"), 1))
        after = (lab.tc_json("qdisc"), lab.classes(), lab.tc_json("filter"))
        assert before == after
        assert gate.states() == {1: CLOSED}
        # a kernel error names the interface, the destination and the errno
        sh("ip", "netns", "exec", lab.snd, "tc", "filter", "del", "dev", "gs0", "parent", "7c0:", "prio", "10")
        sh("ip", "netns", "exec", lab.snd, "tc", "class", "del", "dev", "gs0", "classid", "7c0:2")
        with pytest.raises(GateError, match=r"gs0.*dest host 1 to OPEN.*(ENOENT|EINVAL)"):
            gate.set_states({1: OPEN})
        with pytest.raises(GateError, match=r"gs0 \(netns .*\): flow 198\.18\.21\.1->198\.18\.21\.2 delete u32 filter: (ENOENT|EINVAL)"):
            gate.remove_dest(1)


@root
def test_a_small_flow_passes_a_closed_destination_until_moved_into_it(lab: Lab) -> None:
    with installed(lab.gate()) as gate:
        lab.hold(gate, CLOSED)  # SRC -> DST: large, held
        small = Flow(ipaddress.ip_address(OTHER_SRC), ipaddress.ip_address(DST), 1)
        gate.add_flow(small)  # OTHER_SRC -> DST: the same destination host, small
        sock, other = udp_sender(lab.snd), udp_sender(lab.snd, OTHER_SRC)
        with receiver(lab.rcv) as rx:
            send(sock, 20)
            send(other, 10)
            assert soon(lambda: rx.sources.count(OTHER_SRC) == 10), rx.sources
            sent, backlog, packets, small_sent = gate.counters((1,), (small,))
            assert small_sent.tolist() == [10 * FRAME] and packets[0] > 0
            assert sent[0] + backlog[0] == 20 * FRAME and sent[0] <= gate.closed_burst_bytes
            gate.move_to_dest(small)  # large now: held with host 1
            assert len(lab.classes()) == 2  # its own class is gone
            send(other, 10)
            time.sleep(0.1)
            assert rx.sources.count(OTHER_SRC) == 10
            gate.set_states({1: OPEN})
            assert soon(lambda: rx.count() == 40), rx.count()
        sock.close()
        other.close()


@root
def test_destinations_flows_ipv6_and_remove(lab: Lab) -> None:
    with installed(lab.gate()) as gate:
        dests = list(range(1, 9))
        times = []
        for d in dests:
            t = time.perf_counter()
            gate.add_dest(d, CLOSED)
            times.append(time.perf_counter() - t)
        # 4 VMs here x 8 hosts of 4 VMs: 128 flows, 16 per destination
        flows = [Flow(ipaddress.ip_address(f"198.18.21.{10 + v}"), ipaddress.ip_address(f"198.18.21.{100 + 4 * d + w}"), d)
                 for v in range(4) for d in dests for w in range(4)]
        for f in flows:
            t = time.perf_counter()
            gate.add_flow(f)
            times.append(time.perf_counter() - t)
        gate.add_dest(9, OPEN)
        f6 = Flow(ipaddress.ip_address("2001:db8::1"), ipaddress.ip_address("2001:db8::2"), 9)
        gate.add_flow(f6)
        times.sort()
        print(f"\nadd_dest/add_flow: p50 {1e3 * times[len(times) // 2]:.2f} ms, max {1e3 * times[-1]:.2f} ms")
        assert times[len(times) // 2] <= 0.005  # the goal: a flow's class set up in <= 5 ms
        filters = [f for f in lab.tc_json("filter") if f.get("options", {}).get("flowid")]
        assert len(filters) == 4 + 129  # ICMP, ICMPv6, TCP control (v4, v6), one per flow
        assert len({f["options"]["flowid"] for f in filters}) == 1 + 129  # small: a class each
        assert len(lab.classes()) == 1 + 9 + 129
        for f in [*flows, f6]:
            gate.move_to_dest(f)
        filters = [f for f in lab.tc_json("filter") if f.get("options", {}).get("flowid")]
        assert len(filters) == 4 + 129
        minors = {d: gate._dests[d].minor for d in [*dests, 9]}
        assert set(minors.values()) == {*range(2, 10), 10 + 128}  # host 9 added after the 128 small flows
        assert {f["options"]["flowid"] for f in filters} == {"7c0:1"} | {f"7c0:{m:x}" for m in minors.values()}
        assert len(lab.classes()) == 1 + 9
        gate.set_states({d: OPEN for d in dests[::2]} | {9: CLOSED})
        assert gate.states()[9] == CLOSED and gate.states()[1] == OPEN and gate.states()[2] == CLOSED
        to1 = [f for f in flows if f.dest_host == 1]
        for f in to1[1:]:
            gate.remove_flow(f)
        for d in dests[1:]:
            gate.remove_dest(d)
        gate.remove_dest(9)
        assert len(lab.classes()) == 2  # default + host 1's
        filters = [f for f in lab.tc_json("filter") if f.get("options", {}).get("flowid")]
        assert len(filters) == 4 + 1 and {f["options"]["flowid"] for f in filters} == {"7c0:1", "7c0:2"}
        assert set(gate.stats()) == {1}
        with pytest.raises(GateError, match="unknown"):
            gate.remove_flow(f6)
        with pytest.raises(GateError, match="dest host 9 unknown"):
            gate.remove_dest(9)
        assert lab.root()["handle"] == f"{ROOT_HANDLE >> 16:x}:"


@root
def test_counters_match_stats_and_open_burst_is_applied(lab: Lab) -> None:
    gate = lab.gate(open_burst_bytes=3036)
    assert gate.open_burst_bytes == 3036
    with installed(gate):
        lab.hold(gate, CLOSED)
        gate.add_dest(2, OPEN)
        gate.add_flow(Flow(ipaddress.ip_address(OTHER_SRC), ipaddress.ip_address("198.18.21.3"), 2))
        dests = (2, 1)
        sock = udp_sender(lab.snd)
        with receiver(lab.rcv):
            send(sock, 30)
            time.sleep(0.1)
            st = gate.stats()
            got = gate.counters(dests)[:3]
            assert [x.tolist() for x in got] == [[st[d].sent_bytes for d in dests], [st[d].backlog_bytes for d in dests],
                                                 [st[d].backlog_packets for d in dests]]
            assert got[2][1] > 0
            gate.set_states({1: OPEN})
            assert soon(lambda: gate.counters(dests)[2][1] == 0)
            assert gate.counters(dests)[0][1] == 30 * FRAME
        sock.close()
        out = sh("tc", "-n", lab.snd, "-d", "qdisc", "show", "dev", "gs0")
        bursts = [int(b) for b in re.findall(r"qdisc tbf .* burst (\d+)b", out)]
        # tc shows the burst back from the buffer in ticks: 3000b for 3036 bytes at 1 Gb/s
        assert len(bursts) == 2 and all(abs(b - 3036) < 64 for b in bursts), out
    with pytest.raises(tcgate.GateError, match="open_burst_bytes 100 < one frame"):
        lab.gate(open_burst_bytes=100)


@root
def test_a_change_the_kernel_refuses_is_named_though_no_ack_is_asked(lab: Lab) -> None:
    with installed(lab.gate()) as gate:
        lab.hold(gate, OPEN)
        gate.add_dest(2, OPEN)
        gate.add_flow(Flow(ipaddress.ip_address(OTHER_SRC), ipaddress.ip_address("198.18.21.3"), 2))
        gate.set_states({1: CLOSED, 2: CLOSED})
        gate.set_states({1: OPEN, 2: OPEN})
        # the leaf of host 1's class goes behind the gate's back: its change fails, the other's not
        minor = gate._dests[1].minor
        sh("tc", "-n", lab.snd, "qdisc", "del", "dev", "gs0", "parent", f"7c0:{minor:x}")
        with pytest.raises(GateError, match="dest host 1 to CLOSED: ") as e:
            gate.set_states({1: CLOSED, 2: CLOSED})  # the cached batch of before
        assert "dest host 2" not in str(e.value)
        assert gate.states() == {1: OPEN, 2: CLOSED}


@root
def test_a_100_gbps_uplink_and_a_40_gbps_rate_reach_the_kernel_whole(lab: Lab) -> None:
    """TBF's rate field is 32 bits of bytes/s (34 Gb/s): a faster link's OPEN, or a faster rate,
    must reach the kernel in TCA_TBF_RATE64 (HTB's classes in TCA_HTB_RATE64), not wrapped or clamped."""
    link = 100_000_000_000
    with installed(TcGate(lab.ifname, link_bps=link, netns=lab.snd)) as gate:
        lab.hold(gate, OPEN)
        gate.add_dest(2, 40_000_000_000)
        gate.add_dest(3, 8_000_000)
        tbf = sorted(q["options"]["rate"] for q in lab.tc_json("qdisc") if q["kind"] == "tbf")
        assert tbf == [1_000_000, 5_000_000_000, 12_500_000_000], tbf  # bytes/s
        assert all(" rate 100Gbit ceil 100Gbit " in c for c in lab.classes()), lab.classes()
        with receiver(lab.rcv) as r:  # and it passes what it is given
            sock = udp_sender(lab.snd)
            send(sock, 50)
            sock.close()
            assert soon(lambda: r.count() == 50)
        gate.set_states({1: 50_000_000_000})
        tbf = sorted(q["options"]["rate"] for q in lab.tc_json("qdisc") if q["kind"] == "tbf")
        assert tbf == [1_000_000, 5_000_000_000, 6_250_000_000], tbf
        with pytest.raises(GateError, match="bad state"):
            gate.set_states({1: 10**13 + 1})
    with pytest.raises(GateError, match="out of range"):
        TcGate(lab.ifname, link_bps=10**13 + 1, netns=lab.snd)


@root
def test_every_new_rate_reaches_the_kernel_with_its_burst(lab: Lab) -> None:
    """Rates are written into one encoded message (not encoded by pyroute2 each time): what the
    kernel holds after each change is that rate, and the rate limit's burst."""
    with installed(lab.gate()) as gate:
        lab.hold(gate, OPEN)
        for rate_bps in (2_000_000, 19_400_000, 97_000_000 // 5, 1_000_000_008, 30_000_000_000):
            gate.set_states({1: rate_bps})
            tbf = [q["options"] for q in lab.tc_json("qdisc") if q["kind"] == "tbf" and q["options"]["rate"] != LINK_BPS // 8]
            assert [o["rate"] for o in tbf] == [rate_bps // 8], (rate_bps, tbf)
            # the kernel keeps the bucket in time, and reports it back in 64 ns ticks: a few bytes off
            want = max(gate.closed_burst_bytes, rate_bps // 8 // 1000)
            assert abs(tbf[0]["burst"] - want) <= max(4, want // 500), (want, tbf)


@root
def test_quiet_probe_sees_a_held_queue_and_a_small_flows_bytes(lab: Lab) -> None:
    """TcGate.quiet: True only when nothing is queued under the root and the root let out at most
    the headroom since the last probe that said False."""
    with installed(lab.gate()) as gate:
        lab.hold(gate, CLOSED)  # SRC -> DST: large, held
        small = Flow(ipaddress.ip_address(OTHER_SRC), ipaddress.ip_address(DST), 1)
        gate.add_flow(small)
        assert gate.quiet() is False  # no base yet: read the classes
        assert gate.quiet() is True and gate.quiet(10 * FRAME) is True
        sock, other = udp_sender(lab.snd), udp_sender(lab.snd, OTHER_SRC)
        with receiver(lab.rcv) as rx:
            send(sock, 20)  # held (but the first frames of the closed burst): queued under the root
            time.sleep(0.05)
            assert gate.counters((1,), (small,))[2][0] > 0
            assert gate.quiet() is False and gate.quiet() is False
            gate.set_states({1: OPEN})
            assert soon(lambda: rx.count() == 20)
            assert gate.quiet() is True  # nothing queued, no headroom asked
            assert gate.quiet(1000) is False  # the 20 held frames left since the base: base moved here
            assert gate.quiet(1000) is True  # (1000: room for a stray frame of the kernel's)
            send(other, 10)  # the small flow sends 10 frames, unheld
            assert soon(lambda: rx.count() == 30)
            assert gate.quiet(None) is True  # nothing queued, no headroom asked
            assert gate.quiet(10 * FRAME + 10_000) is True
            assert gate.quiet(10 * FRAME - 1) is False  # it may have passed its threshold
            assert gate.quiet(1000) is True  # base moved to that probe
        sock.close()
        other.close()
    with pytest.raises(GateError, match="not installed"):
        gate.quiet()
