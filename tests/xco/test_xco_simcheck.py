"""Figure 23's simulator side: the lab's topology as the simulator sees it, and the loss it computes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from xtc_lab.xco.experiments.flows import FIG1A_BOTTLENECK, FIG1A_SENDERS, failed_flows_md, fig1a, flow_errors
from xtc_lab.xco.experiments.simcheck import lab_topology, simulated_loss
from xtc_lab.xco.testbed import HOST_QUEUE_BYTES


@pytest.fixture(scope="module")
def topo():
    tb = SimpleNamespace(record={"topology": "fig1a", "port_buffer_bytes": 131_072}, scale=0.1)
    return lab_topology(tb)


def test_lab_topology_has_the_lab_rates_and_buffers(topo) -> None:
    lid = {n: i for i, n in enumerate(topo.link_names)}
    assert int(topo.link_bps[lid["sw1>r1"]]) == 100_000_000  # 1 Gb/s at scale 0.1
    assert topo.link_buffer_bytes[lid["sw1>r1"]] == 131_072  # a switch port: the lab's port buffer
    assert topo.link_buffer_bytes[lid["s1>sw1"]] == HOST_QUEUE_BYTES  # a host's uplink: its NIC queue


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_without_xco_n_line_rate_senders_lose_all_but_one_nth(topo, n: int) -> None:
    senders = [f"s{k}" for k in range(1, n + 1)]
    r = simulated_loss(topo, senders, "r1", "none", 10_000)
    # N senders at the bottleneck's own rate: 1/N gets through once the buffer is full (it fills in
    # 131 kB / (N-1) x 100 Mb/s, about 10 ms of the simulated second at N = 2)
    assert r["loss_percent"] == pytest.approx(100.0 * (1 - 1 / n), abs=1.5)
    assert r["delivered_bps"] == pytest.approx(100e6, rel=0.02)


def test_with_timeslices_nothing_is_lost(topo) -> None:
    r = simulated_loss(topo, ["s1", "s2", "s3", "s4", "s5"], "r1", "timeslice", 10_000)
    assert r["loss_percent"] < 0.01
    assert r["delivered_bps"] >= 0.95 * 100e6


def test_fig1a_setup_names_the_topologys_senders_and_bottleneck(topo) -> None:
    assert FIG1A_BOTTLENECK in topo.link_names
    assert all(topo.has_host(h) for h in FIG1A_SENDERS)
    rates = {"sw1>r1": 100_000_000, "s1>sw1": 250_000_000}
    tb = SimpleNamespace(rate_bps=rates.__getitem__)
    assert fig1a(SimpleNamespace(tb=tb, quick=True)) == (tb, 3, "sw1>r1", 100_000_000, 250_000_000)
    assert fig1a(SimpleNamespace(tb=tb, quick=False)).duration_s == 10


def test_figure24_side_each_sender_to_its_own_receiver_across_the_shared_link() -> None:
    from xtc_lab.xco.experiments.uplink import BOTTLENECK, RECEIVER_OF, SCALE, SENDERS

    topo = lab_topology(SimpleNamespace(record={"topology": "fig1b", "port_buffer_bytes": 131_072}, scale=SCALE))
    assert int(topo.link_bps[topo.link_names.index(BOTTLENECK)]) == 200_000_000  # 10 Gb/s at 0.02
    ten = simulated_loss(topo, SENDERS[:10], RECEIVER_OF, "none", 10_000)
    all13 = simulated_loss(topo, SENDERS, RECEIVER_OF, "none", 10_000)
    assert ten["loss_percent"] == 0 and ten["delivered_bps"] == pytest.approx(200e6, rel=1e-3)
    assert all13["loss_percent"] == pytest.approx(100 * (1 - 10 / 13), abs=1.0)  # 13 x 20 Mb/s into 200
    assert len(all13["flow_delivered_bps"]) == 13


def test_figure25_side_the_last_senders_are_udp_and_tcp_flows_get_their_goodput(topo) -> None:
    from xtc_lab.xco.experiments.simcheck_mix import mix

    assert mix(2) == [("s1", "tcp"), ("s2", "tcp"), ("s3", "tcp"), ("s4", "udp"), ("s5", "udp")]
    senders = [h for h, _p in mix(1)]
    r = simulated_loss(topo, senders, "r1", "timeslice", 10_000, tcp=[p == "tcp" for _h, p in mix(1)], seconds=0.1)
    assert r["loss_percent"] < 0.01
    assert sum(r["flow_delivered_bps"]) == pytest.approx(r["delivered_bps"])
    assert all(b > 10e6 for b in r["flow_delivered_bps"])  # every sender, TCP too, gets slices of 100 Mb/s


def test_the_reports_name_the_flows_that_failed_at_any_point_and_say_nothing_when_none_did() -> None:
    ok = {"sender": "s1", "proto": "tcp", "goodput_bps": 1e6}
    points = [{"errors": flow_errors([ok, {"sender": "s2", "error": "iperf3 gave no JSON"}])},
              {"errors": flow_errors([ok])}, {"errors": flow_errors([{"sender": "s5", "error": "refused"}])}]
    assert points[0]["errors"] == ["s2: iperf3 gave no JSON"] and points[1]["errors"] == []
    assert failed_flows_md(points) == "\n\nFlows that failed: s2: iperf3 gave no JSON; s5: refused."
    assert failed_flows_md(points[1:2]) == "" and failed_flows_md([]) == ""
