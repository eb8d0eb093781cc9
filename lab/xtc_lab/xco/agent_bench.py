"""Cost and timing of the XCo agent on the real gate: ``python -m xtc_lab.xco.agent_bench``.

Builds two namespaces joined by a veth (addresses 198.18.23.0/24), writes a topology with 8 VMs on
the agent's host and 8 other hosts of one VM each (64 flows, 8 destination hosts: the gate's 8
classes), starts ``xtc xco agent -c`` as a process on the veth (its gate in the namespace), and
plays the controller in this process: a welcome, then every slice a timeslice directive towards
the next host in turn (one destination opens, one closes: 8 flows each), sent ``lead_us`` ahead,
and an ack for every heartbeat.  One datagram per flow is sent first so that every destination is
large (``small_flow_bytes = 0``).  Prints one JSON object:

- ``agent_cpu_percent``: the agent process's user+system time over the run, % of one core;
- ``directive_to_gate_us``: p50/p99/max from the agent's ``directive_applied`` events (from the
  directive's ``start_us``, or its arrival if later, to ``set_states`` returning), measured in a
  second run at log level debug (the events cost CPU of their own);
- ``add_flow_ms``: the set-up at start, measured here in-process: each of the 8 destinations'
  class (``TcGate.add_dest``) and each of the 64 flows' filter (``TcGate.add_flow``);
- ``gate_calls_us`` (with ``--gate-calls``): the gate's calls alone, in this process: a timeslice
  turn every 2 ms for 400 turns (``set_states`` closing one destination and opening the next,
  then ``counters``), p50 of each call's thread CPU time (``time.thread_time_ns``), us;
- ``in_process`` (with ``--sections``): the agent's loop run in a thread of this process (same
  configuration, ``poll_us`` the last of ``--poll-us``), each section's thread CPU time
  (``time.thread_time_ns``) summed: ``gate.counters``, ``gate.quiet`` (the probe before a dump),
  ``gate.set_states``, ``core.handle``
  (decode, checks, and the directive when already due), ``core.tick`` outside ``handle``,
  ``core.observe_counters``, ``core.observe_quiet``, and ``other`` (the loop's own Python, ``select``, socket reads and
  clock reads: the thread's total CPU minus the sections), in % of a core and us per slice;
- ``floor`` (with ``--floor``): the least an agent can cost here, ``agent_floor.c`` (built with the
  system's C compiler) on the same gate: per slice it sleeps until the directive arrives, reads it,
  sleeps until the slice's start, sends the gate's own batch of TBF changes (one destination closes,
  the next opens), the wake frame and a drain frame, and reads the root's counters (the quiet
  probe): the agent's system calls and wake-ups with no Python, no decoding and no decisions.
  ``cpu_percent`` and ``us_per_slice`` of that process (getrusage), wake-ups per slice, late starts.

Needs root and iproute2.  Everything is removed at the end.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from xtc.xco import protocol as P

NET = "198.18.23"
N_LOCAL, N_REMOTE = 8, 8


def _sh(*args: str) -> str:
    return subprocess.run(list(args), check=True, capture_output=True, text=True).stdout


def _topology() -> str:
    lines = ['schema = "xco-topology/1"', "[[switch]]", 'name = "sw"', "[[host]]", 'name = "h0"',
             "nic_bps = 1_000_000_000", 'switch = "sw"',
             "vms = " + json.dumps([f"{NET}.{1 + k}" for k in range(N_LOCAL)])]
    for i in range(1, N_REMOTE + 1):
        lines += ["[[host]]", f'name = "h{i}"', "nic_bps = 1_000_000_000", 'switch = "sw"',
                  f'vms = ["{NET}.{100 + i}"]']
    return "\n".join(lines) + "\n"


class FakeController:
    """Welcome, one directive per slice to the next host in turn, an ack per heartbeat holding
    the destinations reported backlogged and not given up (as the controller's acks do)."""

    def __init__(self, slice_us: int, lead_us: int, priority: int = 0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.0005)
        self.port = self.sock.getsockname()[1]
        self.slice_us, self.lead_us = slice_us, lead_us
        self.session = secrets.randbits(32)
        self.seq = 0
        self.addr: tuple[str, int] | None = None
        self.stop = False
        self.directives = 0
        self.held: set[int] = set()
        self.priority = priority
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def _send(self, make: Any, **kw: Any) -> None:
        self.seq += 1
        assert self.addr is not None
        self.sock.sendto(P.encode(make(P.Header(0, self.session, self.seq, time.time_ns() // 1000), **kw)), self.addr)

    def run(self) -> None:
        if self.priority:  # as the testbed runs its controller (chrt -f): on a loaded host a
            # controller thread at the normal priority falls behind and the agent fails open
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.priority))
        next_start = None
        k = 0
        while not self.stop:
            try:
                data, addr = self.sock.recvfrom(9000)
                m = P.decode(data)
                if isinstance(m, P.Register):
                    self.addr = addr
                    self._send(P.Welcome, slice_us=self.slice_us, mode="timeslice", heartbeat_interval_us=100_000)
                elif isinstance(m, P.Heartbeat):
                    self._send(P.Ack, seq=m.header.seq, backlog=tuple(sorted(self.held)))
                elif isinstance(m, P.Backlog):
                    self.held.update(m.dests)
                elif isinstance(m, P.GiveUp):
                    self.held.discard(m.dest)
            except (TimeoutError, BlockingIOError):
                pass
            if self.addr is None:
                continue
            now = time.time_ns() // 1000
            if next_start is None:
                next_start = (now // self.slice_us + 2) * self.slice_us
            if now >= next_start - self.lead_us:
                k += 1
                self._send(P.Directive, dest=1 + k % N_REMOTE, start_us=next_start, length_us=self.slice_us)
                self.directives += 1
                next_start += self.slice_us


def _cpu_s(pid: int, tid: str | None = None, which: tuple[int, ...] = (11, 12)) -> float:
    """User + system (``which``: 11 user, 12 system) CPU seconds of a process or one of its threads."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    f = Path(path).read_text().rsplit(")", 1)[1].split()
    return sum(int(f[k]) for k in which) / os.sysconf("SC_CLK_TCK")


def run_once(tmp: Path, ns: str, slice_us: int, poll_us: int, seconds: float, level: str,
             priority: int, giveup_quiet_us: int = 0, close_guard_us: int = 0) -> dict[str, Any]:
    """One agent process against the fake controller.  ``giveup_quiet_us``: the agent's (0 = off, its
    default); this bench sends no traffic, so no destination is reported and the rule never arms:
    it measures what the rule costs an agent that has nothing to give up."""
    ctl = FakeController(slice_us, lead_us=500, priority=priority)
    cfg = tmp / f"agent-{level}.toml"
    cfg.write_text(f'schema = "xco-agent/1"\ntopology = "topo.toml"\nhost = "h0"\nuplink = "xb0"\nnetns = "{ns}"\n'
                   f'controller = "127.0.0.1:{ctl.port}"\nbind = "127.0.0.1:0"\nsmall_flow_bytes = 0\n'
                   f'poll_us = {poll_us}\ngiveup_quiet_us = {giveup_quiet_us}\nclose_guard_us = {close_guard_us}\n'
                   f'realtime_priority = {priority}\n[metrics]\nenabled = false\n'
                   f'[log]\nlevel = "{level}"\n')
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))  # the checkout (lab/xtc_lab/xco)
    prof = ["-m", "cProfile", "-o", os.environ["XAB_PROFILE"]] if os.environ.get("XAB_PROFILE") else []
    p = subprocess.Popen([sys.executable, *prof, "-m", "xtc.cli", "xco", "agent", "-c", str(cfg)],
                         stderr=subprocess.PIPE, text=True, env=env)
    events: list[dict[str, Any]] = []

    def read() -> None:
        assert p.stderr is not None
        for line in p.stderr:
            if line.startswith("{"):
                events.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while ctl.addr is None or ctl.directives < 20:
            if time.monotonic() > deadline or p.poll() is not None:
                raise RuntimeError(f"agent did not start: {events[-3:]}")
            time.sleep(0.05)
        _prime(ns)  # the gate is installed once the agent registered
        time.sleep(0.5)
        c0, t0, s0 = _cpu_s(p.pid), time.monotonic(), _cpu_s(p.pid, None, (12,))
        th0 = {t: _cpu_s(p.pid, t) for t in os.listdir(f"/proc/{p.pid}/task")}
        time.sleep(seconds)
        c1, t1, s1 = _cpu_s(p.pid), time.monotonic(), _cpu_s(p.pid, None, (12,))
        th1 = {t: _cpu_s(p.pid, t) for t in os.listdir(f"/proc/{p.pid}/task")}
        threads = {t: round(100 * (th1[t] - th0.get(t, 0)) / (t1 - t0), 2) for t in th1}
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(20)
        reader.join(5)
        ctl.stop = True
        ctl.t.join(5)
        ctl.sock.close()
    lat = sorted(e["applied_us"] - max(e["start_us"], e["arrival_us"]) for e in events
                 if e["event"] == "directive_applied")
    out: dict[str, Any] = {"cpu_percent": round(100 * (c1 - c0) / (t1 - t0), 2), "directives": ctl.directives,
                           "system_cpu_percent": round(100 * (s1 - s0) / (t1 - t0), 2),
                           "threads_cpu_percent": threads,
                           "fail_opens": sum(1 for e in events if e["event"] == "fail_open")}
    if lat:
        out["directive_to_gate_us"] = {"p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)], "max": lat[-1],
                                       "n": len(lat)}
    return out


class _Timed:
    """Wraps methods of an object to sum the calling thread's CPU time in them (ns), by name."""

    def __init__(self, sums: dict[str, int], depth: list[int]) -> None:
        self.sums, self.depth = sums, depth

    def wrap(self, obj: Any, method: str, name: str, nested_only_outside: bool = False) -> None:
        fn = getattr(obj, method)
        sums, depth, clock = self.sums, self.depth, time.thread_time_ns
        sums.setdefault(name, 0)

        def timed(*a: Any, **k: Any) -> Any:
            if nested_only_outside and depth[0]:
                return fn(*a, **k)
            depth[0] += 1
            t = clock()
            try:
                return fn(*a, **k)
            finally:
                sums[name] += clock() - t
                depth[0] -= 1

        setattr(obj, method, timed)


def run_sections(tmp: Path, ns: str, slice_us: int, poll_us: int, seconds: float, priority: int,
                 giveup_quiet_us: int = 0, close_guard_us: int = 0) -> dict[str, Any]:
    """The agent's loop in a thread of this process, its sections timed (see the module docstring)."""
    from xtc.host.tcgate import TcGate
    from xtc.xco.agent_config import load_agent_config
    from xtc.xco.agent_service import AgentService

    ctl = FakeController(slice_us, lead_us=500, priority=priority)
    cfg_path = tmp / "agent-sections.toml"
    cfg_path.write_text(f'schema = "xco-agent/1"\ntopology = "topo.toml"\nhost = "h0"\nuplink = "xb0"\n'
                        f'netns = "{ns}"\ncontroller = "127.0.0.1:{ctl.port}"\nbind = "127.0.0.1:0"\n'
                        f'small_flow_bytes = 0\npoll_us = {poll_us}\ngiveup_quiet_us = {giveup_quiet_us}\n'
                        f'close_guard_us = {close_guard_us}\n[metrics]\nenabled = false\n')
    cfg = load_agent_config(cfg_path)
    svc = AgentService(cfg, TcGate("xb0", link_bps=1_000_000_000, netns=ns))
    sums: dict[str, int] = {}
    depth = [0]
    t = _Timed(sums, depth)
    t.wrap(svc.gate, "counters", "gate.counters")
    if hasattr(svc.gate, "quiet"):  # the probe before a dump (absent before 2026-11-22 night)
        t.wrap(svc.gate, "quiet", "gate.quiet")
        svc._quiet = svc.gate.quiet
        t.wrap(svc.core, "observe_quiet", "core.observe_quiet", nested_only_outside=True)
    t.wrap(svc.gate, "set_states", "gate.set_states")
    t.wrap(svc.core, "handle", "core.handle", nested_only_outside=True)
    t.wrap(svc.core, "observe_counters", "core.observe_counters", nested_only_outside=True)
    t.wrap(svc.core, "tick", "core.tick (outside handle)", nested_only_outside=True)
    tid: list[int] = []

    def body() -> None:
        tid.append(threading.get_native_id())
        if priority:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        svc.loop()

    svc.open()
    th = threading.Thread(target=body, daemon=True)
    th.start()
    try:
        deadline = time.monotonic() + 60
        while ctl.addr is None or ctl.directives < 20:
            if time.monotonic() > deadline:
                raise RuntimeError("agent (in-process) did not start")
            time.sleep(0.05)
        _prime(ns)
        time.sleep(0.5)
        pid = os.getpid()
        s0, c0, d0, w0 = dict(sums), _cpu_s(pid, str(tid[0])), ctl.directives, time.monotonic()
        time.sleep(seconds)
        s1, c1, d1, w1 = dict(sums), _cpu_s(pid, str(tid[0])), ctl.directives, time.monotonic()
    finally:
        svc.stop = True
        th.join(10)
        svc.close()
        ctl.stop = True
        ctl.t.join(5)
        ctl.sock.close()
    wall_s, slices = w1 - w0, max(1, d1 - d0)
    secs = {k: (s1[k] - s0.get(k, 0)) / 1e9 for k in s1}
    secs["other"] = max(0.0, (c1 - c0) - sum(secs.values()))
    return {"poll_us": poll_us, "fail_opens": svc.core.fail_opens, "polls": svc.polls,
            "quiet_polls": getattr(svc, "quiet_polls", 0),
            "thread_cpu_percent": round(100 * (c1 - c0) / wall_s, 2), "slices": slices,
            "sections_percent": {k: round(100 * v / wall_s, 2) for k, v in secs.items()},
            "sections_us_per_slice": {k: round(1e6 * v / slices, 1) for k, v in secs.items()}}


def _prime(ns: str) -> None:
    """One datagram on every flow, so that each is large."""
    from xtc.host.tcgate import in_netns

    for k in range(N_LOCAL):
        s = in_netns(ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        s.bind((f"{NET}.{1 + k}", 0))
        for i in range(1, N_REMOTE + 1):
            s.sendto(b"x" * 64, (f"{NET}.{100 + i}", 9))
        s.close()


def _full_gate(ns: str) -> Any:
    """A TcGate on ``xb0`` in ``ns``, installed, with the 8 destinations CLOSED and the 64 flows
    in their destinations' classes (the caller restores and closes it)."""
    from xtc.host.tcgate import TcGate
    from xtc.host.gate import CLOSED, Flow

    g = TcGate("xb0", link_bps=1_000_000_000, netns=ns)
    g.install()
    try:
        for i in range(1, N_REMOTE + 1):
            g.add_dest(i, CLOSED)
        for k in range(N_LOCAL):
            for i in range(1, N_REMOTE + 1):
                f = Flow(ipaddress.ip_address(f"{NET}.{1 + k}"), ipaddress.ip_address(f"{NET}.{100 + i}"), i)
                g.add_flow(f)
                g.move_to_dest(f)
    except BaseException:
        g.restore()
        g.close()
        raise
    return g


def _gate_calls_us(ns: str, turns: int = 400) -> dict[str, float]:
    from xtc.host.gate import CLOSED, OPEN

    g = _full_gate(ns)
    try:
        dests = tuple(range(1, N_REMOTE + 1))
        turn, read = [], []
        for n in range(turns):
            d = dests[n % len(dests)]
            states = {dests[n % len(dests) - 1]: CLOSED, d: OPEN} if n else {d: OPEN}
            t = time.thread_time_ns()
            g.set_states(states)
            turn.append(time.thread_time_ns() - t)
            t = time.thread_time_ns()
            g.counters(dests, ())
            read.append(time.thread_time_ns() - t)
            time.sleep(0.002)
        return {"set_states_turn_p50": sorted(turn)[turns // 2] / 1e3, "counters_p50": sorted(read)[turns // 2] / 1e3}
    finally:
        g.restore()
        g.close()


def run_floor(ns: str, slice_us: int, seconds: float, priority: int, skip: str = "") -> dict[str, Any]:
    """The C reference of the agent's hot path (module docstring, ``floor``) on a gate of 8
    destinations and 64 flows in ``ns``, directives from :class:`FakeController`; ``skip``: the
    steps left out (``FLOOR_SKIP`` of agent_floor.c)."""
    import struct as st

    from xtc.host.gate import CLOSED, OPEN
    from xtc_lab.lab.build import build_program

    prog = build_program(Path(__file__).with_name("agent_floor.c"))
    g = _full_gate(ns)
    try:
        dests = tuple(range(1, N_REMOTE + 1))
        g.set_states({dests[0]: OPEN})
        parts = [st.pack("=I", N_REMOTE)]
        for n in range(1, N_REMOTE + 1):  # the turns of one round: close the last, open the next
            states = {dests[n - 1]: CLOSED, dests[n % N_REMOTE]: OPEN}
            g.set_states(states)
            plan = g._plans[tuple(states.items())]
            parts += [st.pack("=II", len(plan.batch), len(plan.offsets)), st.pack(f"={len(plan.offsets)}I", *plan.offsets),
                      bytes(plan.batch)]
        g.quiet()
        assert g._get_root is not None
        parts += [st.pack("=I", len(g._get_root)), bytes(g._get_root), st.pack("=I", len(g._wake)), g._wake]
        with tempfile.NamedTemporaryFile(suffix=".bin") as msgs:
            msgs.write(b"".join(parts))
            msgs.flush()
            ctl = FakeController(slice_us, 1000, priority)  # its thread polls every 0.5 ms: a lead that it keeps
            argv = [str(prog), "0", f"/run/netns/{ns}", str(g.ifindex), msgs.name, str(seconds)]
            if priority:
                argv = ["chrt", "-f", str(priority), *argv]
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=dict(os.environ, FLOOR_SKIP=skip))
            assert p.stdout is not None
            first = p.stdout.readline()  # {"port": N} once its socket is bound
            if first:
                ctl.addr = ("127.0.0.1", int(json.loads(first)["port"]))
            out, err = p.communicate(timeout=seconds + 30)
            ctl.stop = True
            ctl.t.join(2)
            ctl.sock.close()
        if p.returncode != 0:
            raise RuntimeError(f"agent_floor exited {p.returncode}: {err.strip()}")
        r = json.loads(out)
        slices = max(1, r["slices"])
        return {"cpu_percent": round(100 * r["cpu_s"] / r["seconds"], 2), "us_per_slice": round(1e6 * r["cpu_s"] / slices, 1),
                "slices": r["slices"], "wakeups_per_slice": round(r["wakeups"] / slices, 2), "late": r["late"],
                "ignored": r["ignored"],
                "directives_sent": ctl.directives}
    finally:
        g.restore()
        g.close()


def _add_flow_ms(ns: str) -> list[float]:
    from xtc.host.tcgate import TcGate
    from xtc.host.gate import Flow

    g = TcGate("xb0", link_bps=1_000_000_000, netns=ns)
    g.install()
    try:
        out = []
        for i in range(1, N_REMOTE + 1):
            t = time.perf_counter()
            g.add_dest(i)
            out.append((time.perf_counter() - t) * 1e3)
        for k in range(N_LOCAL):
            for i in range(1, N_REMOTE + 1):
                f = Flow(ipaddress.ip_address(f"{NET}.{1 + k}"), ipaddress.ip_address(f"{NET}.{100 + i}"), i)
                t = time.perf_counter()
                g.add_flow(f)
                out.append((time.perf_counter() - t) * 1e3)
        return sorted(out)
    finally:
        g.restore()
        g.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slice-us", type=int, default=2000)
    ap.add_argument("--poll-us", type=int, nargs="+", default=[500, 2000, 10000])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--giveup-quiet-us", type=int, default=0, help="the agent's giveup_quiet_us (0: off)")
    ap.add_argument("--close-guard-us", type=int, default=0, help="the agent's close_guard_us (0: off)")
    ap.add_argument("--realtime-priority", type=int, default=10)
    ap.add_argument("--sections", action="store_true", help="also time the loop's sections in-process")
    ap.add_argument("--gate-calls", action="store_true", help="also time the gate's calls alone")
    ap.add_argument("--floor", action="store_true", help="also run the C reference of the hot path (agent_floor.c)")
    ap.add_argument("--only-floor", action="store_true", help="run the C reference alone (no agent runs)")
    ap.add_argument("--floor-skip", nargs="*", default=[], metavar="STEPS",
                    help="also run the C reference without these steps (s: the sleep until the start, "
                         "n: the TBF changes, p: the frames, q: the counter probe; e.g. s nq snpq)")
    a = ap.parse_args(argv)
    tag = secrets.token_hex(3)
    ns, peer = f"xab{tag}-a", f"xab{tag}-b"
    result: dict[str, Any] = {"slice_us": a.slice_us, "flows": N_LOCAL * N_REMOTE, "dests": N_REMOTE,
                              "seconds": a.seconds, "giveup_quiet_us": a.giveup_quiet_us,
                              "close_guard_us": a.close_guard_us,
                              "realtime_priority": a.realtime_priority, "load_average": os.getloadavg()}
    try:
        for n in (ns, peer):
            _sh("ip", "netns", "add", n)
        _sh("ip", "-n", ns, "link", "add", "xb0", "type", "veth", "peer", "name", "xb1", "netns", peer)
        for k in range(N_LOCAL):
            _sh("ip", "-n", ns, "addr", "add", f"{NET}.{1 + k}/24", "dev", "xb0")
        for n, d in ((ns, "xb0"), (peer, "xb1")):
            _sh("ip", "-n", n, "link", "set", d, "up")
        mac = json.loads(_sh("ip", "-n", peer, "-j", "link", "show", "xb1"))[0]["address"]
        for i in range(1, N_REMOTE + 1):
            _sh("ip", "-n", ns, "neigh", "replace", f"{NET}.{100 + i}", "lladdr", mac, "dev", "xb0")
        if a.floor or a.only_floor:
            result["floor"] = run_floor(ns, a.slice_us, a.seconds, a.realtime_priority)
            for skip in a.floor_skip:
                result[f"floor_without_{skip}"] = run_floor(ns, a.slice_us, a.seconds, a.realtime_priority, skip)
            if a.only_floor:
                return 0
        if a.gate_calls:
            result["gate_calls_us"] = _gate_calls_us(ns)
        a_ms = _add_flow_ms(ns)
        result["add_flow_ms"] = {"p50": round(a_ms[len(a_ms) // 2], 3), "p99": round(a_ms[int(len(a_ms) * 0.99)], 3),
                                 "max": round(a_ms[-1], 3)}
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            (tmp / "topo.toml").write_text(_topology())
            runs = {}
            for poll in a.poll_us:
                runs[f"poll_{poll}us"] = run_once(tmp, ns, a.slice_us, poll, a.seconds, "info", a.realtime_priority,
                                                  a.giveup_quiet_us, a.close_guard_us)
            runs["latency_debug_log"] = run_once(tmp, ns, a.slice_us, a.poll_us[-1], a.seconds, "debug",
                                                 a.realtime_priority, a.giveup_quiet_us, a.close_guard_us)
            result["runs"] = runs
            if a.sections:
                result["in_process"] = run_sections(tmp, ns, a.slice_us, a.poll_us[-1], a.seconds,
                                                    a.realtime_priority, a.giveup_quiet_us, a.close_guard_us)
    finally:
        for n in (ns, peer):
            subprocess.run(["ip", "netns", "del", n], capture_output=True, check=False)
        result["load_average_end"] = os.getloadavg()
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
