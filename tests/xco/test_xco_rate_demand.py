"""Rate mode with demand bounds: flows that send less than their share leave the rest to the others.

Checked on a star (Figure 21's shape) by hand, and on random trees and event sequences: links and
NICs never over capacity, a bounded flow never above its bound, and with no bounds the paper's rates
exactly.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xco import strategies
from xtc.xco.scheduler import EventError, RateLimiter
from xtc.xco.topology import parse_topology

M = 1_000_000


def star(n_senders: int, link_bps: int = 100 * M, nic_bps: int = 1000 * M):
    """``n_senders`` hosts and one receiver ``r`` on one switch; every port ``link_bps``."""
    hosts = [{"name": f"s{i}", "nic_bps": nic_bps, "port_bps": link_bps, "switch": "w"} for i in range(n_senders)]
    hosts.append({"name": "r", "nic_bps": nic_bps, "port_bps": link_bps, "switch": "w"})
    return parse_topology({"schema": "xco-topology/1", "switch": [{"name": "w"}], "host": hosts, "link": []})


def test_slow_flows_bounded_leave_their_share_to_the_fast_ones() -> None:
    topo = star(5)
    r_ = topo.n_hosts - 1
    rl = RateLimiter(topo)
    for x in range(5):
        rl.backlog(0, x, [r_])
    assert {rl.rate_bps[(x, r_)] for x in range(5)} == {20 * M}  # the paper: a fifth each
    out = rl.demand(1, 0, [(r_, 6 * M)])
    assert rl.rate_bps[(0, r_)] == 6 * M
    assert {rl.rate_bps[(x, r_)] for x in range(1, 5)} == {94 * M // 4}
    assert {d.host for d in out} == {0, 1, 2, 3, 4}  # every rate moved
    rl.demand(2, 1, [(r_, 6 * M)])
    rl.demand(3, 2, [(r_, 6 * M)])
    assert [rl.rate_bps[(x, r_)] for x in range(5)] == [6 * M, 6 * M, 6 * M, 41 * M, 41 * M]
    assert sum(rl.link_load_bps()[topo.path(0, r_)[-1:]]) == 100 * M  # the receiver's port is full
    # a bound above the share changes nothing; lifting (0) or a give-up gives the share back
    rl.demand(4, 3, [(r_, 60 * M)])
    assert rl.rate_bps[(3, r_)] == 41 * M
    rl.demand(5, 0, [(r_, 0)])
    assert [rl.rate_bps[(x, r_)] for x in range(5)] == [88 * M // 3] * 1 + [6 * M, 6 * M] + [88 * M // 3] * 2
    rl.giveup(6, 1, r_)
    assert (1, r_) not in rl.bound_bps
    rl.backlog(7, 1, [r_])
    assert rl.rate_bps[(1, r_)] == 94 * M // 4  # back unbounded


def test_a_link_fraction_shares_that_fraction_of_each_link_and_leaves_the_nics_whole() -> None:
    topo = star(5)
    r_ = topo.n_hosts - 1
    rl = RateLimiter(topo, link_fraction=0.97)
    for x in range(5):
        rl.backlog(0, x, [r_])
    assert {rl.rate_bps[(x, r_)] for x in range(5)} == {97 * M // 5}
    assert rl.link_load_bps().max() <= 97 * M
    # a sender whose NIC is its bottleneck keeps its NIC's rate (the NIC is not shared)
    one = star(1, link_bps=1000 * M, nic_bps=100 * M)
    rl1 = RateLimiter(one, link_fraction=0.9)
    rl1.backlog(0, 0, [1])
    assert rl1.rate_bps[(0, 1)] == 100 * M
    # demand bounds fill what is shared, not the whole link
    rl.demand(1, 0, [(r_, 7 * M)])
    assert [rl.rate_bps[(x, r_)] for x in range(5)] == [7 * M] + [90 * M // 4] * 4
    # above 1 the senders through a link may exceed it by that share (the NICs still bound them)
    over = RateLimiter(topo, link_fraction=1.02)
    for x in range(5):
        over.backlog(0, x, [r_])
    assert {over.rate_bps[(x, r_)] for x in range(5)} == {102 * M // 5}
    assert over.link_load_bps().max() == 102 * M
    for bad in (0.0, -0.5, 1.11, float("nan")):
        with pytest.raises(ValueError, match="link_fraction"):
            RateLimiter(topo, link_fraction=bad)


def test_demand_of_a_flow_not_backlogged_is_ignored_and_bad_reports_refused() -> None:
    topo = star(2)
    rl = RateLimiter(topo)
    rl.backlog(0, 0, [2])
    assert rl.demand(1, 1, [(2, 5 * M)]) == [] and rl.bound_bps == {}
    for bad in ([(0, 5 * M)], [(2, -1)], [(2, True)], [(9, 5 * M)]):
        try:
            rl.demand(2, 0, bad)
        except EventError:
            pass
        else:
            raise AssertionError(f"accepted {bad}")
    assert rl.bound_bps == {}


def _paper_rates(topo, B):
    """The paper's rates, computed here from the formula (no bounds)."""
    import numpy as np

    n = np.zeros(topo.n_links, dtype=np.int64)
    for x, ds in enumerate(B):
        for d in ds:
            n[topo.path(x, d)] += 1
    share = np.where(n > 0, topo.link_bps // np.maximum(n, 1), topo.link_bps)
    return {(x, d): min(int(topo.nic_bps[x]) // len(ds), int(share[topo.path(x, d)].min()))
            for x, ds in enumerate(B) for d in ds}


def scenarios():
    return strategies.scenarios(strategies.topologies(nic_gbps=(1, 1, 1, 2, 5), loops=True),
                                ["backlog", "backlog", "giveup", "leave", "demand", "demand", "demand"], 40)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(scenarios(), st.randoms(use_true_random=False))
def test_bounds_keep_every_link_and_nic_within_capacity(scenario, rnd) -> None:
    topo, events = scenario
    rl = RateLimiter(topo)
    for kind, x, arg in events:
        if kind == "backlog":
            rl.backlog(0, x, arg)
        elif kind == "giveup":
            rl.giveup(0, x, arg)
        elif kind == "leave":
            rl.leave(0, x)
        elif rl.B[x]:  # demand: bound, lift or re-bound some of x's flows
            rl.demand(0, x, [(d, rnd.choice([0, 10 * M, 200 * M, 700 * M, 3000 * M])) for d in rl.B[x] if rnd.random() < 0.7])
        assert (rl.link_load_bps() <= topo.link_bps).all(), "a link is over capacity"
        for s in range(topo.n_hosts):
            assert sum(r for (y, _), r in rl.rate_bps.items() if y == s) <= topo.nic_bps[s], "a NIC is over capacity"
        for f, b in rl.bound_bps.items():
            assert f[1] in rl.B[f[0]] and rl.rate_bps[f] <= b
        paper = _paper_rates(topo, rl.B)
        for f, r in rl.rate_bps.items():
            if f not in rl.bound_bps:
                assert r >= paper[f], "an unbounded flow got less than the paper's share"
        if not rl.bound_bps:
            assert rl.rate_bps == paper
