"""Properties of the timeslice scheduler on random trees, NIC rates and event sequences.

After every event: the NIC rates admitted on every link sum to at most its capacity; the fast
implementation issued exactly the reference's directives; no waiting sender could be added
without breaking feasibility (maximality); the reference's active groups match the directives;
every sender in force ends its slice at the next slot boundary.  Over the run: a schedulable
sender that waits is served within the bound stated in xtc.xco.scheduler.
"""

from hypothesis import HealthCheck, given, settings

from xtc.xco.scheduler import FastScheduler, RateLimiter, ReferenceScheduler
from xco import strategies
from xco.strategies import SLICE


def scenarios():
    return strategies.scenarios(
        strategies.topologies(nic_gbps=(1, 1, 1, 2, 5), loops=True),
        ["backlog", "backlog", "giveup", "giveup_current", "tick", "tick", "tick", "leave", "wait"], 60)


def schedulable(topo, x, group):
    nic = topo.nic_bps[x]
    return any((topo.link_bps[topo.path(x, d)] >= nic).all() for d in group)


def check_state(topo, ref, fast):
    load = ref.link_load_bps()
    assert (load <= topo.link_bps).all(), "a link is over capacity"
    assert ref.dest == fast.dest and ref.slice_end == fast.slice_end
    assert ref.key == fast.key  # the same rotation order
    assert [ref.backlog_group(x) for x in range(topo.n_hosts)] == [fast.backlog_group(x) for x in range(topo.n_hosts)]
    # fast bookkeeping: residual = capacity - load
    assert fast.res == (topo.link_bps - load).tolist()
    # reference bookkeeping: alpha_ij is exactly the senders whose directive's path crosses ij
    for ij in range(topo.n_links):
        expect = {x for x in range(topo.n_hosts) if ref.dest[x] is not None and ij in topo.path(x, ref.dest[x])}
        assert ref.alpha.get(ij, set()) == expect
    # every sender in force has a directive in its backlog group, ending at the next boundary
    ends = {ref.slice_end[x] for x in range(topo.n_hosts) if ref.dest[x] is not None}
    assert ends == ({ref.next_expiry_us()} if ends else set())
    for x in range(topo.n_hosts):
        if ref.dest[x] is not None:
            assert ref.dest[x] in ref.backlog_group(x)
    # maximality: no waiting sender fits on any of its backlogged paths
    for x in range(topo.n_hosts):
        if ref.dest[x] is None:
            for d in ref.backlog_group(x):
                p = topo.path(x, d)
                assert (load[p] + topo.nic_bps[x] > topo.link_bps[p]).any(), "a waiting sender would fit"


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_equals_reference_and_invariants_hold(scenario):
    topo, events = scenario
    ref, fast = ReferenceScheduler(topo, SLICE), FastScheduler(topo, SLICE)
    t = 0
    # bound bookkeeping: host -> [boundaries waited, allowed]
    waiting: dict[int, list[int]] = {}
    for kind, x, arg in events:
        boundary = False
        if kind == "tick":
            nxt = ref.next_expiry_us()
            if nxt is None:
                continue
            t = nxt
            boundary = True
            a, b = ref.advance(t), fast.advance(t)
        elif kind == "wait":
            t += arg
            nxt = ref.next_expiry_us()
            if nxt is not None and nxt <= t:
                t = nxt  # one boundary at a time, for the bound bookkeeping
                boundary = True
            a, b = ref.advance(t), fast.advance(t)
        elif kind == "backlog":
            a, b = ref.backlog(t, x, arg), fast.backlog(t, x, arg)
        elif kind == "giveup":
            a, b = ref.giveup(t, x, arg), fast.giveup(t, x, arg)
        elif kind == "giveup_current":
            d = ref.dest[x]
            if d is None:
                continue
            before = ref.backlog_group(x)
            a, b = ref.giveup(t, x, d), fast.giveup(t, x, d)
            # section 3.2: the given-up destination leaves B_x and x no longer sends to it
            assert ref.backlog_group(x) == before - {d}
            assert ref.dest[x] != d
        else:
            a, b = ref.leave(t, x), fast.leave(t, x)
            assert ref.backlog_group(x) == frozenset() and ref.dest[x] is None
            assert all(x not in ref.backlog_group(y) for y in range(topo.n_hosts))
        assert a == b, (kind, x, arg)
        check_state(topo, ref, fast)

        # the bound: K = 1 + number of other schedulable senders granted less recently
        for y in range(topo.n_hosts):
            group = ref.backlog_group(y)
            if ref.dest[y] is None and group and schedulable(topo, y, group):
                if y not in waiting:
                    ahead = sum(1 for z in range(topo.n_hosts) if z != y and ref.key[z] < ref.key[y]
                                and ref.backlog_group(z) and schedulable(topo, z, ref.backlog_group(z)))
                    waiting[y] = [0, ahead + 1]
                elif boundary:
                    waiting[y][0] += 1
                    assert waiting[y][0] < waiting[y][1], f"host {y} waited {waiting[y][0]} boundaries"
            else:
                waiting.pop(y, None)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(scenarios())
def test_rate_mode_stays_within_capacity(scenario):
    topo, events = scenario
    r = RateLimiter(topo)
    for kind, x, arg in events:
        if kind == "backlog":
            r.backlog(0, x, arg)
        elif kind.startswith("giveup") and arg is not None:
            r.giveup(0, x, arg)
        elif kind == "leave":
            r.leave(0, x)
        load = r.link_load_bps()
        assert (load <= topo.link_bps).all()
        for (s, d), rate in r.rate_bps.items():
            assert d in r.B[s] and rate >= 0
            assert rate * len(r.B[s]) <= topo.nic_bps[s]
