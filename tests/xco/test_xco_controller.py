"""The XCo controller: its pure core, its configuration, and the service as a process on loopback
with hosts speaking the protocol (register, backlog, directives, heartbeat loss, restart)."""

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from configerrors import refused
from procs import free_port

from xtc.xco import protocol as P
from xtc.xco.controller import ControllerCore
from xtc.xco.controller_config import ControllerConfigError, loads_controller_config
from xtc.xco.topology import load_topology

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]
NOW = 1_700_000_000_003_000
SLICE = 10_000
LEAD = 500


def _core(**kw):
    p = DATA / "fig1a.toml"
    topo = load_topology(p)
    digest = P.topology_digest(p.read_bytes())
    return topo, digest, ControllerCore(topo, digest, NOW, slice_us=SLICE, lead_us=LEAD, **kw)


class Seq:
    def __init__(self):
        self.n = {}

    def __call__(self, x, t):
        self.n[x] = self.n.get(x, 0) + 1
        return P.Header(x, 100 + x, self.n[x], t)


def _register_all(core, topo, digest, seq, t=NOW):
    for x, name in enumerate(topo.hosts):
        out = core.handle(P.encode(P.Register(seq(x, t), digest, name, ())), ("127.0.0.1", 7000 + x), t)
        assert [type(P.decode(s.data)) for s in out] == [P.Welcome]


def test_core_sends_directives_a_lead_ahead_of_aligned_slots_and_rotates():
    topo, digest, core = _core()
    seq = Seq()
    _register_all(core, topo, digest, seq)
    r1 = topo.host_id("r1")
    got = []
    for x in range(5):
        got += core.handle(P.encode(P.Backlog(seq(x, NOW), (r1,))), ("127.0.0.1", 7000 + x), NOW)
    # The first sender is granted at once, from now + lead to the end of the wall-clock slot.
    (s,) = got
    d = P.decode(s.data)
    assert (s.host, d.dest, d.start_us, d.start_us + d.length_us) == (0, r1, NOW + LEAD, NOW - NOW % SLICE + SLICE)
    # Slot boundaries: the directives go out at boundary - lead, one sender per slot, in turn.
    senders = []
    t = NOW
    for _ in range(7):
        t = core.epoch_us + core.sched.next_expiry_us() - LEAD
        assert core.next_deadline_us() <= t
        out = [P.decode(s.data) for s in core.tick(t)]
        boundary = t + LEAD
        assert boundary % SLICE == 0
        grants = [m for m in out if m.dest is not None]
        assert len(grants) == 1 and grants[0].start_us == boundary and grants[0].length_us == SLICE
        assert all(m.header.t_us == t for m in out)
        senders.append(grants[0].header.host)
        for x in range(6):  # heartbeats keep everyone registered
            core.handle(P.encode(P.Heartbeat(seq(x, t))), ("127.0.0.1", 7000 + x), t)
    assert senders == [1, 2, 3, 4, 0, 1, 2]


def test_core_drops_a_silent_host_from_every_group():
    topo, digest, core = _core(heartbeat_interval_us=100_000, heartbeat_misses=3)
    seq = Seq()
    _register_all(core, topo, digest, seq)
    r1 = topo.host_id("r1")
    core.handle(P.encode(P.Backlog(seq(0, NOW), (r1,))), ("127.0.0.1", 7000), NOW)
    t = NOW + 250_000
    for x in range(5):  # everybody but r1 keeps talking
        core.handle(P.encode(P.Heartbeat(seq(x, t))), ("127.0.0.1", 7000 + x), t)
    t = NOW + 301_000 + 100_000
    out = []
    for x in range(5):
        out += core.handle(P.encode(P.Heartbeat(seq(x, t))), ("127.0.0.1", 7000 + x), t)
    assert r1 in core.hosts  # silence is judged by tick(), once every waiting datagram is read
    out += core.tick(t)
    assert r1 not in core.hosts
    assert ("host_lost", {"host": "r1"}) in core.notes
    assert core.backlog_of(0) == []
    holds = [P.decode(s.data) for s in out]
    assert any(isinstance(m, P.Directive) and m.header.host == 0 and m.dest is None for m in holds)
    # A backlog towards the lost host is scheduled again: its VMs receive whether its agent runs
    # or not, and its senders must not be held for want of it.
    out = core.handle(P.encode(P.Backlog(seq(0, t), (r1,))), ("127.0.0.1", 7000), t)
    assert core.backlog_of(0) == [r1] and sum(core.dropped.values()) == 0
    out += core.tick(t + SLICE)
    assert any(isinstance(m, P.Directive) and m.header.host == 0 and m.dest == r1
               for m in (P.decode(s.data) for s in out))


def test_core_numbers_the_messages_to_a_host_lost_and_registered_again_above_the_old_ones():
    """A host dropped for silence registers again in the same agent session: the welcome and what
    follows must carry sequence numbers above every one it has seen (an agent drops the others as
    replays: on the lab, a re-registered host ignored 46 messages for 4.6 s and its senders starved)."""
    topo, digest, core = _core(heartbeat_interval_us=100_000, heartbeat_misses=3)
    seq = Seq()
    _register_all(core, topo, digest, seq)
    r1 = topo.host_id("r1")
    seen = []
    t = NOW
    for k in range(20):  # r1 hears many acks; the senders keep the counter moving, too
        t = NOW + k * 10_000
        for x in range(6):
            out = core.handle(P.encode(P.Heartbeat(seq(x, t))), ("127.0.0.1", 7000 + x), t)
            if x == r1:
                seen += [P.decode(s.data).header.seq for s in out if s.host == r1]
    t += 400_000
    for x in range(5):
        core.handle(P.encode(P.Heartbeat(seq(x, t))), ("127.0.0.1", 7000 + x), t)
    core.tick(t)
    assert r1 not in core.hosts
    out = core.handle(P.encode(P.Register(seq(r1, t), digest, "r1", ())), ("127.0.0.1", 7000 + r1), t)
    (w,) = [P.decode(s.data) for s in out]
    assert isinstance(w, P.Welcome) and w.header.seq > max(seen)
    out = core.handle(P.encode(P.Heartbeat(seq(r1, t + 1))), ("127.0.0.1", 7000 + r1), t + 1)
    assert P.decode(out[0].data).header.seq > w.header.seq


def test_core_after_its_own_stall_reads_the_waiting_heartbeats_before_judging_silence():
    """The controller wakes 350 ms late (its own stall) with every host's heartbeat waiting in the
    socket: handling them first and ticking after (the service's order) loses nobody."""
    topo, digest, core = _core(heartbeat_interval_us=100_000, heartbeat_misses=3)
    seq = Seq()
    _register_all(core, topo, digest, seq)
    t = NOW + 350_000
    for x in range(6):
        core.handle(P.encode(P.Heartbeat(seq(x, t - 250_000))), ("127.0.0.1", 7000 + x), t)
    core.tick(t)
    assert set(core.hosts) == set(range(6)) and core.notes.count(("host_lost", {"host": "r1"})) == 0


def test_core_state_round_trip_keeps_hosts_backlogs_and_sequence_numbers():
    topo, digest, core = _core()
    seq = Seq()
    _register_all(core, topo, digest, seq)
    r1 = topo.host_id("r1")
    for x in range(3):
        core.handle(P.encode(P.Backlog(seq(x, NOW), (r1,))), ("127.0.0.1", 7000 + x), NOW)
    doc = json.loads(json.dumps(core.to_state()))
    _, _, new = _core()
    out = new.load_state(doc, NOW + 50_000)
    assert set(new.hosts) == set(core.hosts)
    assert [new.backlog_of(x) for x in range(6)] == [[r1]] * 3 + [[]] * 3
    assert [P.decode(s.data).dest for s in out] == [r1]
    # The old sequence numbers are still refused (replay across a restart).
    new.handle(P.encode(P.Heartbeat(P.Header(1, 101, 1, NOW + 50_000))), ("127.0.0.1", 7001), NOW + 50_000)
    assert new.dropped["replay"] == 1
    with pytest.raises(ValueError, match="another topology"):
        _core()[2].load_state(dict(doc, topology_digest="00" * 8), NOW)


def test_core_rate_mode_sends_one_datagram_per_host_with_its_flows():
    topo, digest, core = _core(mode="rate")
    seq = Seq()
    _register_all(core, topo, digest, seq)
    r1 = topo.host_id("r1")
    out = []
    for x in range(5):
        out = core.handle(P.encode(P.Backlog(seq(x, NOW), (r1,))), ("127.0.0.1", 7000 + x), NOW)
    msgs = [P.decode(s.data) for s in out]
    assert sorted(m.header.host for m in msgs) == [0, 1, 2, 3, 4]
    assert all(m.rates == ((r1, 200_000_000),) and m.start_us == NOW + LEAD for m in msgs)


def test_core_rate_mode_shares_the_configured_fraction_of_each_link(tmp_path):
    from xtc.xco.controller_service import ControllerService

    topo, digest, core = _core(mode="rate", rate_link_fraction=0.95)
    seq = Seq()
    _register_all(core, topo, digest, seq)
    r1 = topo.host_id("r1")
    for x in range(5):
        out = core.handle(P.encode(P.Backlog(seq(x, NOW), (r1,))), ("127.0.0.1", 7000 + x), NOW)
    assert {P.decode(s.data).rates for s in out} == {((r1, 190_000_000),)}
    # from the configuration file to the scheduler
    cfg = loads_controller_config(_write_config(tmp_path, 7999, mode='"rate"', rate_link_fraction=0.9).read_text(),
                                  base_dir=tmp_path)
    assert ControllerService(cfg).core.sched.link_fraction == 0.9


# ------------------------------------------------------------------------------------ config

OK = 'schema = "xco-controller/1"\ntopology = "t.toml"\n'


@pytest.mark.parametrize("extra, key, problem", [
    ("slice = 5\n", "slice", "did you mean 'slice_us'"),
    ("bogus = 1\n", "bogus", "unknown key"),
    ("heartbeat_misses = 0\n", "heartbeat_misses", "within 1..100"),
    ('listen = "localhost"\n', "listen", "address:port"),
    ('mode = "fast"\n', "mode", "must be one of"),
    ("slice_us = 1.5\n", "slice_us", "integer"),
    ("lead_us = 10000\n", "lead_us", "less than slice_us"),
    ("[metrics]\nprot = 1\n", "metrics.prot", "unknown key"),
    ('[log]\nlevel = "loud"\n', "log.level", "must be one of"),
    ("rate_link_fraction = 0.2\n", "rate_link_fraction", "within 0.5..1.1"),
    ("rate_link_fraction = 1.15\n", "rate_link_fraction", "within 0.5..1.1"),
    ('rate_link_fraction = "0.9"\n', "rate_link_fraction", "number"),
])
def test_bad_config_is_refused_naming_the_key(extra, key, problem):
    refused(lambda: loads_controller_config(OK + extra, "x.toml"), ControllerConfigError, key, problem)


def test_an_unknown_key_is_told_the_keys_as_they_are_written():
    # the schema key is a field named schema_ (a pydantic alias): the list names what a file can write
    e = refused(lambda: loads_controller_config(OK + "bogus = 1\n", "x.toml"), ControllerConfigError, "bogus")
    assert e.problem.startswith("unknown key (allowed: auth_key_file, ") and ", schema, " in e.problem, e.problem
    assert "schema_" not in e.problem, e.problem


def test_config_without_topology_is_refused():
    with pytest.raises(ControllerConfigError, match="'topology': missing"):
        loads_controller_config('schema = "xco-controller/1"\n')


def _xtc(*argv, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "xtc.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=60, **kw)



def _write_config(tmp_path, port, **over):
    (tmp_path / "topo.toml").write_bytes((DATA / "fig1a.toml").read_bytes())
    keys = {"slice_us": 20_000, "lead_us": 5_000, "listen": f'"127.0.0.1:{port}"', "heartbeat_interval_us": 100_000,
            "heartbeat_misses": 4, "state_file": '"state.json"', "state_save_interval_s": 0.0}
    keys.update(over)
    body = 'schema = "xco-controller/1"\ntopology = "topo.toml"\n' + "".join(f"{k} = {v}\n" for k, v in keys.items())
    body += '[metrics]\nport = 0\n[log]\nlevel = "info"\n'
    p = tmp_path / "xco.toml"
    p.write_text(body)
    return p


def test_check_config_accepts_a_controller_file_and_names_a_bad_key(tmp_path):
    p = _write_config(tmp_path, 7999)
    r = _xtc("xco", "check-config", str(p))
    assert r.returncode == 0, r.stderr
    assert "timeslice mode, slice 20000 us" in r.stdout and "6 hosts" in r.stdout
    p.write_text(p.read_text().replace("heartbeat_misses", "heartbeat_missed"))
    r = _xtc("xco", "check-config", str(p))
    assert r.returncode == 1 and "'heartbeat_missed': unknown key" in r.stderr
    p.write_text(p.read_text().replace("heartbeat_missed = 4\n", "").replace('"topo.toml"', '"nope.toml"'))
    r = _xtc("xco", "check-config", str(p))
    assert r.returncode == 1 and "'topology'" in r.stderr and "cannot read" in r.stderr


# ------------------------------------------------------------------------- the process on loopback

class Agent:
    """A host speaking the protocol: its own UDP socket, session and sequence numbers."""

    def __init__(self, x, name, port, digest):
        self.x, self.name, self.digest = x, name, digest
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.connect(("127.0.0.1", port))
        self.session = 1000 + x
        self.seq = 0
        self.got = []
        self.last_sent = None

    def send(self, make, **kw):
        self.seq += 1
        self.last_sent = P.encode(make(P.Header(self.x, self.session, self.seq, time.time_ns() // 1000), **kw))
        self.sock.send(self.last_sent)

    def register(self):
        self.send(P.Register, topology=self.digest, name=self.name, vms=())

    def heartbeat(self):
        self.send(P.Heartbeat)


def pump(agents, seconds, silent=()):
    """Receive for ``seconds``, sending heartbeats every 50 ms for the agents not in ``silent``."""
    end = time.monotonic() + seconds
    next_hb = 0.0
    socks = {a.sock: a for a in agents}
    while (left := end - time.monotonic()) > 0:
        if time.monotonic() >= next_hb:
            for a in agents:
                if a.x not in silent:
                    a.heartbeat()
            next_hb = time.monotonic() + 0.05
        r, _, _ = select.select(list(socks), [], [], min(left, 0.05))
        for s in r:
            try:
                data = s.recv(P.MAX_DATAGRAM)
            except ConnectionRefusedError:
                continue
            socks[s].got.append((time.time_ns() // 1000, P.decode(data)))


class Controller:
    def __init__(self, cfg):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.p = subprocess.Popen([sys.executable, "-m", "xtc.cli", "xco", "controller", "-c", str(cfg)],
                                  stderr=subprocess.PIPE, text=True, env=env)
        self.log = []
        self.metrics_port = None
        deadline = time.monotonic() + 30
        while self.metrics_port is None:
            assert time.monotonic() < deadline, "controller did not start"
            line = self.p.stderr.readline()
            assert line, f"controller exited: {self.p.wait()}"
            ev = json.loads(line)
            self.log.append(ev)
            if ev["event"] == "started":
                self.metrics_port = ev["metrics_port"]

    def metrics(self):
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        rest = self.p.communicate(timeout=20)[1]
        self.log += [json.loads(line) for line in rest.splitlines() if line.strip()]
        return self.p.returncode


def _directives(agent):
    return [(t, m) for t, m in agent.got if isinstance(m, P.Directive)]


@pytest.mark.timeout(120)
def test_controller_process_schedules_real_hosts_drops_silent_ones_and_keeps_state(tmp_path):
    port = free_port(socket.SOCK_DGRAM)
    cfg = _write_config(tmp_path, port)
    digest = P.topology_digest((tmp_path / "topo.toml").read_bytes())
    topo = load_topology(tmp_path / "topo.toml")
    agents = [Agent(x, n, port, digest) for x, n in enumerate(topo.hosts)]
    r1 = topo.host_id("r1")
    ctl = Controller(cfg)
    try:
        for a in agents:
            a.register()
        pump(agents, 0.3)
        assert all(any(isinstance(m, P.Welcome) and m.slice_us == 20_000 for _, m in a.got) for a in agents)
        for a in agents[:5]:
            a.send(P.Backlog, dests=(r1,))
        pump(agents, 0.5)
        # Directives: to r1 or hold; slices end on wall-clock multiples of 20 ms; sent ahead.
        grants = {}
        late = 0
        for a in agents[:5]:
            ds = _directives(a)
            assert ds, a.name
            for _, m in ds:
                assert m.header.host == a.x and m.dest in (r1, None)
                # Sent ahead of the slot (nominally lead_us = 5 ms); on a loaded machine a late timer
                # wake-up can send one after its slot began: the controller must then count it.
                late += m.start_us <= m.header.t_us
                if m.dest is not None:
                    assert (m.start_us + m.length_us) % 20_000 == 0 and 0 < m.length_us <= 20_000
                    grants.setdefault(m.start_us, []).append(a.x)
        assert not _directives(agents[5])  # r1 sends nothing
        # One sender per slot (r1's cable is the bottleneck), and all five get their turn.
        assert all(len(v) == 1 for v in grants.values()), grants
        assert {x for v in grants.values() for x in v} == {0, 1, 2, 3, 4}
        m = ctl.metrics()
        assert m["xco_hosts_registered"] == 6
        assert m['xco_events_total{kind="backlog"}'] == 5 and m["xco_directives_sent_total"] >= 10
        assert m["xco_event_seconds_count"] >= 10
        assert m["xco_directives_late_total"] >= late

        # A replayed and a malformed datagram are dropped and counted.
        agents[0].sock.send(agents[0].last_sent)
        agents[0].sock.send(b"XC\x01garbage")
        pump(agents, 0.1)
        m = ctl.metrics()
        assert m['xco_messages_dropped_total{reason="replay"}'] >= 1
        assert m['xco_messages_dropped_total{reason="malformed"}'] == 1

        # r1 stops its heartbeats: dropped after 4 x 100 ms; the senders are told to hold.
        for a in agents:
            a.got.clear()
        pump(agents, 0.8, silent={r1})
        assert ctl.metrics()["xco_hosts_registered"] == 5
        last = {a.name: _directives(a)[-1][1].dest for a in agents[:5] if _directives(a)}
        assert set(last.values()) == {None}
        # r1 comes back and s1..s3 report backlog again.
        agents[5].register()
        pump(agents, 0.2)
        for a in agents[:3]:
            a.send(P.Backlog, dests=(r1,))
        pump(agents, 0.2)
        assert ctl.stop() == 0
        assert [e["host"] for e in ctl.log if e["event"] == "host_lost"] == ["r1"]
    finally:
        if ctl.p.poll() is None:
            ctl.p.kill()
    state = json.loads((tmp_path / "state.json").read_text())
    assert [(h["name"], h["backlog"]) for h in state["hosts"]] == \
        [("s1", ["r1"]), ("s2", ["r1"]), ("s3", ["r1"]), ("s4", []), ("s5", []), ("r1", [])]

    # Restart: the hosts stay registered (no new register), their backlogs are scheduled again.
    for a in agents:
        a.got.clear()
    ctl = Controller(cfg)
    try:
        assert any(e["event"] == "state_loaded" and e["hosts"] == 6 for e in ctl.log)
        pump(agents, 0.5)
        got = {a.x for a in agents for _, m in _directives(a) if m.dest == r1}
        assert got == {0, 1, 2}
        # Old sequence numbers are still refused; new ones are taken without registering again.
        agents[3].sock.send(agents[3].last_sent)
        agents[3].send(P.Backlog, dests=(r1,))
        pump(agents, 0.5)
        m = ctl.metrics()
        assert m['xco_messages_dropped_total{reason="replay"}'] == 1
        assert m["xco_hosts_registered"] == 6
        assert any(m_.dest == r1 for _, m_ in _directives(agents[3]))
        assert ctl.stop() == 0
    finally:
        if ctl.p.poll() is None:
            ctl.p.kill()



@pytest.mark.parametrize("seed", [1, 2, 3])
def test_core_handle_many_sends_what_handle_of_each_in_turn_sends(seed):
    """The datagrams of one socket read handled at one instant (backlog reports and give-ups batched
    into one scheduler call; registrations, heartbeats, leaves, slot boundaries and bad datagrams in
    between) send the same datagrams in the same order, and leave the same state, as one by one."""
    import random

    rng = random.Random(seed)
    topo, digest, one = _core()
    _, _, many = _core()
    seqs = [Seq(), Seq()]
    for core, seq in zip((one, many), seqs):
        _register_all(core, topo, digest, seq)
    n = topo.n_hosts
    t = NOW
    batches = 0
    for step in range(40):
        t += rng.choice([1, 50, 2000, SLICE])
        items = []
        spec = []
        for _ in range(rng.randrange(1, 12)):
            x = rng.randrange(n)
            kind = rng.choices(["backlog", "giveup", "heartbeat", "bad", "leave", "register"], [6, 4, 1, 1, 0.3, 1])[0]
            d = rng.sample([y for y in range(n) if y != x], 2)
            spec.append((kind, x, d))
        outs = []
        for core, seq in zip((one, many), seqs):
            items = []
            for kind, x, d in spec:
                if kind == "backlog":
                    m = P.Backlog(seq(x, t), tuple(d))
                elif kind == "giveup":
                    dest = core.sched.dest[x]
                    m = P.GiveUp(seq(x, t), d[0] if dest is None else dest)
                elif kind == "heartbeat":
                    m = P.Heartbeat(seq(x, t))
                elif kind == "leave":
                    m = P.Leave(seq(x, t))
                elif kind == "register":
                    m = P.Register(seq(x, t), digest, topo.hosts[x], ())
                else:
                    items.append((b"\x00junk", ("127.0.0.1", 7000 + x)))
                    continue
                items.append((P.encode(m), ("127.0.0.1", 7000 + x)))
            if core is one:
                outs.append([s for data, addr in items for s in core.handle(data, addr, t)])
            else:
                outs.append(core.handle_many(items, t))
        assert outs[1] == outs[0], step
        assert many.sched.dest == one.sched.dest and many.sched.key == one.sched.key
        assert (many.events, many.dropped, many.received) == (one.events, one.dropped, one.received)
        batches += sum(1 for k, _, _ in spec if k in ("backlog", "giveup")) > 1
        assert many.tick(t) == one.tick(t)
    assert batches > 10
    assert one.events["backlog"] > 20 and one.events["giveup"] > 10 and one.events["leave"] > 0


def test_check_config_names_the_hosts_timeslices_starve_and_the_rate_hybrid_mode_serves_them_at(tmp_path):
    p = _write_config(tmp_path, 7999)
    topo = tmp_path / "topo.toml"
    # r1 behind a 100 Mb/s port: every 1 Gb/s sender's path to it is slower than its NIC
    topo.write_text(topo.read_text().replace('name = "r1"', 'name = "r1"\nport_bps = 100_000_000', 1))
    r = _xtc("xco", "check-config", str(p))
    assert r.returncode == 0, r.stderr
    assert "is faster than link" in r.stdout and "timeslices never serve it there" in r.stdout
    p.write_text(p.read_text().replace("slice_us = 20000", 'slice_us = 20000\nmode = "hybrid"'))
    r = _xtc("xco", "check-config", str(p))
    assert r.returncode == 0, r.stderr
    assert "hybrid mode" in r.stdout and "warning" not in r.stdout
    assert "served in its slices at 100000000 b/s" in r.stdout
