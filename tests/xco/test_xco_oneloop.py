"""XCo's one loop (xtc_lab.xco.oneloop): the product's agent and controller cores over in-memory
gates and a simulated clock, and the switch-queue simulator driven by it."""

import pytest

from xtc.xco.topology import parse_topology
from xtc_lab.xco.oneloop import XcoLoop
from xtc_lab.xco.simulate import fig27_flows, simulate
from xtc_lab.xco.topologies import fig27

G = 1_000_000_000
ROWS, PER_ROW = 4, 40  # 160 hosts, 80 senders: each row's 40 Gb/s squeezed into a 10 Gb/s uplink


@pytest.fixture(scope="module")
def small27():
    return parse_topology(fig27(ROWS, hosts_per_rack=20, racks_per_row=2)), fig27_flows(ROWS, hosts_per_row=PER_ROW)


def test_every_agent_registers_reports_and_is_scheduled_in_the_wire_encoding(small27):
    topo, flows = small27
    loop = XcoLoop(topo, flows, "timeslice", lead_us=100)
    loop.run(50_000, count_types=True)
    s = loop.summary()
    assert s["agents"] == len(flows) and len(loop.ctl.hosts) == len(flows)
    assert s["agent_dropped"] == 0 and s["controller_dropped"] == {} and s["fail_opens"] == 0
    assert s["agent_sent"]["backlog"] == len(flows)  # always backlogged: reported once, never given up
    assert "giveup" not in s["agent_sent"]
    for t in ("Register", "Welcome", "Backlog", "Directive", "Heartbeat", "Ack"):
        assert loop.datagrams[t] > 0, t
    assert loop.datagram_bytes > 0


def test_a_small_flow_is_sent_unheld_until_it_has_sent_small_flow_bytes(small27):
    topo, flows = small27
    loop = XcoLoop(topo, flows, "timeslice", lead_us=100, small_flow_bytes=100_000)
    changes = loop.run(30_000)
    first_hold = {}
    for c in changes:
        if c.rate_bps == 0:
            first_hold.setdefault(c.flow, c.t_us)
    assert set(first_hold) == set(range(len(flows)))
    # 100 kB at 1 Gb/s is 800 us; the agent sees it at its next counter read
    assert min(first_hold.values()) >= 800
    assert all(c.rate_bps == G for c in changes if c.t_us == 0)


def test_the_agents_fail_open_when_the_controller_falls_silent(small27):
    topo, flows = small27
    loop = XcoLoop(topo, flows, "timeslice", lead_us=100, controller_stops_us=60_000)
    changes = loop.run(200_000)
    assert loop.summary()["fail_opens"] == len(flows)
    last = {}
    for c in changes:
        last[c.flow] = c
    assert len(last) == len(flows)
    # (the group whose slot began as the controller stopped stays open); within three slices of
    # silence and a heartbeat a slice old, every flow is at line rate again, for good
    assert all(c.rate_bps == G and c.t_us <= 60_000 + 40_000 for c in last.values())
    assert sum(c.t_us > 60_000 for c in last.values()) >= len(flows) // 2
    held = [c for c in changes if 20_000 <= c.t_us < 60_000 and c.rate_bps == 0]
    assert held  # the slices held 3 of every 4 senders before


@pytest.mark.parametrize("mode", ["timeslice", "rate"])
def test_figure27_small_loses_only_while_the_agents_start(small27, mode):
    """With the cores, the start costs what the agent does at a flow's start (unheld until its
    first counter read after the welcome, then held until the first slot): loss in the first
    slices, none after; the scheduler alone (every flow backlogged at t = 0) loses nothing."""
    topo, flows = small27
    short = simulate(topo, flows, mode, duration_s=0.04)
    long = simulate(topo, flows, mode, duration_s=0.12)
    model = simulate(topo, flows, mode, duration_s=0.04, cores=False)
    assert model.dropped_bytes == 0
    assert short.dropped_bytes > 0 and short.max_offered_ratio == pytest.approx(4.0)
    assert long.dropped_bytes == pytest.approx(short.dropped_bytes, rel=1e-9)  # nothing lost later
    assert long.xco["fail_opens"] == 0 and long.xco["agents"] == len(flows)
    for r in (short, long):
        assert r.sent_bytes == pytest.approx(r.delivered_bytes + r.dropped_bytes + r.in_flight_bytes, rel=1e-9)
    # after the start the core links carry what they can: 2 x 10 Gb/s
    steady_gbps = (long.delivered_bytes - short.delivered_bytes) * 8 / 0.08 / 1e9
    assert steady_gbps == pytest.approx(20.0, rel=0.03)


def test_reading_the_counters_while_idle_holds_a_starting_flow_sooner(small27):
    """idle_poll_us (the agent's setting): a flow that passes small_flow_bytes at 800 us is seen
    at the next read; without idle reads that is the once-a-slice read before the next slot."""
    topo, flows = small27
    first = {}
    for idle in (0, 1_000):
        changes = XcoLoop(topo, flows, "timeslice", lead_us=100, idle_poll_us=idle).run(30_000)
        first[idle] = min(c.t_us for c in changes if c.rate_bps == 0)
    assert 800 <= first[1_000] <= 2_000 < 9_000 <= first[0] < 10_000
