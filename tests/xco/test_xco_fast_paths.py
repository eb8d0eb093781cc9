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


VARIANTS = [AlwaysBulk, NeverBulk, PyFastScheduler]
if IMPL == "numba":
    VARIANTS += [KernelAlwaysRebuild, KernelNeverRebuild, KernelScheduler]


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
