"""Hybrid mode: timeslices, rate-limited inside the slice for the hosts with slow paths."""

import json

from hypothesis import HealthCheck, given, settings

from xtc.xco.replay import replay
from xtc.xco.scheduler import FastScheduler
from xtc.xco.scheduler.hybrid import HybridScheduler, slice_rates_bps
from xtc.xco.topology import parse_topology
from xco import strategies
from xco.strategies import G, SLICE


def scenarios():
    return strategies.scenarios(strategies.topologies(),
                                ["backlog", "backlog", "giveup", "tick", "tick", "leave", "wait"], 40)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_hybrid_link_feasibility_always_holds(scenario):
    topo, events = scenario
    h = HybridScheduler(topo, SLICE)
    r = slice_rates_bps(topo)
    # r_x is no faster than the NIC, nor than any link on any path of x: every host is schedulable
    for x in range(topo.n_hosts):
        assert r[x] <= topo.nic_bps[x]
        for d in range(topo.n_hosts):
            if d != x:
                assert (topo.link_bps[topo.path(x, d)] >= r[x]).all()
    rate_in_force: dict[int, int] = {}
    t = 0
    for kind, x, arg in events:
        if kind == "backlog":
            out = h.backlog(t, x, arg)
        elif kind == "giveup":
            out = h.giveup(t, x, arg) if arg != x else []
        elif kind == "leave":
            out = h.leave(t, x)
        elif kind == "wait":
            t += arg
            out = h.advance(t)
        else:
            t = (t // SLICE + 1) * SLICE
            out = h.advance(t)
        for d in out:
            if d.dest is None:
                assert d.rate_bps is None
                rate_in_force.pop(d.host, None)
            else:
                assert d.rate_bps == r[d.host]
                rate_in_force[d.host] = d.rate_bps
        # what the hosts may send, on the REAL topology: within every link's capacity
        load = [0] * topo.n_links
        for s, d in enumerate(h.dest):
            if d is not None:
                assert s in rate_in_force
                for ln in topo.path(s, d):
                    load[ln] += rate_in_force[s]
        assert all(load[ln] <= topo.link_bps[ln] for ln in range(topo.n_links))
        assert list(h.link_load_bps()) == load


@settings(max_examples=60, deadline=None, derandomize=True)
@given(scenarios())
def test_without_slow_paths_hybrid_is_the_timeslice_scheduler(scenario):
    topo, events = scenario
    if topo.slow_paths:
        return
    h, f = HybridScheduler(topo, SLICE), FastScheduler(topo, SLICE)
    t = 0
    for kind, x, arg in events:
        if kind == "backlog":
            a, b = h.backlog(t, x, arg), f.backlog(t, x, arg)
        elif kind == "tick":
            t = (t // SLICE + 1) * SLICE
            a, b = h.advance(t), f.advance(t)
        else:
            continue
        assert [(d.t_us, d.host, d.dest, d.end_us) for d in a] == [(d.t_us, d.host, d.dest, d.end_us) for d in b]
        assert all(d.rate_bps in (None, topo.nic_bps[d.host]) for d in a)


def fast_host_topology():
    """h0 has a 10 Gb/s NIC on a 1 Gb/s network (the paper's section 7 limitation)."""
    return parse_topology({"schema": "xco-topology/1", "switch": [{"name": "a"}, {"name": "b"}],
                           "link": [{"ends": ["a", "b"], "bps": 2 * G}],
                           "host": [{"name": "h0", "nic_bps": 10 * G, "port_bps": 10 * G, "switch": "a"},
                                    {"name": "h1", "nic_bps": G, "switch": "a"},
                                    {"name": "h2", "nic_bps": G, "switch": "b"},
                                    {"name": "h3", "nic_bps": G, "switch": "b"}]})


def test_a_host_timeslices_starve_is_served_rate_limited():
    topo = fast_host_topology()
    assert {s.host for s in topo.slow_paths} == {"h0"}
    ts, hy = FastScheduler(topo, SLICE), HybridScheduler(topo, SLICE)
    for s in (ts, hy):
        s.backlog(0, 0, [2])
        s.backlog(0, 1, [3])
    assert ts.dest[0] is None  # 10 Gb/s never fits a 1 Gb/s port: starved for good
    for k in range(1, 5):
        ts.advance(k * SLICE)
        assert ts.dest[0] is None
    out = hy.advance(0)
    assert hy.dest[0] == 2 and hy.dest[1] == 3  # 1 + 1 Gb/s over the 2 Gb/s link
    assert hy.limited == frozenset({0})
    assert list(slice_rates_bps(topo)) == [G, G, G, G]
    assert out == []


def test_replay_hybrid_mode_prints_the_rate():
    topo = fast_host_topology()
    lines = [json.dumps({"t_us": 0, "host": "h0", "event": "backlog", "dests": ["h2"]}),
             json.dumps({"t_us": 0, "host": "h1", "event": "backlog", "dests": ["h2"]})]
    out = list(replay(topo, lines, slice_us=SLICE, mode="hybrid", until_us=2 * SLICE))
    assert out == [
        {"t_us": 0, "host": "h0", "dest": "h2", "rate_bps": G},
        {"t_us": SLICE, "host": "h1", "dest": "h2", "rate_bps": G},
        {"t_us": SLICE, "host": "h0", "dest": None, "rate_bps": None},
        {"t_us": 2 * SLICE, "host": "h0", "dest": "h2", "rate_bps": G},
        {"t_us": 2 * SLICE, "host": "h1", "dest": None, "rate_bps": None},
    ]
