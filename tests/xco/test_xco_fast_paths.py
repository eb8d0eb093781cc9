"""The fast scheduler's alternative code paths (pure Python: waiting lists updated in bulk or flow by
flow; compiled kernels: waiting lists rebuilt after every event or only at slot boundaries) each
issue the reference's directives, on random small networks and on many hosts backlogged at once,
in the same order, with the same rotation keys."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from xco import strategies
from xco.strategies import SLICE

from xtc.xco.scheduler import FastScheduler, ReferenceScheduler
from xtc.xco.scheduler.fast import IMPL, KernelScheduler, PyFastScheduler
from xtc.xco.topology import parse_topology
from xtc_lab.xco.topologies import fig27, fig27_pairs


class AlwaysBulk(PyFastScheduler):
    bulk_adds = 0


class NeverBulk(PyFastScheduler):
    bulk_adds = 10**9


class KernelAlwaysRebuild(KernelScheduler):
    max_dirty = -1  # the waiting lists rebuilt after every event


class KernelNeverRebuild(KernelScheduler):
    max_dirty = 10**9  # only at slot boundaries (every changed host looked at from the dirty list)


class KernelBulkReports(KernelScheduler):
    """Every backlog report, even of one host, recorded by the bulk path of backlog_many."""

    bulk_hosts = 0

    def backlog(self, t_us, x, dests):
        return self.backlog_many(t_us, {x: dests})


VARIANTS = [AlwaysBulk, NeverBulk, PyFastScheduler]
if IMPL == "numba":
    VARIANTS += [KernelAlwaysRebuild, KernelNeverRebuild, KernelBulkReports, KernelScheduler]


def test_the_controller_uses_the_compiled_kernels_when_numba_is_installed():
    pytest.importorskip("numba")
    assert IMPL == "numba" and FastScheduler is KernelScheduler


def run_events(sched, events):
    out = []
    t = 0
    for kind, x, arg in events:
        if kind == "tick":
            nxt = sched.next_expiry_us()
            if nxt is None:
                continue
            t = nxt
            out.append(sched.advance(t))
        elif kind == "wait":
            t += arg
            out.append(sched.advance(t))
        elif kind == "backlog":
            out.append(sched.backlog(t, x, arg))
        elif kind == "backlog_many":
            out.append(sched.backlog_many(t, arg))
        elif kind == "giveup":
            out.append(sched.giveup(t, x, arg))
        elif kind == "giveup_current":
            if sched.dest[x] is not None:
                out.append(sched.giveup(t, x, sched.dest[x]))
        else:
            out.append(sched.leave(t, x))
    return out


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.scenarios(strategies.topologies(nic_gbps=(1, 1, 1, 2, 5), loops=True),
                            ["backlog", "giveup", "giveup_current", "tick", "tick", "leave", "wait"], 50))
def test_every_code_path_issues_the_reference_directives(scenario):
    topo, events = scenario
    expect = run_events(ReferenceScheduler(topo, SLICE), events)
    for cls in VARIANTS:
        assert run_events(cls(topo, SLICE), events) == expect, cls.__name__


def run_batched(sched, events):
    """The events of run_events (but ``giveup_current``), with every run of backlog and give-up events
    at one instant given to events_at: one list of directives per run, then the scheduler's state."""
    out = []
    batch = []
    t = 0
    for kind, x, arg in events + [("wait", None, 1)]:
        if kind in ("backlog", "giveup"):
            batch.append((kind, x, arg))
            continue
        if batch:
            out.append(sched.events_at(t, batch))
            out.append((list(sched.dest), list(sched.key), [sorted(sched.backlog_group(y)) for y in range(sched.n)]))
            batch = []
        if kind == "tick":
            nxt = sched.next_expiry_us()
            if nxt is not None:
                t = nxt
                out.append(sched.advance(t))
        elif kind == "wait":
            t += arg
            out.append(sched.advance(t))
        else:
            out.append(sched.leave(t, x))
    return out


BATCH_VARIANTS = [PyFastScheduler] + ([KernelAlwaysRebuild, KernelNeverRebuild, KernelScheduler]
                                      if IMPL == "numba" else [])


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.scenarios(strategies.topologies(nic_gbps=(1, 1, 1, 2, 5), loops=True),
                            ["backlog", "backlog", "giveup", "giveup", "giveup", "tick", "leave", "wait"], 60))
def test_events_at_one_instant_issue_the_reference_directives(scenario):
    """A batch of backlog reports and give-ups at one instant (events_at, one kernel call) issues the
    directives of the same events one after the other, and leaves the same state."""
    topo, events = scenario
    expect = run_batched(ReferenceScheduler(topo, SLICE), events)
    for cls in BATCH_VARIANTS:
        assert run_batched(cls(topo, SLICE), events) == expect, cls.__name__


@pytest.mark.skipif(IMPL != "numba", reason="run_batch is a kernel")
def test_events_at_a_flow_reported_again_in_the_batch_keeps_its_new_key():
    """Host 0 was served towards 1, then 2.  In one batch it is served towards 1 again, gives it up,
    and reports 1 and 2: 2 (served less recently now) goes first; with the keys known before the
    batch it would be 1."""
    topo = parse_topology(fig27(2, hosts_per_rack=4, racks_per_row=3))
    scheds = [ReferenceScheduler(topo, SLICE), KernelScheduler(topo, SLICE), KernelAlwaysRebuild(topo, SLICE)]
    for s in scheds:
        s.backlog(0, 0, [1])
        s.giveup(10, 0, 1)
        s.backlog(20, 0, [2])
        s.giveup(30, 0, 2)
    outs = []
    for s in scheds:
        outs.append(s.events_at(40, [("backlog", 0, [1]), ("giveup", 0, 1), ("backlog", 0, iter([1, 2, 1])),
                                     ("giveup", 3, 4), ("backlog", 5, [6]), ("backlog", 5, [6])]))
    assert [(d.host, d.dest) for d in outs[0]] == [(0, 1), (0, None), (0, 2), (5, 6)]
    for s, o in zip(scheds[1:], outs[1:]):
        assert o == outs[0]
        assert s.key == scheds[0].key and s.dest == scheds[0].dest
        assert [s.backlog_group(x) for x in range(s.n)] == [scheds[0].backlog_group(x) for x in range(s.n)]
    # a slot boundary due at the batch's instant is handled first
    assert scheds[0].next_expiry_us() == SLICE
    outs = [s.events_at(SLICE + 5, [("backlog", 7, [8]), ("giveup", 0, 2)]) for s in scheds]
    assert [d.t_us for d in outs[0]][:1] == [SLICE] and outs[1] == outs[0] and outs[2] == outs[0]
    # anything but a well-formed backlog or give-up: one after the other, same errors
    from xtc.xco.scheduler import EventError
    for bad in ([("giveup", 0, 0), ("leave", 1, None)], [("backlog", 0, [0]), ("giveup", 1, 2)]):
        for s in scheds:
            with pytest.raises(EventError):
                s.events_at(SLICE + 50, bad)


@pytest.mark.parametrize("seed", [1, 2])
def test_many_hosts_backlogged_at_once_then_slot_boundaries(seed):
    rows = 2
    topo = parse_topology(fig27(rows, hosts_per_rack=4, racks_per_row=3))
    n = topo.n_hosts
    rng = random.Random(seed)
    groups = {x: [d] for x, d in fig27_pairs(rows, hosts_per_row=12)}
    for x in rng.sample(range(n), n // 2):  # some hosts with several destinations
        groups[x] = groups[x] + rng.sample([d for d in range(n) if d != x], 2)
    events = [("backlog_many", None, groups)] + [("tick", None, None)] * 5
    for _ in range(40):
        x = rng.randrange(n)
        kind = rng.choice(["giveup_current", "backlog", "tick", "wait", "leave"])
        arg = {"backlog": [rng.choice([d for d in range(n) if d != x])], "wait": rng.randrange(1, SLICE)}.get(kind)
        events.append((kind, x, arg))
    events.append(("backlog_many", None, {x: [d for d in rng.sample(range(n), 3) if d != x] for x in range(n)}))
    events += [("tick", None, None)] * 5
    expect = run_events(ReferenceScheduler(topo, SLICE), events)
    assert sum(len(o) for o in expect) > 50
    for cls in VARIANTS:
        assert run_events(cls(topo, SLICE), events) == expect, cls.__name__


def test_rotation_order_over_many_slot_boundaries():
    """400 hosts, each backlogged towards 1 to 3 others, far more senders than capacity: who is served
    at each boundary, in which order, and the order of the holds (the order in which the senders in
    force were granted) all follow the rotation; every variant must issue the reference's directives
    in the same order and keep the same rotation keys after every event."""
    rows = 2
    topo = parse_topology(fig27(rows))
    n = topo.n_hosts
    rng = random.Random(7)
    groups = {x: [d] for x, d in fig27_pairs(rows)}
    for x in rng.sample(range(n), n // 4):
        groups[x] = groups[x] + [d for d in rng.sample(range(n), 2) if d != x]
    scheds = [ReferenceScheduler(topo, SLICE)] + [cls(topo, SLICE) for cls in VARIANTS]
    outs = [s.backlog_many(0, groups) for s in scheds]
    t = 0
    holds = 0
    for step in range(240):
        kind = rng.choice(["tick", "tick", "giveup_current", "backlog", "wait"])
        x = rng.randrange(n)
        if kind == "tick":
            t = scheds[0].next_expiry_us() or t + SLICE
            outs = [s.advance(t) for s in scheds]
        elif kind == "wait":
            t += rng.randrange(1, SLICE)
            outs = [s.advance(t) for s in scheds]
        elif kind == "giveup_current":
            d = scheds[0].dest[x]
            if d is None:
                continue
            outs = [s.giveup(t, x, d) for s in scheds]
        else:
            ds = [d for d in rng.sample(range(n), 2) if d != x]
            outs = [s.backlog(t, x, ds) for s in scheds]
        holds += sum(1 for dv in outs[0] if dv.dest is None)
        for s, o in zip(scheds[1:], outs[1:]):
            assert o == outs[0], (type(s).__name__, step, kind)
            assert s.key == scheds[0].key, (type(s).__name__, step, kind)
            assert s.dest == scheds[0].dest
    assert holds > 1000  # rotation: many senders are sent a hold at the boundaries


@pytest.mark.skipif(IMPL != "numba", reason="the bulk path of backlog_many is the kernel's")
def test_bulk_backlog_reports_take_every_branch_like_the_reference():
    """backlog_many of many hosts recorded in one kernel call: hosts already sending (no trigger),
    flows already known and repeated in a report (not added twice), hosts granted before whose
    destinations keep their rotation keys (a destination served recently goes after one never
    served), a slot boundary due at the report's time, and reports the generic path takes
    (numpy ints, iterators) or refuses (same error)."""
    from xtc.xco.scheduler import EventError

    rows = 2
    topo = parse_topology(fig27(rows, hosts_per_rack=4, racks_per_row=3))
    n = topo.n_hosts
    ref, bulk = ReferenceScheduler(topo, SLICE), KernelBulkReports(topo, SLICE)
    scheds = [ref, bulk]

    def same(f):
        outs = [f(s) for s in scheds]
        assert outs[1] == outs[0]
        assert [bulk.backlog_group(x) for x in range(n)] == [ref.backlog_group(x) for x in range(n)]
        assert bulk.key == ref.key and bulk.dest == ref.dest
        return outs[0]

    # host 0 is served towards 1, then 2; it gives both up (their destination keys stay)
    same(lambda s: s.backlog_many(0, {0: [1]}))
    same(lambda s: s.giveup(10, 0, 1))
    same(lambda s: s.backlog_many(20, {0: [2]}))
    same(lambda s: s.giveup(30, 0, 2))
    assert ref.dest[0] is None
    # host 0 towards 2 (served last), 3 (never) and 1 (served first), with a repeat: it goes to 3,
    # the destination never served
    out = same(lambda s: s.backlog_many(40, {0: [2, 3, 1, 3]}))
    assert ref.dest[0] == 3 and [d.host for d in out] == [0]
    same(lambda s: s.giveup(50, 0, 3))
    assert ref.dest[0] == 1  # then 1, served before 2
    # everybody reports at once, host 0 again (sending: not triggering)
    groups = {x: [d] for x, d in fig27_pairs(rows, hosts_per_row=12)}
    groups[0] = [3, 2]
    same(lambda s: s.backlog_many(60, groups))
    assert ref.dest[0] == 1
    # known flows again, new ones for some (some sending, some waiting), at a slot boundary
    t = ref.next_expiry_us()
    assert t is not None
    waiting = [x for x in range(n) if ref.dest[x] is None][:3]
    sending = [x for x in range(n) if ref.dest[x] is not None][:3]
    groups2 = {x: list(ref.backlog_group(x)) + [(x + 5) % n] for x in waiting + sending}
    groups2.update({x: list(ref.backlog_group(x)) for x in range(n) if x not in groups2 and ref.backlog_group(x)})
    out = same(lambda s: s.backlog_many(t, groups2))
    assert any(d.dest is None for d in out) and any(d.dest is not None for d in out)  # the boundary ran
    # nothing new at all: nothing issued
    assert same(lambda s: s.backlog_many(t + 1, {x: list(ref.backlog_group(x)) for x in range(n)})) == []
    # numpy ints and iterators take the generic path, with the same result
    import numpy as np
    same(lambda s: s.backlog_many(t + 2, {np.int64(x): iter([np.int64((x + 7) % n)]) for x in range(n)}))
    same(lambda s: s.backlog_many(t + 3, {x: iter([(x + 9) % n]) for x in range(n)}))
    # refused like the reference, nothing changed
    for bad in ({x: [x] for x in range(n)}, {x: [n] for x in range(n)}, {x: [-1] for x in range(n)},
                {n: [0], **{x: [0] for x in range(1, n)}}, {x: [True] for x in range(1, n)}):
        for s in scheds:
            with pytest.raises(EventError):
                s.backlog_many(t + 4, bad)
    same(lambda s: s.advance(t + 5 * SLICE))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_backlog_arrays_issue_the_reference_directives(seed):
    """backlog_arrays (the reports as arrays) against the reference's backlog_many of the same
    reports as a mapping, from nothing and then at random moments (slot boundaries due, hosts
    sending, flows known, given up and reported again, repeated destinations, empty reports);
    bad arrays are refused like the reference refuses the mapping, and change nothing."""
    import numpy as np

    from xtc.xco.scheduler import EventError

    rows = 2
    topo = parse_topology(fig27(rows, hosts_per_rack=4, racks_per_row=3))
    n = topo.n_hosts
    rng = random.Random(seed)
    scheds = [ReferenceScheduler(topo, SLICE)] + [cls(topo, SLICE) for cls in VARIANTS]
    ref = scheds[0]

    def arrays(groups):
        xs = np.array(list(groups), np.int64)
        counts = np.array([len(v) for v in groups.values()], np.int64)
        ds = np.array([d for v in groups.values() for d in v], np.int64)
        return xs, counts, ds

    t = 0
    taken = 0
    for step in range(30):
        hosts = rng.sample(range(n), rng.randrange(1, n + 1))
        groups = {x: [rng.choice([d for d in range(n) if d != x]) for _ in range(rng.randrange(0, 4))]
                  for x in hosts}
        if step == 0:
            groups = {x: [d] for x, d in fig27_pairs(rows, hosts_per_row=12)}
        outs = [ref.backlog_many(t, groups)] + [s.backlog_arrays(t, *arrays(groups)) for s in scheds[1:]]
        taken += len(outs[0])
        for s, o in zip(scheds[1:], outs[1:]):
            assert o == outs[0], (type(s).__name__, step)
            assert s.key == ref.key and s.dest == ref.dest, (type(s).__name__, step)
            assert [s.backlog_group(x) for x in range(n)] == [ref.backlog_group(x) for x in range(n)]
        # between reports: give-ups of the current destination (their keys stay) and time passing
        for x in rng.sample(range(n), 3):
            d = ref.dest[x]
            if d is not None:
                outs = [s.giveup(t, x, d) for s in scheds]
                assert all(o == outs[0] for o in outs)
        t += rng.choice([1, SLICE // 3, SLICE])
    assert taken > 100
    # refused: the reference's errors for the same mapping; nothing changed
    bad = [(np.array([0, 1]), np.array([1, 1]), np.array([1, 1])),        # 1 towards itself
           (np.array([0, n]), np.array([1, 1]), np.array([1, 2])),        # no host n
           (np.array([0, 1]), np.array([1, 1]), np.array([1, -1])),       # no host -1
           (np.array([0, 0]), np.array([1, 1]), np.array([1, 2])),        # host twice
           (np.array([0, 1]), np.array([1, 2]), np.array([1, 2])),        # counts do not match
           (np.array([0, 1]), np.array([-1, 3]), np.array([1, 2])),       # negative count
           (np.array([0.0]), np.array([1]), np.array([1])),               # not ints
           (np.array([[0]]), np.array([1]), np.array([1]))]               # not 1-D
    state = [(s.key, s.dest, [s.backlog_group(x) for x in range(n)]) for s in scheds]
    for arrs in bad:
        for s in scheds[1:]:
            with pytest.raises(EventError):
                s.backlog_arrays(t, *arrs)
    with pytest.raises(EventError):
        scheds[1].backlog_arrays(scheds[1].now_us - 1, *arrays({0: [1]}))  # time going backwards
    assert [(s.key, s.dest, [s.backlog_group(x) for x in range(n)]) for s in scheds] == state
