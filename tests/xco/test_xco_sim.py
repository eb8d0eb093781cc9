"""The XCo switch-queue simulator (xtc_lab.xco.simulate) on small topologies."""

import argparse
import json
from pathlib import Path

import pytest

from xtc.xco.topology import load_topology, parse_topology
from xtc_lab.sim import cli as sim_cli
from xtc_lab.xco.simulate import fig27_flows, simulate
from xtc_lab.xco.topologies import fig27

DATA = Path(__file__).parent / "data"
G = 1_000_000_000


def fig1(which, n=None):
    spec = json.loads((DATA / f"fig10{which}.json").read_text())
    topo = load_topology(DATA / spec["topology"])
    senders = [topo.host_id(h) for h in spec["senders"]][:n]
    flows = [(x, topo.host_id(spec["dest"][topo.hosts[x]])) for x in senders]
    return spec, topo, senders, flows


@pytest.mark.parametrize("which", ["a", "b"])
def test_simulated_schedule_is_figure10_slice_by_slice(which):
    spec, topo, senders, flows = fig1(which)
    # the scheduler's schedule (cores=False: every flow backlogged at t = 0, as Figure 10 has it)
    r = simulate(topo, flows, "timeslice", slice_us=spec["slice_us"],
                 duration_s=len(spec["slices"]) * spec["slice_us"] / 1e6, record_slots=True, cores=False)
    got = [[int(x in s) for x in senders] for s in r.slots]
    assert got == spec["slices"]
    assert r.dropped_bytes == 0


@pytest.mark.parametrize("which, n, expected_none", [("a", 5, 1 - 1 / 5), ("b", 13, 1 - 10 / 13)])
def test_loss_without_xco_and_none_with_it(which, n, expected_none):
    _, topo, _, flows = fig1(which, n)
    none = simulate(topo, flows, "none", duration_s=0.2)
    # steady state: the bottleneck delivers its capacity, the rest is dropped (less the buffer filling)
    assert none.loss_pct == pytest.approx(100 * expected_none, abs=1.0)
    assert none.max_offered_ratio > 1.0
    for mode in ("timeslice", "rate", "hybrid"):
        r = simulate(topo, flows, mode, duration_s=0.05, cores=False)
        assert r.dropped_bytes == 0, mode
        assert r.max_offered_ratio <= 1.0 + 1e-9, mode  # the simulator's own feasibility accounting
        assert r.max_queue_fraction <= 1e-9, mode
        assert r.delivered_gbps > 0.9 * (1 if which == "a" else 10), mode


def test_no_loss_without_xco_when_no_link_is_oversubscribed():
    _, topo, _, flows = fig1("b", 10)
    r = simulate(topo, flows, "none", duration_s=0.02)
    assert r.dropped_bytes == 0 and r.max_offered_ratio == pytest.approx(1.0)


@pytest.mark.parametrize("mode", ["none", "timeslice", "rate"])
def test_bytes_are_conserved_and_fast_forward_changes_nothing(mode):
    _, topo, _, flows = fig1("a", 5)
    a = simulate(topo, flows, mode, duration_s=0.03, slice_us=2_000, fast_forward=True)
    b = simulate(topo, flows, mode, duration_s=0.03, slice_us=2_000, fast_forward=False)
    assert a.steps_computed < b.steps_computed == b.steps
    for r in (a, b):
        assert r.sent_bytes == pytest.approx(r.delivered_bytes + r.dropped_bytes + r.in_flight_bytes, rel=1e-9)
        assert r.max_queue_fraction <= 1.0 + 1e-9  # drop-tail: a queue never exceeds its buffer
    for k in ("sent_bytes", "delivered_bytes", "dropped_bytes"):
        assert getattr(a, k) == pytest.approx(getattr(b, k), rel=1e-6, abs=1.0), k


def test_small_figure27_loss_without_xco_and_almost_none_with_it():
    rows = 4
    topo = parse_topology(fig27(rows, hosts_per_rack=20, racks_per_row=2))
    flows = fig27_flows(rows, hosts_per_row=40)
    none = simulate(topo, flows, "none", duration_s=0.05)
    # 40 hosts x 1 Gb/s per row squeezed into the row's 10 Gb/s uplink
    assert none.loss_pct == pytest.approx(75.0, abs=2.0)
    for mode in ("timeslice", "rate"):
        r = simulate(topo, flows, mode, duration_s=0.05, cores=False)
        assert r.loss_pct <= 0.01 and r.max_offered_ratio <= 1.0 + 1e-9, mode
        assert r.delivered_gbps == pytest.approx(2 * 10, rel=0.02), mode


def test_hybrid_serves_the_host_timeslices_starve():
    topo = parse_topology({"schema": "xco-topology/1", "switch": [{"name": "a"}, {"name": "b"}],
                           "link": [{"ends": ["a", "b"], "bps": 2 * G}],
                           "host": [{"name": "h0", "nic_bps": 10 * G, "switch": "a"},
                                    {"name": "h1", "nic_bps": G, "switch": "a"},
                                    {"name": "h2", "nic_bps": G, "switch": "b"},
                                    {"name": "h3", "nic_bps": G, "switch": "b"}]})
    flows = [(0, 2), (1, 3)]
    none = simulate(topo, flows, "none", duration_s=0.02)
    ts = simulate(topo, flows, "timeslice", duration_s=0.02, cores=False)
    hy = simulate(topo, flows, "hybrid", duration_s=0.02, cores=False)
    assert none.loss_pct > 50
    assert ts.delivered_gbps == pytest.approx(1.0, rel=0.02)  # h0 never sends
    assert hy.dropped_bytes == 0 and hy.max_offered_ratio <= 1.0 + 1e-9
    assert hy.delivered_gbps == pytest.approx(2.0, rel=0.02)


def test_command_prints_the_figure27_json(capsys):
    parser = argparse.ArgumentParser(prog="xtc")
    sim_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["simulate", "xco", "fig27", "--rows", "2", "--duration-s", "0.02", "--json", "--quiet",
                              "--control", "scheduler"])
    assert args.func(args) == 0
    res = json.loads(capsys.readouterr().out)
    assert list(res) == ["rows"] and res["rows"][0]["hosts"] == 400
    assert set(res["rows"][0]["loss_pct"]) == {"none", "timeslice", "rate"}
    assert res["rows"][0]["loss_pct"]["none"] > 50 and res["rows"][0]["loss_pct"]["timeslice"] <= 0.01


# -- TCP sources (Reno windows; Figures 25-26) -------------------------------------------------------

def tcp_mix(n_tcp, n_udp, mode="none", duration_s=0.3, **kw):
    """Figure 1(a): the first ``n_tcp`` senders TCP, the next ``n_udp`` UDP at line rate, into r1
    (20 us steps: 2.5 KB of a 1 Gb/s link, five of them to a round trip)."""
    _, topo, _, flows = fig1("a", n_tcp + n_udp)
    return simulate(topo, flows, mode, duration_s=duration_s, tcp=[k < n_tcp for k in range(len(flows))],
                    dt_us=20, **kw)


def test_one_tcp_flow_fills_a_path_as_fast_as_its_nic_without_loss():
    r = tcp_mix(1, 0, duration_s=0.1)
    assert r.dropped_bytes == 0
    assert r.delivered_gbps > 0.97  # slow start from 10 segments at a 100 us round trip: a few ms


def test_tcp_flows_share_a_bottleneck_with_little_loss_where_udp_loses_four_fifths():
    tcp = tcp_mix(5, 0, duration_s=0.4)
    udp = tcp_mix(0, 5, duration_s=0.4)
    assert udp.loss_pct == pytest.approx(80, abs=1.0)
    # Reno: the windows halve on loss, so the loss is the saw-tooth's (and slow start's overshoot)
    assert 0.05 < tcp.loss_pct < 5.0
    assert tcp.delivered_gbps > 0.97
    share = tcp.delivered_bytes / 5
    assert all(b == pytest.approx(share, rel=0.15) for b in tcp.flow_delivered_bytes)
    assert tcp.sent_bytes == pytest.approx(tcp.delivered_bytes + tcp.dropped_bytes + tcp.in_flight_bytes, rel=1e-9)
    assert sum(tcp.flow_dropped_bytes) == pytest.approx(tcp.dropped_bytes, rel=1e-9)


def test_udp_at_line_rate_starves_tcp_and_timeslices_give_it_its_share():
    none = tcp_mix(4, 1, duration_s=0.2)
    ts = tcp_mix(4, 1, "timeslice", duration_s=0.2, cores=False)
    udp_got, tcp_got = none.flow_delivered_bytes[4], none.flow_delivered_bytes[:4]
    assert all(udp_got > 4 * b for b in tcp_got)
    assert ts.dropped_bytes == 0
    assert all(b == pytest.approx(ts.delivered_bytes / 5, rel=0.1) for b in ts.flow_delivered_bytes)


def test_a_small_window_losing_waits_for_its_retransmission_timeout():
    # one TCP flow against four UDP senders at line rate: its window stays under four segments, so
    # its losses are timeouts; a shorter timeout lets it send sooner
    slow = tcp_mix(1, 4, duration_s=0.3)
    fast = tcp_mix(1, 4, duration_s=0.3, rto_us=2_000)
    assert slow.flow_delivered_bytes[0] < 0.5 * fast.flow_delivered_bytes[0]
    assert slow.flow_delivered_bytes[0] < 0.01 * slow.delivered_bytes


def test_tcp_flags_all_false_are_the_udp_simulation():
    _, topo, _, flows = fig1("a", 5)
    a = simulate(topo, flows, "none", duration_s=0.03)
    b = simulate(topo, flows, "none", duration_s=0.03, tcp=[False] * 5)
    assert (a.delivered_bytes, a.dropped_bytes, a.steps_computed) == (b.delivered_bytes, b.dropped_bytes, b.steps_computed)


@pytest.mark.parametrize("kw, needle", [({"tcp": [True] * 4}, "one flag per flow"),
                                        ({"tcp": [True] * 5, "rtt_us": 15}, "rtt_us"),
                                        ({"tcp": [True] * 5, "mss_bytes": 0}, "mss_bytes")])
def test_bad_tcp_parameters_are_named(kw, needle):
    _, topo, _, flows = fig1("a", 5)
    with pytest.raises(ValueError, match=needle):
        simulate(topo, flows, "none", duration_s=0.01, **kw)


def test_command_simulates_figures_25_26(capsys, tmp_path):
    parser = argparse.ArgumentParser(prog="xtc")
    sim_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["simulate", "xco", "fig25", "--modes", "none", "--duration-s", "0.02",
                              "--json", "--quiet", "--out", str(tmp_path)])
    assert args.func(args) == 0
    res = json.loads(capsys.readouterr().out.split("\nwrote ")[0])
    mixes = res["mixes"]
    assert [(e["tcp"], e["udp"]) for e in mixes] == [(5 - k, k) for k in range(6)]
    assert mixes[-1]["tcp_per_flow_mbps"]["none"] is None and mixes[-1]["loss_pct"]["none"] > 50
    assert mixes[1]["loss_pct"]["none"] > mixes[0]["loss_pct"]["none"]  # one UDP sender at line rate
    assert {p.name for p in tmp_path.iterdir()} == {"fig25.json", "fig25.md", "fig25.png"}
