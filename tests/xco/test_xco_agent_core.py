"""The XCo agent's pure core: registers, directives at their start, holds, backlog reports, give-up
after the hysteresis, small destinations, fail open and back, rate mode, controller restart, bad datagrams."""

import ipaddress
import random
from pathlib import Path

import numpy as np
import pytest

from xtc.xco import protocol as P
from xtc.xco.agent import AgentCore, flows_of
from xtc.xco.agent_config import AgentConfigError, check_against_topology, loads_agent_config
from xtc.host.gate import CLOSED, OPEN, DestStats
from xtc.xco.topology import load_topology, parse_topology

DATA = Path(__file__).parent / "data"
NOW = 1_700_000_000_000_000
SLICE = 10_000
HB = 100_000
SMALL = 10_000
GIVEUP = 2_000
CTL = 77


class Ctl:
    """The controller's side: directives and welcomes of one session."""

    def __init__(self, host, session=CTL):
        self.host, self.session, self.seq = host, session, 0

    def __call__(self, make, t, **kw):
        self.seq += 1
        return P.encode(make(P.Header(self.host, self.session, self.seq, t), **kw))

    def welcome(self, t, mode="timeslice"):
        return self(P.Welcome, t, slice_us=SLICE, mode=mode, heartbeat_interval_us=HB)

    def slice(self, t, dest, start, length=SLICE):
        return self(P.Directive, t, dest=dest, start_us=start, length_us=0 if dest is None else length)


def _topo():
    return load_topology(DATA / "fig1a.toml")


def _core(topo=None, host=0, **kw):
    topo = topo or _topo()
    kw = {"small_flow_bytes": SMALL, "giveup_after_us": GIVEUP, **kw}
    return topo, AgentCore(topo, host, b"\x01" * 8, NOW, session=5, **kw)


def _msgs(out):
    return [P.decode(d) for d in out.sends]


def _stats(core, sent=0, backlog=None):
    """``(destination counters, small flows' sent bytes)``: every small flow has sent ``sent``
    bytes; ``backlog``: destination host ids with 3000 bytes queued."""
    return ({d: DestStats(sent, sent // 1500, 3000 if backlog and d in backlog else 0,
                          2 if backlog and d in backlog else 0) for d in core.dests},
            dict.fromkeys(core.small_flows, sent))


def _welcomed(mode="timeslice", **kw):
    topo, core = _core(**kw)
    ctl = Ctl(0)
    core.tick(NOW)
    core.handle(ctl.welcome(NOW + 100, mode), NOW + 100)
    assert core.under_control
    return topo, core, ctl


def _open(core):
    return {d for d, s in core.states.items() if s != CLOSED}


def test_flows_are_local_vms_times_remote_vms_with_their_host():
    topo = _topo()
    fl = flows_of(topo, 0)
    assert [(str(f.src), str(f.dst), f.dest_host) for f in fl] == [
        ("10.0.1.1", "10.0.1.2", 1), ("10.0.1.1", "10.0.1.3", 2), ("10.0.1.1", "10.0.1.4", 3),
        ("10.0.1.1", "10.0.1.5", 4), ("10.0.1.1", "10.0.2.1", 5)]


def test_register_until_welcomed_then_heartbeats():
    topo, core = _core()
    (m,) = _msgs(core.tick(NOW))
    assert isinstance(m, P.Register) and m.name == "s1" and m.vms == ("10.0.1.1",) and m.header.session == 5
    assert core.next_deadline_us() == NOW + 100_000
    assert _msgs(core.tick(NOW + 99_999)) == []
    (m2,) = _msgs(core.tick(NOW + 100_000))
    assert isinstance(m2, P.Register) and m2.header.seq == m.header.seq + 1
    ctl = Ctl(0)
    out = core.handle(ctl.welcome(NOW + 100_100), NOW + 100_100)
    assert out.sends == [] and core.welcomed and (core.slice_us, core.heartbeat_interval_us) == (SLICE, HB)
    assert core.next_deadline_us() == NOW + 100_100 + HB
    assert _msgs(core.tick(NOW + 200_000)) == []
    (h,) = _msgs(core.tick(NOW + 200_100))
    assert isinstance(h, P.Heartbeat)
    assert core.stop(NOW + 300_000) == P.encode(P.Leave(P.Header(0, 5, h.header.seq + 1, NOW + 300_000)))


def test_directive_opens_its_destination_at_start_us_and_closes_the_others():
    topo, core, ctl = _welcomed()
    r1 = topo.host_id("r1")
    out = core.observe(NOW + 200, *_stats(core, sent=SMALL + 1))
    assert set(out.states.values()) == {CLOSED} and len(out.states) == 5  # large flows held: no directive yet
    start = NOW + 5_000
    out = core.handle(ctl.slice(NOW + 4_500, r1, start), NOW + 4_500)
    assert out.states == {} and out.applied == [] and core.next_deadline_us() == start
    assert core.tick(start - 1).states == {}
    out = core.tick(start)
    assert out.states == {r1: OPEN}
    assert [(a.arrival_us, a.start_us, a.dest) for a in out.applied] == [(NOW + 4_500, start, r1)]
    # The next slice to s2: r1 closes and s2 opens at once, in one change.
    out = core.handle(ctl.slice(start + SLICE - 500, 1, start + SLICE), start + SLICE - 500)
    out = core.tick(start + SLICE)
    assert out.states == {r1: CLOSED, 1: OPEN}
    # A hold closes every held flow.
    out = core.handle(ctl.slice(start + SLICE + 10, None, start + SLICE + 10), start + SLICE + 10)
    assert out.states == {1: CLOSED} and _open(core) == set()


def test_next_directive_closes_names_the_directives_a_close_guard_takes_early():
    """A directive waiting closes the destination in force when it is a hold or a slice for another
    destination; an open from nothing, the same destination again, or nothing waiting do not."""
    topo, core, ctl = _welcomed()
    r1 = topo.host_id("r1")
    core.observe(NOW + 200, *_stats(core, sent=SMALL + 1))
    assert core.next_directive_closes() is False  # nothing waits
    start = NOW + 5_000
    core.handle(ctl.slice(NOW + 4_500, r1, start), NOW + 4_500)
    assert core.next_directive_closes() is False  # an open, nothing in force
    core.tick(start)
    core.handle(ctl.slice(start + SLICE - 900, r1, start + SLICE), start + SLICE - 900)
    assert core.next_directive_closes() is False  # the same destination again
    core.tick(start + SLICE)
    core.handle(ctl.slice(start + 2 * SLICE - 900, 1, start + 2 * SLICE), start + 2 * SLICE - 900)
    assert core.next_directive_closes() is True  # another destination: r1 closes
    out = core.tick(start + 2 * SLICE)
    assert out.states == {r1: CLOSED, 1: OPEN}
    core.handle(ctl.slice(start + 3 * SLICE - 900, None, start + 3 * SLICE), start + 3 * SLICE - 900)
    assert core.next_directive_closes() is True  # a hold
    assert core.tick(start + 3 * SLICE).states == {1: CLOSED}


def test_slot_budget_names_each_open_slices_end_and_extends_it_ahead_for_the_same_destination():
    topo, core, ctl = _welcomed(slot_budget=True)
    r1 = topo.host_id("r1")
    core.observe(NOW + 200, *_stats(core, sent=SMALL + 1))  # every flow large: held
    b = (NOW // SLICE + 2) * SLICE  # a slot boundary
    core.handle(ctl.slice(b - 500, r1, b), b - 500)
    out = core.tick(b)
    assert out.states == {r1: OPEN} and out.until == {r1: b + SLICE}
    # the next slot's directive, the same destination, ahead: the slice is extended at once
    out = core.handle(ctl.slice(b + SLICE - 500, r1, b + SLICE), b + SLICE - 500)
    assert out.states == {r1: OPEN} and out.until == {r1: b + 2 * SLICE} and core.open_until_us == b + 2 * SLICE
    out = core.tick(b + SLICE)  # its start: nothing left to change
    assert out.states == {} and out.until == {}
    # a slice given mid-slot (a give-up handed on) gets the rest of its slot
    out = core.handle(ctl.slice(b + 2 * SLICE + 3_000, 1, b + 2 * SLICE + 3_000), b + 2 * SLICE + 3_000)
    assert out.states == {r1: CLOSED, 1: OPEN} and out.until == {1: b + 3 * SLICE}
    # the same destination's next directive late, after the gate held at the slot's end: a new budget
    out = core.handle(ctl.slice(b + 3 * SLICE + 800, 1, b + 3 * SLICE), b + 3 * SLICE + 800)
    assert out.states == {1: OPEN} and out.until == {1: b + 4 * SLICE}
    # two directives for the same destination known before the first starts: one slice over both
    core.handle(ctl.slice(b + 4 * SLICE - 900, 2, b + 4 * SLICE), b + 4 * SLICE - 900)
    core.handle(ctl.slice(b + 4 * SLICE - 800, 2, b + 5 * SLICE), b + 4 * SLICE - 800)
    out = core.tick(b + 4 * SLICE)
    assert out.states == {1: CLOSED, 2: OPEN} and out.until == {2: b + 6 * SLICE}
    # a hold ends it
    out = core.handle(ctl.slice(b + 6 * SLICE, None, b + 6 * SLICE), b + 6 * SLICE)
    assert out.states == {2: CLOSED} and out.until == {} and core.open_until_us is None
    # failed open: everything OPEN, no slice end
    core.handle(ctl.slice(b + 7 * SLICE - 500, 3, b + 7 * SLICE), b + 7 * SLICE - 500)
    assert core.tick(b + 7 * SLICE).until == {3: b + 8 * SLICE}
    out = core.tick(b + 12 * SLICE)
    out += core.tick(b + 13 * SLICE)
    # the budgeted class is named again as a plain OPEN (its budget spent, the kernel holds it)
    assert core.failed_open and out.until == {} and core.open_until_us is None and out.states.get(3) == OPEN
    # without slot_budget (the core's default) no slice end is named
    topo, plain, ctl2 = _welcomed()
    plain.observe(NOW + 200, *_stats(plain, sent=SMALL + 1))
    plain.handle(ctl2.slice(b - 500, r1, b), b - 500)
    out = plain.tick(b)
    assert out.states == {r1: OPEN} and out.until == {}


def test_a_directive_arriving_late_takes_effect_at_once_and_a_later_one_supersedes_pending():
    topo, core, ctl = _welcomed()
    core.observe(NOW + 200, *_stats(core, sent=SMALL + 1))
    out = core.handle(ctl.slice(NOW + 20_000, 2, NOW + 19_000), NOW + 20_000)
    assert _open(core) == {2} and out.applied[0].arrival_us == NOW + 20_000
    core.handle(ctl.slice(NOW + 20_100, 3, NOW + 30_000), NOW + 20_100)
    core.handle(ctl.slice(NOW + 20_200, 4, NOW + 25_000), NOW + 20_200)  # supersedes the one at 30 ms
    core.tick(NOW + 30_000)
    assert _open(core) == {4}


def test_backlog_reported_once_per_new_destination():
    topo, core, ctl = _welcomed()
    out = core.observe(NOW + 1_000, *_stats(core, sent=SMALL + 1, backlog={5, 1}))
    (m,) = _msgs(out)
    assert isinstance(m, P.Backlog) and m.dests == (1, 5)
    assert _msgs(core.observe(NOW + 1_500, *_stats(core, sent=SMALL + 1, backlog={5, 1}))) == []
    (m,) = _msgs(core.observe(NOW + 2_000, *_stats(core, sent=SMALL + 1, backlog={5, 1, 2})))
    assert m.dests == (2,)


def test_small_destinations_stay_open_and_unreported_until_they_pass_the_threshold():
    topo, core, ctl = _welcomed()
    out = core.observe(NOW + 1_000, *_stats(core, sent=SMALL, backlog={5}))
    assert out.sends == [] and out.states == {} and _open(core) == {1, 2, 3, 4, 5}
    out = core.observe(NOW + 2_000, *_stats(core, sent=SMALL + 1, backlog={5}))
    assert _open(core) == set() and [m.dests for m in _msgs(out)] == [(5,)]


def test_giveup_after_the_hysteresis_and_not_before():
    topo, core, ctl = _welcomed()
    core.observe(NOW + 1_000, *_stats(core, sent=SMALL + 1, backlog={5}))
    core.handle(ctl.slice(NOW + 1_100, 5, NOW + 1_100), NOW + 1_100)
    assert _open(core) == {5}
    t0 = NOW + 2_000
    assert _msgs(core.observe(t0, *_stats(core, sent=SMALL + 1))) == []  # queue empty: idle from t0
    assert _msgs(core.observe(t0 + GIVEUP // 2, *_stats(core, sent=SMALL + 1, backlog={5}))) == []  # busy again
    t1 = t0 + GIVEUP
    assert _msgs(core.observe(t1, *_stats(core, sent=SMALL + 1))) == []
    assert _msgs(core.observe(t1 + GIVEUP - 1, *_stats(core, sent=SMALL + 1))) == []
    (m,) = _msgs(core.observe(t1 + GIVEUP, *_stats(core, sent=SMALL + 1)))
    assert isinstance(m, P.GiveUp) and m.dest == 5 and core.reported == set()
    assert _msgs(core.observe(t1 + 3 * GIVEUP, *_stats(core, sent=SMALL + 1))) == []  # given up once
    # New backlog afterwards is reported again (beside a heartbeat: silent for a slice with r1 in force).
    out = _msgs(core.observe(t1 + 4 * GIVEUP, *_stats(core, sent=SMALL + 1, backlog={5})))
    assert [m.dests for m in out if isinstance(m, P.Backlog)] == [(5,)]


def test_fails_open_after_three_silent_slices_heartbeating_meanwhile_and_a_directive_resumes_control():
    topo, core, ctl = _welcomed()
    t = NOW + 1_000
    core.observe(t, *_stats(core, sent=SMALL + 1, backlog={5}))
    core.handle(ctl.slice(t, 5, t), t)  # heard at t
    beats = []
    for u in range(t + 500, t + 3 * SLICE, 500):
        out = core.observe(u, *_stats(core, sent=SMALL + 1, backlog={5}))
        beats += [(u, m) for m in _msgs(out)]
        assert core.under_control and not out.states
    # While waiting: one heartbeat per silent slice, nothing else.
    assert [(u, type(m)) for u, m in beats] == [(t + SLICE, P.Heartbeat), (t + 2 * SLICE, P.Heartbeat)]
    assert core.next_deadline_us() == t + 3 * SLICE
    out = core.tick(t + 3 * SLICE)
    assert core.failed_open and not core.under_control and _open(core) == {1, 2, 3, 4, 5}
    assert set(out.states.values()) == {OPEN} and len(out.states) == 4
    assert core.notes[-1][0] == "fail_open" and [type(m) for m in _msgs(out)] == [P.Register]
    out = core.observe(t + 3 * SLICE + 500, *_stats(core, sent=SMALL + 1, backlog={5}))
    assert out.sends == [] and out.states == {}
    # Failed open, it registers every register interval (a restarted controller forgot it), no heartbeats.
    assert core.next_deadline_us() == t + 3 * SLICE + 100_000
    assert _msgs(core.tick(t + 100_000)) == []
    assert [type(m) for m in _msgs(core.tick(t + 3 * SLICE + 100_000))] == [P.Register]
    # A directive resumes control; the backlog is reported again at the next observation.
    u = t + 200_000
    out = core.handle(ctl.slice(u, 2, u), u)
    assert core.under_control and _open(core) == {2} and core.notes[-1][0] == "control_resumed"
    assert [m.dests for m in _msgs(core.observe(u + 500, *_stats(core, sent=SMALL + 1, backlog={5})))] == [(5,)]


def test_acks_keep_a_waiting_host_under_control():
    topo, core, ctl = _welcomed()
    t = NOW + 1_000
    core.observe(t, *_stats(core, sent=SMALL + 1, backlog={5}))  # reported, then no directive for long
    for u in range(t + 500, t + 20 * SLICE, 500):
        for m in _msgs(core.observe(u, *_stats(core, sent=SMALL + 1, backlog={5}))):
            assert isinstance(m, P.Heartbeat)
            core.handle(ctl(P.Ack, u + 200, seq=m.header.seq, backlog=(5,)), u + 200)
        assert core.under_control
    assert core.sent["heartbeat"] >= 18 and core.received["ack"] == core.sent["heartbeat"]


def test_an_ack_without_a_reported_destination_has_it_reported_again_and_a_stale_one_given_up():
    topo, core, ctl = _welcomed()
    t = NOW + 1_000
    (rep,) = _msgs(core.observe(t, *_stats(core, sent=SMALL + 1, backlog={5})))
    hb = P.decode(core.tick(t + SLICE).sends[0])
    assert isinstance(hb, P.Heartbeat) and hb.header.seq > rep.header.seq
    # The report was lost: the ack of a later heartbeat lacks 5 -> reported again.
    out = _msgs(core.handle(ctl(P.Ack, t + SLICE + 100, seq=hb.header.seq, backlog=()), t + SLICE + 100))
    assert [m.dests for m in out if isinstance(m, P.Backlog)] == [(5,)]
    # An ack of a heartbeat sent before that report does not count against it.
    out = _msgs(core.handle(ctl(P.Ack, t + SLICE + 200, seq=hb.header.seq, backlog=()), t + SLICE + 200))
    assert out == []
    # The controller holds 3, which this host never reported (or gave up): given up again.
    hb2 = P.decode(core.tick(t + 3 * SLICE).sends[0])
    out = _msgs(core.handle(ctl(P.Ack, t + 3 * SLICE + 100, seq=hb2.header.seq, backlog=(3, 5)), t + 3 * SLICE + 100))
    assert [(type(m), getattr(m, "dest", None)) for m in out] == [(P.GiveUp, 3)]
    # Bad acks are dropped: this host or an unknown host in the backlog.
    core.handle(ctl(P.Ack, t + 3 * SLICE + 200, seq=1, backlog=(0,)), t + 3 * SLICE + 200)
    core.handle(ctl(P.Ack, t + 3 * SLICE + 300, seq=1, backlog=(99,)), t + 3 * SLICE + 300)
    assert core.dropped["invalid"] == 2


def test_a_stall_of_the_agent_itself_heartbeats_before_failing_open():
    topo, core, ctl = _welcomed()
    t = NOW + 1_000
    core.observe(t, *_stats(core, sent=SMALL + 1, backlog={5}))
    core.handle(ctl.slice(t, 5, t), t)
    u = t + 5 * SLICE  # the agent's loop did not run for 5 slices
    out = core.tick(u)
    (hb,) = _msgs(out)
    assert not core.failed_open and isinstance(hb, P.Heartbeat)
    assert core.next_deadline_us() == u + SLICE
    core.handle(ctl(P.Ack, u + 300, seq=hb.header.seq, backlog=(5,)), u + 300)  # the controller is there
    assert not core.tick(u + SLICE).states and core.under_control
    core.tick(u + 300 + SLICE)  # heartbeats again (silent a slice)
    assert core.under_control
    core.tick(u + 300 + 2 * SLICE)
    assert core.under_control
    core.tick(u + 300 + 3 * SLICE)  # 3 slices silent, the first heartbeat since unanswered for 2
    assert core.failed_open


def test_an_idle_host_does_not_fail_open():
    topo, core, ctl = _welcomed()
    core.observe(NOW + 1_000, *_stats(core, sent=SMALL + 1))
    for u in range(NOW + 1_000, NOW + 50 * SLICE, SLICE // 2):
        core.observe(u, *_stats(core, sent=SMALL + 1))
    assert core.under_control


def _two_vm_topology():
    return parse_topology({
        "schema": "xco-topology/1", "switch": [{"name": "sw"}],
        "host": [{"name": "a", "nic_bps": 1_000_000_000, "switch": "sw", "vms": ["10.0.0.1", "10.0.0.2"]},
                 {"name": "b", "nic_bps": 1_000_000_000, "switch": "sw", "vms": ["10.0.1.1", "10.0.1.2"]},
                 {"name": "c", "nic_bps": 1_000_000_000, "switch": "sw", "vms": ["10.0.2.1"]}]})


def test_rate_mode_limits_each_large_destination_to_its_rate():
    topo = _two_vm_topology()
    _, core = _core(topo)
    ctl = Ctl(0)
    core.tick(NOW)
    core.handle(ctl.welcome(NOW, "rate"), NOW)
    assert len(core.flows) == 6
    assert core.dests == (1, 2)
    core.observe(NOW + 100, {d: DestStats(SMALL + 1, 9, 3000, 2) for d in core.dests}, dict.fromkeys(core.flows, SMALL + 1))
    assert _open(core) == set()
    start = NOW + 1_000
    core.handle(ctl(P.RateDirective, NOW + 500, start_us=start, rates=((1, 600_000_000), (2, 300_000_000))), NOW + 500)
    assert _open(core) == set()
    out = core.tick(start)
    assert out.states == {1: 600_000_000, 2: 300_000_000}  # the class of 4 flows, of 2 flows
    # Only the destinations named change; rate 0 stops a destination.
    out = core.handle(ctl(P.RateDirective, start + 10, start_us=start + 10, rates=((1, 0),)), start + 10)
    assert out.states == {1: CLOSED} and core.states == {1: CLOSED, 2: 300_000_000}


def test_controller_restart_new_session_accepted_backlog_re_reported_old_session_refused():
    topo, core, ctl = _welcomed()
    core.observe(NOW + 1_000, *_stats(core, sent=SMALL + 1, backlog={5, 3}))
    core.handle(ctl.slice(NOW + 1_100, 5, NOW + 1_100), NOW + 1_100)
    new = Ctl(0, session=CTL + 1)
    out = core.handle(new.slice(NOW + 2_000, 3, NOW + 2_000), NOW + 2_000)
    assert core.ctl_session == CTL + 1 and _open(core) == {3}
    assert [m.dests for m in _msgs(out) if isinstance(m, P.Backlog)] == [(3, 5)]
    assert ("controller_restarted", {"session": CTL + 1}) in core.notes
    # The old session, sent before the restart's messages, is refused; so is a new seq 1 replayed.
    core.handle(ctl.slice(NOW + 1_900, 5, NOW + 2_100), NOW + 2_100)
    assert core.dropped["replay"] == 1
    core.handle(P.encode(P.Directive(P.Header(0, CTL + 1, 1, NOW + 2_000), 5, NOW + 2_200, SLICE)), NOW + 2_200)
    core.tick(NOW + 2_300)
    assert core.dropped["replay"] == 2 and _open(core) == {3}


def test_bad_datagrams_are_dropped_and_counted_never_raised():
    topo, core, ctl = _welcomed()
    core.observe(NOW + 200, *_stats(core, sent=SMALL + 1))
    t = NOW + 1_000
    hdr = lambda host=0, seq=100, tt=t: P.Header(host, CTL, seq, tt)  # noqa: E731
    cases = {
        "malformed": [b"", b"XC\x01", b"nonsense" * 5],
        "version": [b"XC\x02" + P.encode(P.Directive(hdr(), 2, t, SLICE))[3:]],
        "invalid": [P.encode(P.Backlog(hdr(), (2,))), P.encode(P.Directive(hdr(host=1), 2, t, SLICE)),
                    P.encode(P.Directive(hdr(), 0, t, SLICE)), P.encode(P.Directive(hdr(), 6, t, SLICE)),
                    P.encode(P.RateDirective(hdr(), t, ((0, 5),)))],
        "stale": [P.encode(P.Directive(hdr(tt=t - 2_000_000), 2, t, SLICE))],
    }
    for reason, datagrams in cases.items():
        for d in datagrams:
            out = core.handle(d, t)
            assert out.sends == [] and out.states == {}
        assert core.dropped[reason] == len(datagrams), reason
    ok = ctl.slice(t, 2, t)
    core.handle(ok, t)
    core.handle(ok, t + 10)
    assert core.dropped["replay"] == 1 and _open(core) == {2}
    rng = random.Random(1)
    for _ in range(2_000):
        b = bytearray(ok)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        core.handle(bytes(b[: rng.randint(0, len(b))] if rng.random() < 0.3 else b), t + 20)
    assert sum(core.dropped.values()) + core.directives + 1 == 2_000 + 11 + 2


def test_config_is_validated_naming_the_key_and_checked_against_the_topology(tmp_path):
    base = ('schema = "xco-agent/1"\ntopology = "t.toml"\nhost = "s1"\nuplink = "eth0"\n'
            'controller = "127.0.0.1:7800"\n')
    cfg = loads_agent_config(base, base_dir=tmp_path)
    assert cfg.topology == str(tmp_path / "t.toml") and cfg.small_flow_bytes == 100_000 and cfg.metrics.port == 8973
    assert check_against_topology(cfg, _topo()) == (0, 1_000_000_000)
    for text, key in [(base + "poll_us = 10\n", "poll_us"), (base + "giveup_us = 5\n", "giveup_us"),
                      (base.replace('"eth0"', '"a/b"'), "uplink"), (base.replace("7800", "x"), "controller"),
                      (base + "[metrics]\nport = 70000\n", "metrics.port"),
                      (base + "close_guard_us = 501\n", "close_guard_us"),
                      (base + "rate_burst_us = 50\n", "rate_burst_us"),
                      (base.replace('host = "s1"\n', ""), "host")]:
        with pytest.raises(AgentConfigError) as e:
            loads_agent_config(text)
        assert e.value.key == key, (text, e.value)
    with pytest.raises(AgentConfigError, match="'host': no host 'zz'"):
        check_against_topology(loads_agent_config(base.replace('"s1"', '"zz"')), _topo())
    assert check_against_topology(loads_agent_config(base + "link_bps = 5\n"), _topo())[1] == 5


def test_ipv4_and_ipv6_vms_pair_only_with_their_family():
    topo = parse_topology({
        "schema": "xco-topology/1", "switch": [{"name": "sw"}],
        "host": [{"name": "a", "nic_bps": 10, "switch": "sw", "vms": ["10.0.0.1", "fd00::1"]},
                 {"name": "b", "nic_bps": 10, "switch": "sw", "vms": ["10.0.1.1", "fd00::2"]}]})
    assert [(str(f.src), str(f.dst)) for f in flows_of(topo, 0)] == [("10.0.0.1", "10.0.1.1"), ("fd00::1", "fd00::2")]
    assert isinstance(flows_of(topo, 1)[0].src, ipaddress.IPv4Address)


def test_check_config_tells_an_agent_file_apart_and_names_a_bad_key(tmp_path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "t.toml").write_bytes((DATA / "fig1a.toml").read_bytes())
    p = tmp_path / "agent.toml"
    p.write_text('schema = "xco-agent/1"\ntopology = "t.toml"\nhost = "s2"\nuplink = "eth0"\n'
                 'controller = "127.0.0.1:7800"\n')

    def check():
        return subprocess.run([sys.executable, "-m", "xtc.cli", "xco", "check-config", str(p)], capture_output=True,
                              text=True, env=dict(os.environ, PYTHONPATH=str(root)), timeout=60)

    r = check()
    assert r.returncode == 0, r.stderr
    assert "host s2 (id 1) on eth0, 1000000000 b/s, 5 flows" in r.stdout
    p.write_text(p.read_text().replace('"s2"', '"q9"'))
    r = check()
    assert r.returncode == 1 and "'host': no host 'q9'" in r.stderr
    p.write_text(p.read_text().replace("uplink", "uplinks"))
    r = check()
    assert r.returncode == 1 and "'uplinks': unknown key" in r.stderr


def test_open_burst_bytes_is_a_key_defaulting_to_one_ms_of_the_link_and_two_frames():
    from xtc.host.tcgate import default_open_burst_bytes

    base = ('schema = "xco-agent/1"\ntopology = "t.toml"\nhost = "s1"\nuplink = "eth0"\n'
            'controller = "127.0.0.1:7800"\n')
    assert loads_agent_config(base).open_burst_bytes is None
    assert loads_agent_config(base + "open_burst_bytes = 3028\n").open_burst_bytes == 3028
    for text, key in [(base + "open_burst_bytes = 10\n", "open_burst_bytes"), (base + "burst = 3000\n", "burst")]:
        with pytest.raises(AgentConfigError) as e:
            loads_agent_config(text)
        assert e.value.key == key
    assert default_open_burst_bytes(1_000_000_000, 1500) == 125_000  # 1 ms at 1 Gb/s
    assert default_open_burst_bytes(100_000_000, 1500) == 12_500
    assert default_open_burst_bytes(8_000_000, 1500) == 2 * 1518  # at least two frames


class _Net:
    """A controller core and agent cores joined in memory (datagrams delivered unless ``cut``)."""

    def __init__(self, topo, mode):
        from xtc.xco.controller import ControllerCore

        self.ctl = ControllerCore(topo, b"\x01" * 8, NOW, slice_us=SLICE, lead_us=500, mode=mode,
                                  heartbeat_interval_us=HB)
        self.agents = {}
        self.cut = set()

    def add(self, topo, host):
        _, a = _core(topo, host)
        self.agents[host] = a
        return a

    def run(self, host, out, t):
        """Deliver ``out``'s datagrams of ``host`` to the controller and its answers back."""
        for d in out.sends:
            if host in self.cut:
                continue
            for s in self.ctl.handle(d, ("127.0.0.1", 1000 + host), t):
                if s.host not in self.cut:
                    self.run(s.host, self.agents[s.host].handle(s.data, t), t)


def _rate_pair():
    """A controller in rate mode and the agents of hosts 0 and 5, registered: ``(net, a0, a5, t)``."""
    topo = _topo()
    net = _Net(topo, "rate")
    a0, a5 = net.add(topo, 0), net.add(topo, 5)
    t = NOW + 100
    for x, a in ((0, a0), (5, a5)):
        net.run(x, a.tick(t), t)
    return net, a0, a5, t


def test_rate_mode_recovers_its_rates_after_a_fail_open():
    """A fail-open forgets the rates; the controller's rates have not changed, yet the re-reported
    backlog must bring them back (else the large flows stay CLOSED for good)."""
    net, a0, a5, t = _rate_pair()
    assert a0.under_control and a5.under_control and a0.mode == "rate"
    busy = lambda a: ({d: DestStats(SMALL + 1, 9, 3000 * (d == 5), 2 * (d == 5))  # noqa: E731
                     for d in a.dests}, dict.fromkeys(a.small_flows, SMALL + 1))
    t += 1_000
    net.run(0, a0.observe(t, *busy(a0)), t)
    t += 1_000
    a0.tick(t)
    rate = a0.rates.get(5, 0)
    assert rate > 0 and a0.states[5] == rate
    # The controller goes quiet for this host: it fails open (rates forgotten), then is heard again.
    net.cut.add(0)
    while not a0.failed_open:
        t += 500
        net.run(0, a0.observe(t, *busy(a0)), t)
        net.run(5, a5.tick(t), t)
    assert a0.rates == {} and all(s == OPEN for s in a0.states.values())
    net.cut.discard(0)
    t += 100_000
    # A register, welcomed again (same sessions on both sides); the heartbeat sent on the welcome
    # and the backlog re-reported at the next poll cross the acks on the way.
    (reg,) = a0.tick(t).sends
    (welcome,) = net.ctl.handle(reg, ("127.0.0.1", 1000), t)
    sends = a0.handle(welcome.data, t).sends + a0.observe(t + 200, *busy(a0)).sends
    assert [type(P.decode(d)) for d in sends] == [P.Heartbeat, P.Backlog] and a0.under_control
    for d in sends:
        for s in net.ctl.handle(d, ("127.0.0.1", 1000), t + 300):
            net.run(0, a0.handle(s.data, t + 300), t + 300)
    for _ in range(4):
        t += 500
        net.run(0, a0.observe(t, *busy(a0)), t)
    assert a0.rates.get(5) == rate
    assert a0.states[5] == rate


def test_rate_mode_a_lost_rate_directive_is_asked_again_from_the_ack():
    net, a0, _a5, t = _rate_pair()
    busy = ({d: DestStats(SMALL + 1, 9, 3000 * (d == 5), 2 * (d == 5)) for d in a0.dests},
            dict.fromkeys(a0.flows, SMALL + 1))
    t += 1_000
    out = a0.observe(t, *busy)
    sends = [s for d in out.sends for s in net.ctl.handle(d, ("127.0.0.1", 1000), t)]
    assert [type(P.decode(s.data)) for s in sends] == [P.RateDirective]  # ... and lost
    assert a0.reported == {5} and 5 not in a0.rates
    for _ in range(4):
        t += SLICE
        net.run(0, a0.observe(t, *busy), t)  # heartbeat, ack, backlog again, rates
    assert a0.rates.get(5, 0) > 0 and a0.under_control


@pytest.mark.parametrize("seed", range(5))
def test_a_directive_changes_at_most_two_destinations_and_agrees_with_a_full_sync(seed):
    """Directives update only the old and the new destination (no sweep over every flow or
    destination); whatever the order of directives, holds and destinations turning large, the
    states given to the gate are those a full recomputation gives."""
    rng = random.Random(seed)
    topo, core, ctl = _welcomed()
    t = NOW + 1_000
    sent = dict.fromkeys(core.dests, 0)
    gate = dict(core.states)
    mixed = 0
    for _ in range(300):
        t += rng.randrange(1, 3_000)
        if rng.random() < 0.3:
            d = rng.choice(core.dests)
            sent[d] += rng.choice((0, SMALL // 2, SMALL))
            out = core.observe(t, {x: DestStats(0, 1, 0, 0) for x in core.dests},
                               {f: sent[f.dest_host] for f in core.small_flows})
        else:
            dest = rng.choice((None, *core.dests))
            out = core.handle(ctl.slice(t, dest, t + rng.choice((0, 500))), t)
            out += core.tick(t + 500)
            t += 500
            assert len(out.states) <= 2 * max(1, len(out.applied)), out
        gate.update(out.states)
        assert gate == core.states
        assert [core._want(i) for i in range(len(core.dests))] == list(gate.values())
        mixed += 0 < len(core.large) < len(core.dests)
    assert mixed > 20 and core.fail_opens == 0  # small and large destinations side by side


def test_a_large_flow_is_moved_to_its_destination_a_small_one_to_the_same_host_stays_unheld():
    topo = _two_vm_topology()
    _, core = _core(topo)
    ctl = Ctl(0)
    core.tick(NOW)
    core.handle(ctl.welcome(NOW), NOW)
    big, small = [f for f in core.flows if f.dest_host == 1][:2]  # two flows towards host b
    assert core.small_flows == core.flows and core.large == set()
    out = core.observe(NOW + 100, {1: DestStats(0, 0, 0, 0), 2: DestStats(0, 0, 0, 0)}, {big: SMALL + 1, small: SMALL})
    # the large flow goes into host b's class, which closes (no directive for b); the small one stays in its own
    assert out.moved == [big] and out.states == {1: CLOSED} and core.large == {1}
    assert small in core.small_flows and big not in core.small_flows and len(core.small_flows) == 5
    # arrays by position in small_flows as it was when the counters were read
    flows_then = core.small_flows
    arr = np.array([SMALL + 1 if f is small else 0 for f in flows_then])
    out = core.observe_counters(NOW + 200, np.zeros(2), np.zeros(2), np.zeros(2), arr)
    assert out.moved == [small] and out.states == {} and core.large == {1}  # host b was held already
    assert small not in core.small_flows and len(core.small_flows) == 4
    # a backlog in host b's class is reported; host c (small flows only) is never
    out = core.observe_counters(NOW + 300, np.zeros(2), np.array([3000, 3000]), np.array([2, 2]),
                                np.zeros(len(core.small_flows)))
    assert [m.dests for m in _msgs(out)] == [(1,)]


def test_an_idle_host_the_controller_dropped_registers_again_and_its_senders_get_slots():
    """r1 (idle: it sends nothing) goes unheard for a while and the controller drops it; heard again,
    its heartbeats get no answer, so it registers again, without failing open, and a sender's
    backlog towards it is accepted and granted (before: r1 never came back and s1 waited)."""
    topo = _topo()
    net = _Net(topo, "timeslice")
    r1 = topo.host_id("r1")
    s1, rcv = net.add(topo, 0), net.add(topo, r1)
    t = NOW + 100
    for x, a in ((0, s1), (r1, rcv)):
        net.run(x, a.tick(t), t)
    assert s1.under_control and rcv.under_control
    net.cut.add(r1)
    end = t + 5 * HB
    while t < end:  # r1's heartbeats are lost; s1 keeps talking
        t += SLICE
        net.run(0, s1.tick(t), t)
        net.run(r1, rcv.tick(t), t)
        net.ctl.tick(t)
    assert r1 not in net.ctl.hosts
    net.cut.discard(r1)
    end = t + 3 * HB
    while t < end and r1 not in net.ctl.hosts:
        t += SLICE
        net.run(r1, rcv.tick(t), t)
        net.run(0, s1.tick(t), t)
        net.ctl.tick(t)
    assert r1 in net.ctl.hosts and rcv.reregisters >= 1
    assert rcv.fail_opens == 0 and rcv.under_control
    busy = ({d: DestStats(SMALL + 1, 9, 3000 * (d == r1), 2 * (d == r1)) for d in s1.dests},
            dict.fromkeys(s1.small_flows, SMALL + 1))
    net.run(0, s1.observe(t, *busy), t)
    assert net.ctl.backlog_of(0) == [r1] and sum(net.ctl.dropped.values()) == 0
    for _ in range(4):
        t += SLICE
        net.run(0, s1.observe(t, *busy), t)
        for s in net.ctl.tick(t):
            net.run(s.host, net.agents[s.host].handle(s.data, t), t)
        s1.tick(t)
    assert s1.dest == r1


def test_directives_every_slice_need_no_heartbeat_but_an_unacked_report_gets_one_within_a_slice():
    """While directives keep coming a waiting host heartbeats every heartbeat interval only (the
    directives say the controller is there); a backlog or give-up sent has a heartbeat within a
    slice, whose ack finds it if it was lost."""
    topo, core, ctl = _welcomed()
    t = NOW + 1_000
    (rep,) = _msgs(core.observe(t, *_stats(core, sent=SMALL + 1, backlog={5})))
    assert isinstance(rep, P.Backlog) and core.next_deadline_us() <= t + SLICE
    beats = []

    def take(out, at):
        for m in _msgs(out):
            if isinstance(m, P.Heartbeat):  # acked at once, holding 5
                beats.append(at)
                core.handle(ctl(P.Ack, at + 100, seq=m.header.seq, backlog=(5,)), at + 100)

    for k in range(1, 30):  # a directive every slice, 500 us ahead
        u = t + k * SLICE
        take(core.handle(ctl.slice(u - 500, 1 + k % 5, u), u - 500), u - 500)
        take(core.tick(u), u)
    assert beats[0] <= t + SLICE  # the report's heartbeat
    assert len(beats) <= 2 + (29 * SLICE) // HB  # then one every heartbeat interval (before: every slice)
    # A give-up sent has its heartbeat within a slice too.
    u = t + 30 * SLICE
    core.observe(u, *_stats(core, sent=SMALL + 1))
    (g,) = _msgs(core.observe(u + GIVEUP, *_stats(core, sent=SMALL + 1)))
    assert isinstance(g, P.GiveUp) and core.next_deadline_us() <= u + GIVEUP + SLICE
    assert core.under_control and not core.failed_open


def test_observe_quiet_decides_as_empty_counters_do():
    """observe_quiet (the gate says nothing is queued, no small flow grown) = observe_counters
    with zero queues and small flows' bytes unchanged: backlog, give-up and fail-open alike."""
    cores = [_welcomed()[1] for _ in range(2)]
    t = NOW + 1_000
    outs = []
    for k, core in enumerate(cores):
        dests, small = core.dests, core.small_flows
        big = np.full(len(dests), 0, dtype=np.int64)
        q = np.array([3000 if d == 5 else 0 for d in dests], dtype=np.int64)
        grown = np.full(len(small), SMALL + 1, dtype=np.int64)
        out = core.observe_counters(t, big, q, (q > 0).astype(np.int64), grown)  # 5 large and reported
        seq = [[P.decode(d) for d in out.sends], dict(out.states)]
        small = core.small_flows
        for u in range(t + 500, t + 5 * SLICE, 500):
            zeros = np.zeros(len(dests), dtype=np.int64)
            out = (core.observe_quiet(u) if k else
                   core.observe_counters(u, zeros, zeros, zeros, np.zeros(len(small), dtype=np.int64)))
            seq.append(([(type(m).__name__, getattr(m, "dest", None)) for m in _msgs(out)], dict(out.states)))
        outs.append((seq[2:], core.reported, core.failed_open, core.states))
    assert outs[0] == outs[1]
    assert ("GiveUp", 5) in [m for s, _ in outs[0][0] for m in s] and outs[0][1] == set()


def _fast_host_topology():
    """h0's 10 Gb/s NIC is faster than every path it has (1 Gb/s ports): timeslices starve it."""
    g = 1_000_000_000
    return parse_topology({"schema": "xco-topology/1", "switch": [{"name": "a"}, {"name": "b"}],
                           "link": [{"ends": ["a", "b"], "bps": 2 * g}],
                           "host": [{"name": "h0", "nic_bps": 10 * g, "port_bps": 10 * g, "switch": "a",
                                     "vms": ["10.0.0.1"]},
                                    {"name": "h1", "nic_bps": g, "switch": "a", "vms": ["10.0.0.2"]},
                                    {"name": "h2", "nic_bps": g, "switch": "b", "vms": ["10.0.0.3"]}]})


@pytest.mark.parametrize("mode", ["timeslice", "hybrid"])
def test_hybrid_mode_opens_a_fast_host_at_its_slice_rate_where_timeslices_starve_it(mode):
    """In hybrid mode the controller's slice directive to a host with slow paths carries its slice
    rate (kind 2 on the wire) and the agent opens the destination at that rate, not the line rate;
    other hosts get plain slices.  The same network in timeslice mode never opens h0 at all."""
    topo = _fast_host_topology()
    net = _Net(topo, mode)
    agents = {x: net.add(topo, x) for x in range(3)}
    t = NOW + 100
    for x, a in agents.items():
        net.run(x, a.tick(t), t)
    assert all(a.under_control and a.mode == mode for a in agents.values())
    seen: dict[int, list] = {0: [], 1: []}
    real_handle = net.ctl.handle

    def handle(data, addr, now):  # record the directives on the wire
        out = real_handle(data, addr, now)
        for s in out:
            m = P.decode(s.data)
            if isinstance(m, P.Directive) and s.host in seen:
                seen[s.host].append(m)
        return out

    net.ctl.handle = handle
    states: dict[int, set] = {0: set(), 1: set()}
    for _ in range(40):
        t += 1_000
        for x in (0, 1):  # both send to h2, each with bytes queued
            a = agents[x]
            busy = ({d: DestStats(SMALL + 1, 9, 3000 * (d == 2), 2 * (d == 2)) for d in a.dests},
                    dict.fromkeys(a.small_flows, SMALL + 1))
            net.run(x, a.observe(t, *busy), t)
            states[x].add(a.states[2])
        net.run(2, agents[2].tick(t), t)
    assert states[1] >= {OPEN, CLOSED} and all(m.rate_bps is None for m in seen[1])
    if mode == "timeslice":
        assert states[0] == {CLOSED} and all(m.dest is None for m in seen[0])
    else:
        grants = [m for m in seen[0] if m.dest is not None]
        assert grants and all(m.rate_bps == 1_000_000_000 for m in grants)
        assert states[0] == {1_000_000_000, CLOSED}  # opened at 1 Gb/s, never at the 10 Gb/s line rate


def _figure21_topology():
    """s0-s4 and r on one switch; every port 100 Mb/s, NICs 1 Gb/s (Figure 21's shape)."""
    m = 1_000_000
    hosts = [{"name": f"s{i}", "nic_bps": 1000 * m, "port_bps": 100 * m, "switch": "w", "vms": [f"10.0.0.{i + 1}"]}
             for i in range(5)]
    hosts.append({"name": "r", "nic_bps": 1000 * m, "port_bps": 100 * m, "switch": "w", "vms": ["10.0.0.9"]})
    return parse_topology({"schema": "xco-topology/1", "switch": [{"name": "w"}], "host": hosts, "link": []})


@pytest.mark.parametrize("demand", [True, False])
def test_rate_mode_slow_senders_bounded_by_demand_leave_their_share_to_fast_ones(demand):
    """Three senders of 5 Mb/s and two of 1 Gb/s into one 100 Mb/s port, every one with a packet
    queued at every poll (so none gives up).  The paper's rate mode gives each a fifth (20 Mb/s):
    the port carries 55 Mb/s.  With demand reports (counters read by the agents every 5 ms, the
    classes' sent bytes growing at min(demand, rate in force)) the slow flows are bounded near
    6.25 Mb/s and the fast ones share the rest: the port carries over 90% of its rate."""
    m = 1_000_000
    topo = _figure21_topology()
    net = _Net(topo, "rate")
    r = topo.n_hosts - 1
    agents = {}
    for x in range(5):
        _, a = _core(topo, x, demand_window_us=50_000 if demand else 10**12)
        agents[x] = net.agents[x] = a
    agents[r] = net.add(topo, r)
    t = NOW + 100
    for x, a in agents.items():
        net.run(x, a.tick(t), t)
    want = {0: 5 * m, 1: 5 * m, 2: 5 * m, 3: 1000 * m, 4: 1000 * m}
    sent = {x: 0.0 for x in want}
    carried = []
    for step in range(400):  # 2 s in polls of 5 ms
        t += 5_000
        total = 0.0
        for x, a in ((x, agents[x]) for x in want):
            i = a.dests.index(r)
            rate = a.rates.get(r, 0)
            bps = min(want[x], rate)
            sent[x] += bps * 5_000 / 8e6
            total += bps
            n = len(a.dests)
            sent_bytes = np.array([int(sent[x]) if d == r else 0 for d in a.dests], dtype=np.int64)
            backlog = np.array([3000 if d == r else 0 for d in a.dests], dtype=np.int64)
            out = a.observe_counters(t, sent_bytes, backlog, backlog // 1500, np.full(len(a.small_flows), SMALL + 1))
            assert len(sent_bytes) == n
            net.run(x, out, t)
        net.run(r, agents[r].tick(t), t)
        if step >= 200:
            carried.append(total)
    use = sum(carried) / len(carried) / (100 * m)
    rates = {x: agents[x].rates.get(r, 0) for x in want}
    assert sum(rates.values()) <= 100 * m  # the port is never over-booked
    if demand:
        assert use > 0.9, (use, rates)
        assert all(5 * m < rates[x] <= 7 * m for x in (0, 1, 2)), rates
        assert set(net.ctl.sched.bound_bps) == {(0, r), (1, r), (2, r)}
    else:
        assert abs(use - 0.55) < 0.01 and set(rates.values()) == {20 * m}


def _dumps(core):
    """``observe_counters`` with the destination arrays built from dicts (host id -> value)."""
    small = np.full(len(core.small_flows), SMALL + 1, dtype=np.int64)  # every flow large at the first dump

    def dump(t, sent, queued):
        arr = [np.array([m.get(d, 0) for d in core.dests], dtype=np.int64) for m in (sent, queued)]
        pk = (arr[1] + 1499) // 1500
        out = core.observe_counters(t, arr[0], arr[1], pk, small if len(core.small_flows) else ())
        return [m for m in _msgs(out) if isinstance(m, P.GiveUp)]
    return dump


QUIET = 1_000
RATE_BPS = 100_000_000


def test_quiet_giveup_hands_the_slice_on_once_the_counters_prove_its_class_silent():
    """The quiet give-up (``giveup_quiet_us``): the destination in force is given up at the first
    dump that proves nothing entered its class for ``giveup_quiet_us`` (what it let out since the
    last dump is what was queued then, nothing queued now), not after ``giveup_after_us`` of empty
    samples; a queue that empties while bytes keep entering keeps its slice; a destination not in
    force is left to the hysteresis; with the rule off (0) nothing changes."""
    long_giveup = 10_000
    for quiet in (QUIET, 0):
        topo, core, ctl = _welcomed(giveup_after_us=long_giveup, giveup_quiet_us=quiet)
        dump = _dumps(core)
        other = next(d for d in core.dests if d != 5)
        t0 = NOW + 1_000
        assert dump(t0, {}, {5: 3000, other: 1500}) == []  # both reported, 3000 bytes for r1
        assert core.reported == {5, other}
        core.handle(ctl.slice(t0 + 100, 5, t0 + 100), t0 + 100)
        assert _open(core) == {5}
        # Drained at the slice's rate from its opening: read then (plus the margin).
        want = t0 + 100 + 3000 * 8_000_000 // RATE_BPS + 200
        assert core.drain_poll_us(RATE_BPS) == (want if quiet else None)
        # The queue drained and nothing entered since t0 (1.5 ms >= QUIET): given up at once.
        t1 = t0 + 1_500
        got = dump(t1, {5: 3000}, {other: 1500})
        if not quiet:  # the rule before: an empty sample starts the hysteresis, nothing more
            assert got == [] and core.reported == {5, other}
            assert dump(t1 + long_giveup - 1, {5: 3000}, {other: 1500}) == []
            assert [m.dest for m in dump(t1 + long_giveup, {5: 3000}, {other: 1500})] == [5]
            continue
        assert [m.dest for m in got] == [5] and core.reported == {other}
        # The destination not in force, emptied and silent, waits for the hysteresis.
        assert dump(t1 + 2 * QUIET, {5: 3000}, {}) == [] and core.reported == {other}
        assert core.drain_poll_us(RATE_BPS) is None  # r1 given up: nothing watched


def test_quiet_giveup_keeps_the_slice_of_a_queue_that_empties_while_its_sender_sends():
    topo, core, ctl = _welcomed(giveup_after_us=10_000, giveup_quiet_us=QUIET)
    dump = _dumps(core)
    t0 = NOW + 1_000
    dump(t0, {}, {5: 3000})
    core.handle(ctl.slice(t0 + 100, 5, t0 + 100), t0 + 100)
    t1 = t0 + 1_500
    # 3000 queued were sent and 1400 more came in and left: empty, but not silent.
    assert dump(t1, {5: 4400}, {}) == [] and core.reported == {5}
    assert core.drain_poll_us(RATE_BPS) is None  # passing straight through: the regular reads watch it
    # Silent from t1 on: a stretch shorter than QUIET is not enough ...
    assert dump(t1 + 400, {5: 4400}, {}) == []
    assert core.drain_poll_us(RATE_BPS) == t1 + QUIET  # ... the read that can prove it is asked for
    # ... bytes entering again break the stretch ...
    assert dump(t1 + 800, {5: 4400}, {5: 1400}) == []
    assert dump(t1 + 1_200, {5: 5800}, {}) == []  # what was queued left, nothing more: silent from t1 + 800
    assert dump(t1 + 800 + QUIET - 1, {5: 5800}, {}) == []
    assert [m.dest for m in dump(t1 + 800 + QUIET, {5: 5800}, {})] == [5]


def test_quiet_giveup_watches_only_the_destination_in_force_and_needs_two_dumps():
    topo, core, ctl = _welcomed(giveup_after_us=10_000, giveup_quiet_us=QUIET)
    dump = _dumps(core)
    other = next(d for d in core.dests if d != 5)
    t0 = NOW + 1_000
    dump(t0, {}, {5: 3000, other: 1500})
    core.handle(ctl.slice(t0 + 100, 5, t0 + 100), t0 + 100)
    # ``other`` is CLOSED: its queued bytes cannot leave; emptied (by a drop, a class change) it is
    # not the quiet rule's business: the hysteresis of giveup_after_us gives it up.
    assert [m.dest for m in dump(t0 + 5_000, {5: 3000}, {})] == [5]
    assert core.reported == {other}
    # A probe (no sent bytes) in between: the quiet stretch needs two dumps again.
    topo, core, ctl = _welcomed(giveup_after_us=10_000, giveup_quiet_us=QUIET)
    dump = _dumps(core)
    dump(t0, {}, {5: 3000})
    core.handle(ctl.slice(t0 + 100, 5, t0 + 100), t0 + 100)
    assert core.wants_counters()  # while r1 is watched, every read is a dump (no probe)
    core.observe_quiet(t0 + 500)
    assert dump(t0 + 3_000, {5: 3000}, {}) == []  # silent since when? unknown after the probe
    assert [m.dest for m in dump(t0 + 3_000 + QUIET, {5: 3000}, {})] == [5]


def test_gso_max_segs_is_a_key_the_gate_gets_only_with_the_slot_budget():
    base = ('schema = "xco-agent/1"\ntopology = "t.toml"\nhost = "s1"\nuplink = "eth0"\n'
            'controller = "127.0.0.1:7800"\n')
    assert loads_agent_config(base).gate_gso_max_segs == 1  # slot_budget is on by default
    assert loads_agent_config(base + "gso_max_segs = 4\n").gate_gso_max_segs == 4
    assert loads_agent_config(base + "gso_max_segs = 0\n").gate_gso_max_segs is None
    assert loads_agent_config(base + "slot_budget = false\n").gate_gso_max_segs is None
    for text in (base + "gso_max_segs = 65536\n", base + "gso_max_segs = -1\n", base + 'gso_max_segs = "1"\n'):
        with pytest.raises(AgentConfigError) as e:
            loads_agent_config(text)
        assert e.value.key == "gso_max_segs"
