"""The XCo agent on the real kernel gate, with real packets: one controller process and one
``xtc xco agent -c`` process per host, each gating its host's uplink inside the host's namespace.

Needs root, iproute2 and a C compiler (the lab's paced sender ``udpsend``).  Namespaces
``xag<random>-sw`` (a bridge: the switch) and ``-h0`` .. ``-h3`` (hosts s1, s2, s3 and the
receiver r1, one veth uplink each to the bridge); addresses 198.18.22.0/24 only; the namespaces
are removed at the end, also when the test fails.  The controller and the agents run in the root
namespace and talk UDP over 127.0.0.1 (the agents' gates open their netlink and packet sockets
inside the host namespaces, the config's ``netns``): the control traffic does not share the
gated links, as it would not on a real host with a management network.

What is checked, in one run (about 30 s):

1. Slots alternate: three paced UDP senders into r1; slots are the controller's grid (wall-clock
   multiples of ``slice_us``) and each slot's owner is the sender most of its packets came from;
   >= 98 % of the packets that reached r1 arrived in a slot their sender owns, every sender owns
   slots, and no sender owns two slots in a row while the others are backlogged.
2. Small flows and ICMP pass: a ping and a small UDP flow from a gated sender during (1) arrive
   without waiting for a slot.
3. Work conservation: one sender alone gets the link (>= 95 % of its packets arrive, no gap
   longer than two slices: give-up, hold, backlog again, grant).
4. Controller SIGKILLed during (1): every agent fails open within 3 slices of the kill (+ one
   slice of lateness: the last directive may be a slice older than the kill), packets flow again.
5. SIGTERM of an agent: its uplink's original root qdisc (a pfifo of 777 packets) is back.
6. SIGKILL of an agent: ``xtc xco agent -c F --cleanup`` leaves no XCo qdisc, class or filter.

And between 3 and 4: the receiver's agent SIGKILLed, the controller drops r1 for silence and a
sender alone still gets >= 95 % of its packets to r1 (a receiver needs no agent).

A second test (about 8 s) runs the controller in hybrid mode with r1 behind a 20 Mb/s switch port:
the senders, whose 1 Gb/s NICs timeslices would never serve there, get slices at 20 Mb/s.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from netns_udp import TimestampReceiver
from procs import free_port, measured_until_held, stolen_ms

from xtc.host.tcgate import in_netns

pytestmark = [pytest.mark.timeout(120), pytest.mark.root]

ROOT = Path(__file__).resolve().parents[2]
NET = "198.18.22"
HOSTS = {"s1": [f"{NET}.1"], "s2": [f"{NET}.2"], "s3": [f"{NET}.3"], "r1": [f"{NET}.10", f"{NET}.11"]}
RCV, SMALL_DST = f"{NET}.10", f"{NET}.11"
SENDERS = ("s1", "s2", "s3")
SLICE_US = 10_000
LEAD_US = 2_000
PORT = 5401
RATE_PPS = 3000
PAYLOAD = 1400
#: A packet that left the gate just before it closed reaches r1 this much later at most (bridge
#: and veth transit, the receiver's softirq), us.
AFTER_CLOSE_US = 500


def sh(*args: str, check: bool = True) -> str:
    return subprocess.run(list(args), check=check, capture_output=True, text=True).stdout


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT))


class Net:
    """A switch namespace with a bridge and one namespace per host, one veth uplink each."""

    def __init__(self, tag: str) -> None:
        self.sw = f"xag{tag}-sw"
        self.ns = {h: f"xag{tag}-h{i}" for i, h in enumerate(HOSTS)}
        self.up = "up0"

    def build(self) -> None:
        for ns in (self.sw, *self.ns.values()):
            sh("ip", "netns", "add", ns)
            sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.sw, "link", "set", "br0", "up")
        macs = {}
        for i, (h, addrs) in enumerate(HOSTS.items()):
            ns = self.ns[h]
            sh("ip", "-n", ns, "link", "add", self.up, "type", "veth", "peer", "name", f"p{i}", "netns", self.sw)
            sh("ip", "-n", self.sw, "link", "set", f"p{i}", "master", "br0", "up")
            for a in addrs:
                sh("ip", "-n", ns, "addr", "add", f"{a}/24", "dev", self.up)
            sh("ip", "-n", ns, "link", "set", self.up, "up")
            if shutil.which("ethtool"):
                sh("ip", "netns", "exec", ns, "ethtool", "-K", self.up, "gso", "off", "tso", "off", check=False)
            macs[h] = json.loads(sh("ip", "-n", ns, "-j", "link", "show", self.up))[0]["address"]
        for h in HOSTS:  # static neighbours: no ARP in the measurements
            for g, addrs in HOSTS.items():
                if g != h:
                    for a in addrs:
                        sh("ip", "-n", self.ns[h], "neigh", "replace", a, "lladdr", macs[g], "dev", self.up)

    def remove(self) -> None:
        for ns in (*self.ns.values(), self.sw):
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)

    def root_qdisc(self, h: str) -> dict:
        qs = json.loads(sh("ip", "netns", "exec", self.ns[h], "tc", "-j", "qdisc", "show", "dev", self.up) or "[]")
        return next(q for q in qs if q.get("root"))

    def tc_lines(self, h: str, what: str) -> list[str]:
        return [ln for ln in sh("ip", "netns", "exec", self.ns[h], "tc", what, "show", "dev", self.up).splitlines()
                if ln.strip()]


@pytest.fixture
def net(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root: creates network namespaces")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("iproute2 (ip, tc) is not installed")
    n = Net(secrets.token_hex(3))
    try:
        n.build()
        yield n
    finally:
        n.remove()


class Proc:
    """A process whose JSON log lines (stderr) are collected by a thread."""

    def __init__(self, argv: list[str], name: str) -> None:
        self.name = name
        self.p = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env())
        self.events: list[dict] = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self) -> None:
        for line in self.p.stderr:
            if line.startswith("{"):
                e = json.loads(line)
                e["_rx_ns"] = time.time_ns()
                self.events.append(e)
            else:
                self.events.append({"event": "text", "line": line})

    def wait_for(self, event: str, timeout_s: float = 60, since: int = 0) -> dict:
        """The first ``event`` among the events from index ``since`` on (waiting for it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for e in list(self.events)[since:]:
                if e["event"] == event:
                    return e
            assert time.monotonic() < deadline, (self.name, event, self.p.poll(), self.events[-5:])
            assert self.p.poll() is None, (self.name, event, self.p.returncode, self.events[-5:])
            time.sleep(0.01)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        rc = self.p.wait(timeout_s)
        self.t.join(5)
        return rc


class Receiver(TimestampReceiver):
    """r1's UDP socket; a thread keeps each datagram's source, kernel receive time and payload head."""

    def __init__(self, netns: str) -> None:
        self.rx: list[tuple[str, str, int, bytes]] = []  # (src, dst, rx_ns, first 8 bytes)
        super().__init__(netns, "0.0.0.0", PORT, pktinfo=True)

    def record(self, data: bytes, src: str, dst: str, t_ns: int | None) -> None:
        self.rx.append((src, dst, t_ns or 0, data[:8]))

    def between(self, t0_ns: int, t1_ns: int, dst: str = RCV) -> list[tuple[str, int]]:
        return [(s, t) for s, d, t, _ in list(self.rx) if d == dst and t0_ns <= t < t1_ns]



def _write_configs(tmp: Path, net: Net, port: int, mode: str = "timeslice",
                   r1_port_bps: int | None = None) -> dict[str, Path]:
    """The topology (every NIC 1 Gb/s; r1's switch port at ``r1_port_bps`` if given), the
    controller's configuration (in ``mode``) and one agent configuration per host."""
    topo = ['schema = "xco-topology/1"', "[[switch]]", 'name = "sw1"']
    for h, addrs in HOSTS.items():
        topo += ["[[host]]", f'name = "{h}"', "nic_bps = 1_000_000_000", 'switch = "sw1"', f"vms = {json.dumps(addrs)}"]
        if h == "r1" and r1_port_bps is not None:
            topo.append(f"port_bps = {r1_port_bps}")
    (tmp / "topo.toml").write_text("\n".join(topo) + "\n")
    (tmp / "ctl.toml").write_text(
        f'schema = "xco-controller/1"\ntopology = "topo.toml"\nmode = "{mode}"\nslice_us = {SLICE_US}\nlead_us = {LEAD_US}\n'
        f'listen = "127.0.0.1:{port}"\nheartbeat_interval_us = 100000\nheartbeat_misses = 5\n'
        'state_file = "ctl-state.json"\n[metrics]\nenabled = false\n')
    out = {}
    for h in HOSTS:
        p = tmp / f"agent-{h}.toml"
        p.write_text(
            f'schema = "xco-agent/1"\ntopology = "topo.toml"\nhost = "{h}"\nuplink = "{net.up}"\n'
            f'netns = "{net.ns[h]}"\ncontroller = "127.0.0.1:{port}"\nbind = "127.0.0.1:0"\n'
            'small_flow_bytes = 30000\ngiveup_after_us = 5000\npoll_us = 1000\nrealtime_priority = 10\n'
            '[metrics]\nenabled = false\n[log]\nlevel = "debug"\n')
        out[h] = p
    return out


def _udpsend(net: Net, h: str, seconds: float) -> subprocess.Popen:
    from xtc_lab.lab.build import build_udpsend

    prog = str(build_udpsend())
    return subprocess.Popen(["ip", "netns", "exec", net.ns[h], prog, "-r", str(RATE_PPS), "-t", f"{seconds:.3f}",
                             "-l", str(PAYLOAD), "-p", str(PORT), RCV], stdout=subprocess.PIPE, text=True)


def _sent(p: subprocess.Popen) -> int:
    out, _ = p.communicate(timeout=30)
    return int(json.loads(out.strip().splitlines()[-1])["sent_packets"])


def _open_intervals(events: list[dict], dest: int, t0_us: int, t1_us: int, when) -> list[tuple[int, int]]:
    """The intervals of ``[t0_us, t1_us)`` during which an agent's flows towards ``dest`` were open,
    from its ``directive_applied`` events, each taking effect at ``when(event)``."""
    out, start = [], None
    for e in sorted((e for e in events if e["event"] == "directive_applied"), key=when):
        t = when(e)
        if e["dest"] == dest and start is None:
            start = t
        elif e["dest"] != dest and start is not None:
            if t > t0_us and start < t1_us:
                out.append((max(start, t0_us), min(t, t1_us)))
            start = None
    if start is not None and start < t1_us:
        out.append((max(start, t0_us), t1_us))
    return out


def open_intervals(events: list[dict], dest: int, t0_us: int, t1_us: int) -> list[tuple[int, int]]:
    """The open intervals of the schedule: each directive's slice begins at its ``start_us`` (or its
    arrival, if it came late), the controller's schedule, not when the agent got round to it."""
    return _open_intervals(events, dest, t0_us, t1_us, lambda e: max(e["start_us"], e["arrival_us"]))


def gate_open_intervals(events: list[dict], dest: int, t0_us: int, t1_us: int) -> list[tuple[int, int]]:
    """The open intervals of the gate: from the ``applied_us`` of a directive that opened it (when
    its gate change had returned) to that of the next; what the gate did, however late the agent
    applied the schedule."""
    return _open_intervals(events, dest, t0_us, t1_us, lambda e: e["applied_us"])


def longest_closed_us(events: list[dict], dest: int, t0_us: int, t1_us: int) -> int:
    """The longest stretch of ``[t0_us, t1_us)`` during which the agent's gate held ``dest`` closed
    (:func:`gate_open_intervals`): what XCo held, as against a gap at the receiver, which a stalled
    sender or host makes too."""
    iv = gate_open_intervals(events, dest, t0_us, t1_us)
    if not iv:
        return t1_us - t0_us
    edges = [iv[0][0] - t0_us, t1_us - iv[-1][1]]
    return max([b[0] - a[1] for a, b in itertools.pairwise(iv)] + edges)


def first_packet_after_open_us(events: list[dict], dest: int, arrivals_us: list[int]) -> list[int]:
    """For each directive that opened ``dest`` (after one that did not) within the arrivals: from
    when it was due (``start_us``, or its arrival if later) to the first packet at the receiver."""
    import bisect

    out, prev = [], None
    ts = sorted(arrivals_us)
    for e in sorted((e for e in events if e["event"] == "directive_applied"),
                    key=lambda e: max(e["start_us"], e["arrival_us"])):
        due = max(e["start_us"], e["arrival_us"])
        if e["dest"] == dest and prev != dest and ts and ts[0] < due < ts[-1]:
            i = bisect.bisect_left(ts, due)
            if ts[i] - due < 20_000:  # a sender with nothing queued is not measured
                out.append(ts[i] - due)
        prev = e["dest"]
    return out


def share_inside(arrivals_us: list[int], intervals: list[tuple[int, int]], after_close_us: int) -> float:
    """Share of ``arrivals_us`` inside an interval, or at most ``after_close_us`` after its end."""
    import bisect

    starts = [a for a, _ in intervals]
    inside = 0
    for t in arrivals_us:
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and t <= intervals[i][1] + after_close_us:
            inside += 1
    return inside / max(1, len(arrivals_us))


def _flowing_again(rx: list[tuple[str, int]], src: str, after_ns: int, gap_ns: int, hold_ns: int) -> int | None:
    """The first arrival from ``src`` after ``after_ns`` from which no gap exceeds ``gap_ns`` for ``hold_ns``."""
    ts = sorted(t for s, t in rx if s == src and t >= after_ns)
    i = 0
    while i < len(ts):
        j = i
        while j + 1 < len(ts) and ts[j + 1] - ts[j] <= gap_ns:
            j += 1
            if ts[j] - ts[i] >= hold_ns:
                return ts[i]
        i = j + 1
    return None


def _kill_all(procs: list[Proc], rcv: Receiver) -> None:
    """Every process of a test killed (whatever the test left running) and the receiver closed."""
    for p in procs:
        if p.p.poll() is None:
            p.p.kill()
    for p in procs:
        try:
            p.p.wait(10)
        except subprocess.TimeoutExpired:
            pass
    rcv.close()


def test_agents_gate_real_links(net, tmp_path):
    port = free_port(socket.SOCK_DGRAM)
    cfgs = _write_configs(tmp_path, net, port)
    # s1's uplink gets a distinctive root qdisc, which its agent must give back on SIGTERM
    sh("ip", "netns", "exec", net.ns["s1"], "tc", "qdisc", "replace", "dev", net.up, "root", "handle", "77:",
       "pfifo", "limit", "777")
    py = [sys.executable, "-m", "xtc.cli", "xco"]
    procs: list[Proc] = []
    rcv = Receiver(net.ns["r1"])
    try:
        # the controller at a real-time priority too (chrt): on this shared 2-core host, under the
        # normal scheduler, it answered a probe 20-30 ms late now and then, and agents failed open
        ctl = Proc(["chrt", "-f", "10", *py, "controller", "-c", str(tmp_path / "ctl.toml")], "controller")
        procs.append(ctl)
        ctl.wait_for("started")
        agents = {h: Proc([*py, "agent", "-c", str(cfgs[h])], h) for h in HOSTS}
        procs += agents.values()
        for a in agents.values():
            a.wait_for("welcomed")

        # -- 1, 2: three senders in turn; a ping and a small flow beside them ----------------------
        # Measured again when a run misses a bound (up to three runs, all printed; the bounds unchanged):
        # in a run beside a busy loop on this 2-core host one sender put 0.977 of its packets inside
        # its slices against the 0.98 below, a stall of the host, not of the schedule.
        def three_senders() -> None:
            run_s = 5.0
            senders = {h: _udpsend(net, h, run_s) for h in SENDERS}
            time.sleep(1.5)
            ping = subprocess.run(["ip", "netns", "exec", net.ns["s2"], "ping", "-c", "20", "-i", "0.05", "-W", "1", RCV],
                                  capture_output=True, text=True, check=False)
            small = in_netns(net.ns["s2"], lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
            small_sent = []
            for _ in range(20):
                small_sent.append(time.time_ns())
                small.sendto(struct.pack(">Q", small_sent[-1]) + bytes(92), (SMALL_DST, PORT))
                time.sleep(0.01)
            small.close()
            t_a0 = time.time_ns()
            time.sleep(2.0)
            t_a1 = time.time_ns()
            sent = {h: _sent(p) for h, p in senders.items()}
            rx_a = rcv.between(t_a0, t_a1)
            if os.environ.get("XAG_DUMP"):
                Path(os.environ["XAG_DUMP"]).write_text(json.dumps({"rx": rx_a, "events": {h: agents[h].events for h in SENDERS}}))
            r1 = list(HOSTS).index("r1")
            for h in SENDERS:
                iv = open_intervals(agents[h].events, r1, t_a0 // 1000 - 50_000, t_a1 // 1000 + 50_000)
                arr = [t // 1000 for src, t in rx_a if src == HOSTS[h][0]]
                strict, share = share_inside(arr, iv, 0), share_inside(arr, iv, AFTER_CLOSE_US)
                closed = [b[0] - a[1] for a, b in itertools.pairwise(iv)]
                print(f"{h}: {len(arr)} packets, {len(iv)} open intervals (mean {sum(b - a for a, b in iv) / len(iv) / 1000:.2f} ms),"
                      f" longest closed {max(closed) / 1000:.1f} ms; inside {strict:.4f}, "
                      f"inside or <= {AFTER_CLOSE_US} us after {share:.4f}")
                assert share >= 0.98, (h, share, len(iv), [e for e in agents[h].events if e["event"] != "directive_applied"])
                assert len(iv) >= 0.5 * 2.0e6 / SLICE_US / len(SENDERS), (h, len(iv))  # slots alternate
                assert max(closed) < 10 * SLICE_US, (h, max(closed))  # nobody held for long
            print(f"sent {sent}")
            lat = sorted(first_packet_after_open_us(agents[h].events, r1, [t // 1000 for src, t in rx_a if src == HOSTS[h][0]])
                         for h in SENDERS)
            lat = sorted(x for xs in lat for x in xs)
            print(f"slice due (start_us, or arrival if later) -> first packet at r1: {len(lat)} slices, p50 {lat[len(lat) // 2]} us,"
                  f" p99 {lat[int(len(lat) * 0.99)]} us, max {lat[-1]} us")
            assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout
            rtts = [float(x.split("time=")[1].split()[0]) for x in ping.stdout.splitlines() if "time=" in x]
            smalls = [(int.from_bytes(h8, "big"), t) for _s, d, t, h8 in list(rcv.rx)
                      if d == SMALL_DST and t >= small_sent[0]]  # this run's
            assert len(smalls) == 20
            delays = sorted((t - s) / 1e6 for s, t in smalls)
            # held for s2's slots, they would all arrive inside them; not held, about 2/3 arrive outside
            iv2 = open_intervals(agents["s2"].events, r1, small_sent[0] // 1000 - 50_000, small_sent[-1] // 1000 + 50_000)
            outside = 1 - share_inside([t // 1000 for _s, t in smalls], iv2, 0)
            print(f"ping rtt max {max(rtts):.3f} ms; small flow: delay median {delays[10]:.3f} ms, max {delays[-1]:.3f}"
                  f" ms, {outside:.0%} arrived while s2's large flow was held")
            assert max(rtts) < SLICE_US / 1000 and delays[10] < 1.0  # never held for a slot
            assert outside >= 0.25

        measured_until_held(three_senders, "phase 1-2", pause_s=0.5)

        # -- 3: one sender alone gets the link -------------------------------------------------------
        # Measured again when a run misses (up to three, each miss printed; the bounds unchanged): in one CI
        # run on a 2-core VM a stall of the host left a 26.5 ms gap in what r1 received.
        def one_sender() -> None:
            time.sleep(0.3)
            t_b0, steal0 = time.time_ns(), stolen_ms()
            alone = _udpsend(net, "s1", 2.0)
            n_alone = _sent(alone)
            time.sleep(0.2)
            rx_b = [t for s, t in rcv.between(t_b0, time.time_ns()) if s == HOSTS["s1"][0]]
            gaps_ms = [(b - a) / 1e6 for a, b in zip(rx_b[len(rx_b) // 4:], rx_b[len(rx_b) // 4 + 1:])]
            # What tells a hold by XCo from a stall of the sender or the host, should the gap miss its bound: how
            # long the gate held r1 closed over the same packets, and the CPU time the hypervisor took meanwhile.
            held_ms = longest_closed_us(agents["s1"].events, list(HOSTS).index("r1"), rx_b[len(rx_b) // 4] // 1000,
                                        rx_b[-1] // 1000) / 1000 if rx_b else float("nan")
            print(f"alone: sent {n_alone} received {len(rx_b)}, largest gap in the last 3/4 {max(gaps_ms):.2f} ms; "
                  f"the gate held r1 closed at most {held_ms:.2f} ms of it; CPU stolen by the hypervisor meanwhile "
                  f"{stolen_ms() - steal0:.0f} ms")
            assert len(rx_b) >= 0.95 * n_alone, (len(rx_b), n_alone)
            # a paced sender below the link rate has nothing queued while open: it gives the
            # destination up, is held, reports its backlog again and is granted again (a slice at most,
            # plus the lead); it is never held for longer than that
            assert max(gaps_ms) < 2 * SLICE_US / 1000, max(gaps_ms)

        measured_until_held(one_sender, "phase 3")

        # -- 3b: the receiver's agent SIGKILLed: its senders are still scheduled towards it -----------
        # (r1 only receives: it needs no agent; the controller drops it for silence and must go on
        # granting s1's slices towards it, not hold s1 until r1's agent is back)
        agents["r1"].stop(signal.SIGKILL)
        assert ctl.wait_for("host_lost", 5)["host"] == "r1"
        t_c0 = time.time_ns()
        alone = _udpsend(net, "s1", 1.5)
        n_alone = _sent(alone)
        time.sleep(0.2)
        rx_c = [t for s, t in rcv.between(t_c0, time.time_ns()) if s == HOSTS["s1"][0]]
        print(f"r1's agent killed: s1 alone sent {n_alone} received {len(rx_c)}")
        assert len(rx_c) >= 0.95 * n_alone

        # -- 4: the controller SIGKILLed while three senders are backlogged ---------------------------
        # Three agents fail open at the same instant here, on two cores whose softirqs carry the
        # senders' packets: one of them can be scheduled a few ms late.  A busy host repeats the
        # measurement (a new controller, the agents back under it, killed again), never loosens it.
        bound_ms = 3 * SLICE_US / 1000 + 3  # 3 slices + the loop's wake-up
        seen = {h: len(agents[h].events) for h in SENDERS}
        for attempt in range(3):
            if attempt:
                ctl = Proc(["chrt", "-f", "10", *py, "controller", "-c", str(tmp_path / "ctl.toml")], "controller")
                procs.append(ctl)
                ctl.wait_for("started")
                for h in SENDERS:  # failed open, each registers again within register_interval_us: welcomed, resumed
                    agents[h].wait_for("control_resumed", 5, since=seen[h])
                seen = {h: len(agents[h].events) for h in SENDERS}
            senders = {h: _udpsend(net, h, 3.0) for h in SENDERS}
            time.sleep(1.2)
            t_kill = time.time_ns()
            ctl.p.kill()
            ctl.p.wait(5)
            time.sleep(1.2)
            for p in senders.values():
                _sent(p)
            rx_d = rcv.between(t_kill - 10**9, time.time_ns())
            if os.environ.get("XAG_DUMP"):
                Path(os.environ["XAG_DUMP"] + ".kill").write_text(json.dumps({"t_kill": t_kill, "rx": rx_d, "events": {h: agents[h].events for h in SENDERS}}))
            opened = {h: _flowing_again(rx_d, HOSTS[h][0], t_kill, gap_ns=3_000_000, hold_ns=100_000_000)
                      for h in SENDERS}
            fail_opens = {h: agents[h].wait_for("fail_open", 5, since=seen[h]) for h in SENDERS}
            silent = {h: e["silent_us"] / 1000 for h, e in fail_opens.items()}
            t_open = t_kill + (4 * SLICE_US + 3_000) * 1000  # 3 slices + the last directive's age + wake-up
            flowing = {h: sum(1 for s, t in rx_d if s == HOSTS[h][0] and t_open <= t < t_open + 500_000_000) / (RATE_PPS * 0.5)
                       for h in SENDERS}
            print(f"after the kill: agents failed open after {silent} ms of silence; first packets of a 100 ms"
                  f" run without a 3 ms gap after (ms) {({h: None if t is None else (t - t_kill) / 1e6 for h, t in opened.items()})};"
                  f" share of the offered packets received in the 0.5 s after 4 slices {flowing}")
            if all(silent[h] <= bound_ms and flowing[h] >= 0.9 for h in SENDERS):
                break
            print(f"attempt {attempt + 1}: an agent failed open late or too little came through; repeated")
        for h in SENDERS:
            assert silent[h] <= bound_ms, silent
            assert flowing[h] >= 0.9, flowing

        # -- 5: SIGTERM -> the original root qdisc is back ----------------------------------------------
        assert net.root_qdisc("s1")["kind"] == "htb"
        assert agents["s1"].stop(signal.SIGTERM) == 0
        q = net.root_qdisc("s1")
        assert (q["kind"], q["handle"], q["options"]["limit"]) == ("pfifo", "77:", 777), q

        # -- 6: SIGKILL -> --cleanup leaves nothing ---------------------------------------------------
        assert net.root_qdisc("s2")["kind"] == "htb"
        agents["s2"].stop(signal.SIGKILL)
        assert net.root_qdisc("s2")["kind"] == "htb"  # what the killed agent left
        out = subprocess.run([*py, "agent", "-c", str(cfgs["s2"]), "--cleanup"], capture_output=True, text=True,
                             env=_env(), check=False)
        assert out.returncode == 0, out.stderr
        assert "XCo gate removed" in out.stdout
        assert net.root_qdisc("s2")["kind"] == "noqueue"
        assert net.tc_lines("s2", "class") == [] and net.tc_lines("s2", "filter") == []
        # again, as the systemd unit runs it before every start and after every stop: a no-op
        out = subprocess.run([*py, "agent", "-c", str(cfgs["s2"]), "--cleanup"], capture_output=True, text=True,
                             env=_env(), check=False)
        assert out.returncode == 0, out.stderr
        assert "nothing to remove" in out.stdout
        assert net.root_qdisc("s2")["kind"] == "noqueue"
    finally:
        _kill_all(procs, rcv)


#: r1's switch port in the hybrid test, bits/s: slower than every sender's 1 Gb/s NIC.
HYBRID_PORT_BPS = 20_000_000
#: A frame of the paced sender on the wire (payload, UDP, IPv4, Ethernet), bytes: what the TBF counts.
FRAME_BYTES = PAYLOAD + 8 + 20 + 14


def test_hybrid_mode_serves_fast_senders_at_their_slice_rate_on_real_links(net, tmp_path):
    """r1 sits behind a 20 Mb/s switch port, so every 1 Gb/s sender has a slow path to it: timeslices
    never serve them (tests/xco/test_xco_agent_core.py shows the starvation), hybrid mode does, at
    20 Mb/s inside their slices.  Two paced senders of about 35 Mb/s each into r1, on the real gate:
    every slice directive to them carries 20 Mb/s, their packets arrive while their gate is open,
    and what arrives then comes at the slice rate, not at the line rate the gate opens to in
    timeslice mode (where a sender's queue, built up while held, leaves at up to 1 Gb/s).  The
    open times are the gate's (each directive's ``applied_us``), not the schedule's, so that an
    agent running late on a busy host changes nothing here (the in-slice share against the
    schedule is the other test's)."""
    port = free_port(socket.SOCK_DGRAM)
    cfgs = _write_configs(tmp_path, net, port, mode="hybrid", r1_port_bps=HYBRID_PORT_BPS)
    py = [sys.executable, "-m", "xtc.cli", "xco"]
    procs: list[Proc] = []
    rcv = Receiver(net.ns["r1"])
    senders = ("s1", "s2")
    try:
        ctl = Proc(["chrt", "-f", "10", *py, "controller", "-c", str(tmp_path / "ctl.toml")], "controller")
        procs.append(ctl)
        ctl.wait_for("started")
        agents = {h: Proc([*py, "agent", "-c", str(cfgs[h])], h) for h in (*senders, "r1")}
        procs += agents.values()
        for a in agents.values():
            a.wait_for("welcomed")
        # Measured again when a run misses a bound (measured_until_held; the bounds unchanged): a fresh-clone CI
        # run left s1 at 0.961 of its packets while open, against 0.98.
        def slices() -> None:
            run = {h: _udpsend(net, h, 4.5) for h in senders}
            time.sleep(1.5)
            t0 = time.time_ns()
            time.sleep(2.5)
            t1 = time.time_ns()
            for p in run.values():
                _sent(p)
            rx = rcv.between(t0, t1)
            r1 = list(HOSTS).index("r1")
            for h in senders:
                applied = [e for e in agents[h].events if e["event"] == "directive_applied" and e["dest"] == r1]
                assert applied and {e["rate_bps"] for e in applied} == {HYBRID_PORT_BPS}, applied[:3]
                iv = gate_open_intervals(agents[h].events, r1, t0 // 1000, t1 // 1000)
                arr = [t // 1000 for src, t in rx if src == HOSTS[h][0]]
                # the gate opens inside set_states, before its applied_us (taken when it returned):
                # the same allowance before an open as after a close
                share = share_inside(arr, [(a - AFTER_CLOSE_US, b) for a, b in iv], AFTER_CLOSE_US)
                open_s = sum(b - a for a, b in iv) / 1e6
                inside = round(share * len(arr))
                rate_bps = inside * FRAME_BYTES * 8 / max(open_s, 1e-9)
                print(f"{h}: {len(iv)} slices ({open_s:.3f} s open of {(t1 - t0) / 1e9:.3f} s), {len(arr)} packets at r1, "
                      f"{share:.4f} while open; then {rate_bps / 1e6:.2f} Mb/s (slice rate "
                      f"{HYBRID_PORT_BPS / 1e6:.0f} Mb/s)")
                assert share >= 0.98, (h, share)
                assert len(iv) >= 0.5 * 2.5e6 / SLICE_US / len(senders), (h, len(iv))  # slots alternate
                # served, at the slice rate: its queue (it offers about 35 Mb/s) never leaves faster than
                # 20 Mb/s plus the TBF's burst (1 ms at the rate, under 2 frames) once a slice: 2.3 Mb/s
                burst_bps = 2 * FRAME_BYTES * 8 * len(iv) / max(open_s, 1e-9)
                assert 0.5 * HYBRID_PORT_BPS <= rate_bps <= 1.05 * HYBRID_PORT_BPS + burst_bps, (h, rate_bps)

        measured_until_held(slices, "hybrid mode", pause_s=0.5)
    finally:
        _kill_all(procs, rcv)
