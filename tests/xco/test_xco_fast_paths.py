"""The fast scheduler's alternative code paths (waiting lists updated in bulk or flow by flow) each
issue the reference's directives, on random small networks and on many hosts backlogged at once."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from xco import strategies
from xco.strategies import SLICE

from xtc.xco.scheduler import FastScheduler, ReferenceScheduler
from xtc.xco.topology import parse_topology
from xtc_lab.xco.topologies import fig27, fig27_pairs


class AlwaysBulk(FastScheduler):
    bulk_adds = 0


class NeverBulk(FastScheduler):
    bulk_adds = 10**9


VARIANTS = [AlwaysBulk, NeverBulk, FastScheduler]


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
