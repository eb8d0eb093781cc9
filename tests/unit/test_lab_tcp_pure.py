"""Pure parts of the lab's TCP traffic and of the ``tcpudp`` and ``fairness`` experiments.

The iperf3 reports under tests/data/iperf3 were recorded on the lab: one and four TCP flows of
524-byte segments through a real LXC VR for 3 s, and a client whose server was not there.
No root, no namespaces, no libvirtd.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from xtc_lab.lab.experiments import fairness, tcpudp
from xtc_lab.lab.experiments.tcpudp import CpuSnapshot
from xtc_lab.lab.harness import RunContext
from xtc_lab.lab.netlab import LabError
from xtc_lab.lab.traffic import (
    PAPER_TCP_FRAME_BYTES,
    TcpResult,
    iperf3_tcp_argv,
    parse_iperf3_tcp,
    tcp_mss_for_frame,
    udp_payload_for_frame,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "iperf3"


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


# ------------------------------------------------------------------ frame sizes and command lines
def test_paper_frame_sizes() -> None:
    assert PAPER_TCP_FRAME_BYTES == 524
    mss = tcp_mss_for_frame(524)
    assert mss == 470
    # payload = MSS - 12 (timestamps); + 12 + 20 (TCP) + 20 (IPv4) + 14 (Ethernet) = the frame
    assert (mss - 12) + 12 + 20 + 20 + 14 == 524
    assert udp_payload_for_frame(524) == 482
    assert udp_payload_for_frame(524) + 8 + 20 + 14 == 524


@pytest.mark.parametrize("frame", [100, 141, 9055])
def test_frames_outside_the_mss_range_are_refused(frame: int) -> None:
    with pytest.raises(LabError, match="frame_bytes"):
        tcp_mss_for_frame(frame)


@pytest.mark.parametrize("frame", [57, 1515])
def test_udp_frames_outside_the_payload_range_are_refused(frame: int) -> None:
    with pytest.raises(LabError, match="UDP payload"):
        udp_payload_for_frame(frame)


def test_iperf3_tcp_argv_flows_mss_duration() -> None:
    argv = iperf3_tcp_argv("198.18.1.2", duration_s=10.4, flows=4, mss_bytes=470)
    assert argv[:3] == ["iperf3", "-c", "198.18.1.2"]
    assert argv[argv.index("-t") + 1] == "10"
    assert argv[argv.index("-P") + 1] == "4"
    assert argv[argv.index("-M") + 1] == "470"
    assert "--json" in argv and "-u" not in argv
    assert "-M" not in iperf3_tcp_argv("198.18.1.2", duration_s=3)
    assert "-C" not in iperf3_tcp_argv("198.18.1.2", duration_s=3)
    cubic = iperf3_tcp_argv("198.18.1.2", duration_s=3, congestion="cubic")
    assert cubic[cubic.index("-C") + 1] == "cubic"


@pytest.mark.parametrize("kwargs, match", [
    ({"duration_s": 0.5}, "duration_s"),
    ({"duration_s": 5, "flows": 0}, "flows"),
    ({"duration_s": 5, "flows": 129}, "flows"),
    ({"duration_s": 5, "flows": True}, "flows"),
    ({"duration_s": 5, "flows": 2.0}, "flows"),
    ({"duration_s": 5, "mss_bytes": 87}, "mss_bytes"),
    ({"duration_s": 5, "mss_bytes": 9001}, "mss_bytes"),
    ({"duration_s": 5, "congestion": "cubic; rm"}, "congestion"),
    ({"duration_s": 5, "congestion": ""}, "congestion"),
])
def test_iperf3_tcp_argv_refuses_bad_input(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(LabError, match=match):
        iperf3_tcp_argv("198.18.1.2", **kwargs)


# ------------------------------------------------------------------ iperf3 report parser
def test_parse_recorded_one_flow_report() -> None:
    r = parse_iperf3_tcp(load("iperf3_tcp_1flow.json"))
    assert r.flows == 1 and r.mss_bytes == 470
    assert r.flow_received_bytes == [44515768]
    assert r.received_bytes == 44515768
    assert r.sent_bytes >= r.received_bytes
    assert r.retransmits == 9197
    assert r.seconds == 3.010965  # end.sum_received.seconds
    assert r.received_bits_per_s == pytest.approx(8 * 44515768 / r.seconds)
    assert len(r.interval_bits_per_s) == 3
    assert [round(t) for t, _ in r.interval_bits_per_s] == [1, 2, 3]
    assert r.flow_min_max_ratio == 1.0
    # 458-byte payloads: at least this many data segments per second arrived
    assert r.segments_per_s(458) == pytest.approx(44515768 / 458 / r.seconds)


def test_parse_recorded_four_flow_report() -> None:
    r = parse_iperf3_tcp(load("iperf3_tcp_4flows.json"))
    assert r.flows == 4
    assert r.flow_received_bytes == [14846986, 10039360, 11565416, 10515680]
    assert r.received_bytes == sum(r.flow_received_bytes)
    assert r.flow_min_max_ratio == pytest.approx(10039360 / 14846986)
    assert r.retransmits == 16165
    assert all(b > 0 for _, b in r.interval_bits_per_s)


def test_parse_error_report_raises_with_iperf3s_message() -> None:
    with pytest.raises(LabError, match="Connection refused"):
        parse_iperf3_tcp(load("iperf3_tcp_refused.json"))


def test_parse_refuses_udp_and_incomplete_reports() -> None:
    rep = load("iperf3_tcp_1flow.json")
    udp = json.loads(json.dumps(rep))
    udp["start"]["test_start"]["protocol"] = "UDP"
    with pytest.raises(LabError, match="UDP test, not TCP"):
        parse_iperf3_tcp(udp)
    no_end = {k: v for k, v in rep.items() if k != "end"}
    with pytest.raises(LabError, match="no end"):
        parse_iperf3_tcp(no_end)
    empty = json.loads(json.dumps(rep))
    empty["end"]["streams"] = []
    with pytest.raises(LabError, match="no streams"):
        parse_iperf3_tcp(empty)
    bad = json.loads(json.dumps(rep))
    bad["end"]["sum_received"]["bytes"] = -1
    with pytest.raises(LabError, match="sum_received.bytes"):
        parse_iperf3_tcp(bad)
    with pytest.raises(LabError, match="not a JSON object"):
        parse_iperf3_tcp([])  # type: ignore[arg-type]


# ------------------------------------------------------------------ CPU picture
PROC_STAT = """cpu  100 5 300 1000 2 0 400 1 0 0
cpu0 50 2 150 500 1 0 200 0 0 0
intr 12345
"""


def test_parse_proc_stat_and_pid_stat() -> None:
    assert tcpudp.parse_proc_stat_cpu(PROC_STAT) == {"user": 100, "nice": 5, "system": 300, "idle": 1000,
                                                     "iowait": 2, "irq": 0, "softirq": 400, "steal": 1}
    with pytest.raises(ValueError, match="no aggregate"):
        tcpudp.parse_proc_stat_cpu("cpu0 1 2 3 4 5 6 7 8\n")
    # a command name with spaces and parentheses: fields counted after the last ')'
    line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 70 30 5 5 20 0 1 0 100 1000 10"
    assert tcpudp.parse_pid_stat_ticks(line) == 100


def _stat_line(pid: int, comm: str, utime: int, stime: int, flags: int = 0x400000) -> str:
    return f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 {utime} {stime} 0 0 20 0 1 0 100 1000 10\n"


def test_kernel_threads_are_told_apart() -> None:
    assert tcpudp.pid_stat_is_kernel_thread(_stat_line(14, "ksoftirqd/0", 1, 800, flags=0x04208040))
    assert not tcpudp.pid_stat_is_kernel_thread(_stat_line(99, "python3", 50, 10))


def test_other_process_ticks_leaves_out_the_lab(tmp_path: Path) -> None:
    import os

    proc, netns = tmp_path / "proc", tmp_path / "netns"
    netns.mkdir()
    (netns / "xtcx-ab12-tg1").write_text("")
    (netns / "xtco-9999-tg1").write_text("")  # another lab: its load is not ours
    host_ns = tmp_path / "host-ns"
    host_ns.write_text("")

    def pid(n: int, comm: str, ticks: tuple[int, int], ns: Path, cgroup: str = "1:cpu:/\n",
            flags: int = 0x400000) -> None:
        d = proc / str(n)
        (d / "ns").mkdir(parents=True)
        (d / "stat").write_text(_stat_line(n, comm, *ticks, flags=flags))
        (d / "cgroup").write_text(cgroup)
        os.link(ns, d / "ns" / "net")  # same inode as the namespace it is in

    pid(101, "make", (300, 100), host_ns)                               # outside the lab: counted
    pid(102, "iperf3", (5, 900), netns / "xtcx-ab12-tg1")               # the lab's traffic tool
    pid(103, "xtc-forwarder", (10, 700), host_ns,
        cgroup="1:cpu:/machine/lxc-103-xtcx-ab12-vr1.libvirt-lxc\n")    # the lab's VR
    pid(104, "ksoftirqd/1", (0, 500), host_ns, flags=0x04208040)        # kernel thread
    pid(105, "python", (40, 2), host_ns)                                # the daemon, excluded by pid
    pid(106, "iperf3", (7, 70), netns / "xtco-9999-tg1")                # another lab's tool: counted
    (proc / "self").mkdir()
    out = tcpudp.other_process_ticks("xtcx-ab12", exclude=[105], proc=proc, netns_dir=netns)
    assert out == {101: (400, 100), 106: (77, 100)}
    assert tcpudp.parse_pid_stat_start_ticks(_stat_line(7, "x", 1, 1)) == 100


def test_cpu_use_in_percent_of_one_cpu() -> None:
    a = CpuSnapshot(t_s=10.0, vr_cpu_ns={"vr1": 0, "vr2": 5_000_000_000},
                    host_ticks={"user": 0, "nice": 0, "system": 0, "idle": 0, "iowait": 0, "irq": 0, "softirq": 0,
                                "steal": 0},
                    other_ticks={1: (100, 5), 2: (50, 5)}, daemon_ticks=10, uptime_s=500.0)
    b = CpuSnapshot(t_s=12.0, vr_cpu_ns={"vr1": 1_000_000_000, "vr2": 5_500_000_000},
                    host_ticks={"user": 40, "nice": 0, "system": 60, "idle": 100, "iowait": 0, "irq": 0,
                                "softirq": 200, "steal": 0},
                    other_ticks={1: (150, 5), 3: (999, 1000), 4: (30, 50_050)}, daemon_ticks=14,
                    uptime_s=502.0)
    u = tcpudp.cpu_use(a, b, n_cpus=2, ticks_per_s=100)
    assert u["vr_percent"] == {"vr1": pytest.approx(50.0), "vr2": pytest.approx(25.0)}
    assert sum(u["host_percent"].values()) == pytest.approx(200.0)
    assert u["host_percent"]["softirq"] == pytest.approx(100.0)
    # pid 2 exited (missed), pid 3 is new to the snapshot but started long before (tick 1000 = 10 s
    # after boot: a pid that was skipped before), pid 4 started in between: 50 + 30 ticks over 2 s
    assert u["others_percent"] == pytest.approx(40.0)
    assert tcpudp.cpu_use(replace(a, uptime_s=None), b, n_cpus=2)["others_percent"] == pytest.approx(25.0)
    assert u["daemon_percent"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="out of order"):
        tcpudp.cpu_use(b, a, n_cpus=2)


# ------------------------------------------------------------------ tcpudp analysis
def test_window_mean_and_goodput_window() -> None:
    t = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert tcpudp.window_mean(t, [10, 20, 30, None, 50], 2.0, 5.0) == pytest.approx((20 + 30 + 50) / 3)
    assert math.isnan(tcpudp.window_mean(t, [1, 2, 3, 4, 5], 6.0, 9.0))
    r = TcpResult(flows=1, seconds=5, sent_bytes=0, received_bytes=0, retransmits=0, flow_received_bytes=[0],
                  mss_bytes=470, interval_bits_per_s=[(1.0, 1e6), (2.0, 2e6), (3.0, 3e6), (4.0, 4e6)])
    # client started at recorder time 10: intervals end at 11..14
    assert tcpudp.goodput_in_window(r, 10.0, 12.0, 13.0) == pytest.approx(2.5e6)


def test_min_max_ratio_and_setpoints() -> None:
    assert tcpudp.min_max_ratio([30_000, 60_000]) == pytest.approx(0.5)
    assert tcpudp.min_max_ratio([40_000, 40_000]) == 1.0
    assert math.isnan(tcpudp.min_max_ratio([0.0, 0.0]))
    assert tcpudp.setpoints_from_aggregate(100_000, 0.2) == {"udp": 20_000, "tcp": 80_000}
    assert tcpudp.setpoints_from_aggregate(63_461, 0.2) == {"udp": 12_700, "tcp": 50_800}
    for bad in ((100_000, 0.0), (100_000, 1.0), (0.0, 0.2)):
        with pytest.raises(ValueError):
            tcpudp.setpoints_from_aggregate(*bad)


def _vr(fwd: float, off: float, cap: float = math.nan, cpu: float = 50.0) -> dict[str, Any]:
    return {"forwarded_pps": fwd, "offered_pps": off, "cap_percent": cap, "cpu_percent": cpu}


def test_compare_phases_reproduces_the_papers_arithmetic() -> None:
    # the paper: ~100 kp/s -> 68; TCP +16, UDP -49 (UDP 69 -> 20, TCP 31 -> 47)
    without = {"tcp": _vr(31_000, 25_000), "udp": _vr(69_000, 100_000)}
    with_ = {"tcp": _vr(47_000, 38_000), "udp": _vr(20_000, 100_000)}
    c = tcpudp.compare_phases(without, with_, {"udp": 20_000, "tcp": 80_000})
    assert c["aggregate_without_pps"] == 100_000 and c["aggregate_with_pps"] == 67_000
    assert c["tcp_gain_pps"] == 16_000 and c["udp_loss_pps"] == 49_000
    assert c["gain_over_loss"] == pytest.approx(16 / 49)
    assert c["udp_dropped_by_vr_pps"] == 80_000
    assert c["udp_setpoint_error"] == 0.0
    assert c["tcp_setpoint_error"] == pytest.approx(47 / 80 - 1)
    assert c["min_max_with"] == pytest.approx(20 / 47)


def test_compare_phases_counts_what_the_host_moved_to_a_qemu_vr() -> None:
    # A QEMU VR's tap counts as offered only what QEMU read (7.2 kp/s); the generator sent 24.5 kp/s
    # and the host moved all of it to the tap, which dropped the rest: that is the waste.
    without = {"tcp": _vr(14_900, 22_700), "udp": _vr(22_500, 22_500)}
    with_ = {"tcp": _vr(17_600, 23_700), "udp": {**_vr(7_250, 7_200), "host_sent_pps": 24_500.0}}
    c = tcpudp.compare_phases(without, with_, {"udp": 7_500, "tcp": 29_900})
    assert c["udp_offered_with_pps"] == 24_500.0 and c["udp_dropped_by_vr_pps"] == 24_500.0 - 7_250


def test_path_rates_split_the_directions() -> None:
    c0 = {"forwarded": 1_000, "forwarded_to_tr": 800, "offered_from_tg": 900}
    # over 2 s: 20000 data segments handed in, 18000 passed on, 6000 ACKs sent back
    c1 = {"forwarded": 1_000 + 18_000 + 6_000, "forwarded_to_tr": 800 + 18_000, "offered_from_tg": 900 + 20_000}
    r = tcpudp.path_rates(c0, c1, 2.0)
    assert r == {"into_vr_pps": 10_000.0, "out_to_receiver_pps": 9_000.0, "out_to_generator_pps": 3_000.0,
                 "dropped_in_vr_fraction": pytest.approx(0.1)}
    assert tcpudp.lost_in_vr_text({"path": r}) == "10.0%"
    assert tcpudp.lost_in_vr_text({"path": None}) == "-"
    assert math.isnan(tcpudp.path_rates(c0, c0, 1.0)["dropped_in_vr_fraction"])
    with pytest.raises(ValueError, match="dt_s"):
        tcpudp.path_rates(c0, c1, 0.0)


def test_outside_load_note() -> None:
    quiet = {"others_cpu_percent": 1.0, "host_cpu_percent": {"user": 4.0}}
    busy_user = {"others_cpu_percent": 1.0, "host_cpu_percent": {"user": 63.0}}
    assert tcpudp.outside_load_note(quiet, quiet, "a", "b") == ""
    note = tcpudp.outside_load_note(quiet, busy_user, "phase 1", "phase 2")
    assert "host user time 4% in phase 1 and 63% in phase 2" in note and note.endswith("in phase 2.")
    assert tcpudp.outside_load_note(busy_user, quiet, "phase 1", "phase 2").endswith("in phase 1.")
    assert tcpudp.outside_load_note({}, busy_user, "a", "b") == ""  # nothing to compare with


def test_summarise_vr_uses_the_window_only() -> None:
    series = {"t_s": [1, 2, 3, 4], "forwarded_pps": [5, 10, 20, 99], "offered_pps": [50, 50, 50, 50],
              "cap_percent": [None, 10.0, 20.0, 30.0]}
    s = tcpudp.summarise_vr(series, 2, 3)
    assert s == {"forwarded_pps": 15.0, "offered_pps": 50.0, "cap_percent": 15.0,
                 "forwarded_cv": pytest.approx(math.sqrt(50) / 15)}
    assert math.isnan(tcpudp.summarise_vr(series, 2, 2)["forwarded_cv"])


def _series(n: int, fwd: float, off: float, cap: float | None) -> dict[str, list[Any]]:
    return {"t_s": [float(i) for i in range(n)], "forwarded_pps": [fwd] * n, "offered_pps": [off] * n,
            "cap_percent": [cap] * n}


def _host_cpu(idle: float = 0.0) -> dict[str, float]:
    return {"user": 10.0, "nice": 0.0, "system": 70.0, "idle": idle, "iowait": 0.0, "irq": 0.0,
            "softirq": 120.0 - idle, "steal": 0.0}


def _tcpudp_phase(tcp_fwd: float, udp_fwd: float, udp_cap: float, tcp_cap: float) -> dict[str, Any]:
    tcp = _vr(tcp_fwd, 0.8 * tcp_fwd, tcp_cap, 60.0)
    tcp.update(goodput_bits_per_s=9e7, iperf3={"seconds": 10.0, "received_bits_per_s": 9e7, "retransmits": 100,
                                               "mss_bytes": 470})
    tcp["path"] = {"into_vr_pps": 0.8 * tcp_fwd, "out_to_receiver_pps": 0.72 * tcp_fwd,
                   "out_to_generator_pps": 0.28 * tcp_fwd, "dropped_in_vr_fraction": 0.1}
    udp = _vr(udp_fwd, 99_000, udp_cap, 40.0)
    udp.update(sender={"sent_pps": 99_000, "seconds": 10.0})
    return {"tcp": tcp, "udp": udp, "aggregate_pps": tcp_fwd + udp_fwd, "host_cpu_percent": _host_cpu(),
            "others_cpu_percent": 3.0, "daemon_cpu_percent": 1.5, "measure_s": [0, 10]}


def test_tcpudp_outcome_report_goals_and_plot(tmp_path: Path) -> None:
    phases = {"without": _tcpudp_phase(30_000, 70_000, math.nan, math.nan),
              "with": _tcpudp_phase(40_000, 20_500, 9.0, 100.0)}
    sp = {"udp": 20_000.0, "tcp": 80_000.0}
    result = {"title": tcpudp.TITLE, "paper": tcpudp.PAPER, "udp_offered_pps": 100_000.0, "frame_bytes": 524,
              "tcp_mss_bytes": 470, "tcp_payload_bytes": 458, "udp_payload_bytes": 482, "hold_s": 20.0,
              "settle_s": 12.0, "udp_share": 0.2, "n_cpus": 2, "throughput": "packets/s",
              "vrs": {"tcp": "x-vr1", "udp": "x-vr2"}, "setpoints_pps": sp, "phases": phases,
              "comparison": tcpudp.compare_phases(phases["without"], phases["with"], sp),
              "recording": {"dt_s": 1.0, "marks": [{"t_s": 1.0, "label": "without XTC: measure"},
                                                   {"t_s": 9.0, "label": "without XTC: end"},
                                                   {"t_s": 12.0, "label": "with XTC: XTC on"},
                                                   {"t_s": 15.0, "label": "with XTC: measure"},
                                                   {"t_s": 20.0, "label": "with XTC: end"}],
                            "series": {"x-vr1": _series(21, 30_000, 25_000, None),
                                       "x-vr2": _series(21, 70_000, 99_000, 9.0)}}}
    out = tcpudp._outcome(result)
    assert [g.met for g in out.goals] == [True, True, True, True]
    assert "+10.0 kp/s" in out.report_md and "-49.5 kp/s" in out.report_md
    assert "~100" in out.report_md and "| 68 |" in out.report_md  # the paper's numbers beside the lab's
    assert "10.0% of its data segments were lost inside the VR" in out.report_md
    # with XTC the UDP VR missing its setpoint is a missed goal
    phases["with"]["udp"]["forwarded_pps"] = 30_000
    result["comparison"] = tcpudp.compare_phases(phases["without"], phases["with"], sp)
    assert [g.met for g in tcpudp._outcome(result).goals] == [True, False, True, True]
    png = tmp_path / "tcpudp.png"
    out.plot(png)  # type: ignore[misc]
    assert png.stat().st_size > 10_000


# ------------------------------------------------------------------ fairness analysis
def test_parse_flows() -> None:
    assert fairness.parse_flows(None, quick=False) == [1, 2, 4, 8]
    assert fairness.parse_flows(None, quick=True) == [1, 4]
    assert fairness.parse_flows(" 1, 16 ,", quick=False) == [1, 16]
    for bad, match in (("1,x", "not an integer"), ("0", "out of range"), ("129", "out of range"),
                       ("2,2", "twice"), (" , ", "no flow counts")):
        with pytest.raises(ValueError, match=match):
            fairness.parse_flows(bad, quick=False)


def test_fairness_point_and_unfairness_trend() -> None:
    p = fairness.fairness_point(4, {"one": _vr(30_000, 0), "many": _vr(36_000, 0)},
                                {"one": _vr(32_000, 0), "many": _vr(33_000, 0)}, 33_000)
    assert p["min_max_without"] == pytest.approx(30 / 36)
    assert p["min_max_with"] == pytest.approx(32 / 33)
    assert p["aggregate_kept"] == pytest.approx(65 / 66)
    assert p["many_share_without"] == pytest.approx(36 / 66)
    pts = [{"flows": 4, "min_max_without": 0.8}, {"flows": 1, "min_max_without": 0.98}]
    assert fairness.unfairness_grows(pts) is True
    assert fairness.unfairness_grows([{"flows": 1, "min_max_without": 0.9},
                                      {"flows": 8, "min_max_without": 0.95}]) is False
    assert fairness.unfairness_grows(pts[:1]) is None


def _fair_phase(one: float, many: float, cap_one: float, cap_many: float, others: float = 2.0) -> dict[str, Any]:
    def vr(fwd: float, cap: float, flows: int) -> dict[str, Any]:
        v = _vr(fwd, 0.8 * fwd, cap, 55.0)
        v.update(goodput_bits_per_s=8e7, iperf3={"flows": flows, "seconds": 10.0, "received_bits_per_s": 8e7,
                                                 "retransmits": 10, "flow_min_max_ratio": 0.9})
        return v
    return {"one": vr(one, cap_one, 1), "many": vr(many, cap_many, 4), "host_cpu_percent": _host_cpu(),
            "others_cpu_percent": others, "daemon_cpu_percent": 1.0, "measure_s": [0, 10]}


def test_fairness_outcome_goals_explanation_and_plot(tmp_path: Path) -> None:
    phases = {"1": {"without": _fair_phase(34_000, 34_000, math.nan, math.nan),
                    "with": _fair_phase(33_500, 33_800, 100.0, 100.0)},
              "4": {"without": _fair_phase(30_000, 36_000, math.nan, math.nan),
                    "with": _fair_phase(32_500, 33_000, 100.0, 60.0)}}
    pts = [fairness.fairness_point(1, phases["1"]["without"], phases["1"]["with"], 34_000),
           fairness.fairness_point(4, phases["4"]["without"], phases["4"]["with"], 33_000)]
    result = {"title": fairness.TITLE, "paper": fairness.PAPER, "flows": [1, 4], "frame_bytes": 524,
              "tcp_mss_bytes": 470, "hold_s": 15.0, "settle_s": 10.0, "n_cpus": 2, "throughput": "packets/s",
              "points": pts, "phases": phases, "vrs": {"one": "x-vr1", "many": "x-vr2"},
              "recording": {"dt_s": 1.0, "marks": [{"t_s": 1.0, "label": "n=1 without XTC: measure"},
                                                   {"t_s": 5.0, "label": "n=1 without XTC: end"}],
                            "series": {"x-vr1": _series(10, 30_000, 25_000, None),
                                       "x-vr2": _series(10, 36_000, 30_000, 60.0)}}}
    out = fairness._outcome(result)
    assert [g.met for g in out.goals] == [True, True, True]
    assert "VR 2 (4 flows) 33.0 kp/s, cap 60% (its forwarder used 55%)" in out.report_md
    assert "stayed under" not in out.report_md
    assert fairness.is_capped(60.0) and not fairness.is_capped(99.0)
    assert not fairness.is_capped(None) and not fairness.is_capped(math.nan)
    # a disturbed XTC phase: the aggregate falls, the other processes' CPU is named
    phases["4"]["with"] = _fair_phase(25_000, 31_000, 100.0, 100.0, others=40.0)
    pts[1] = fairness.fairness_point(4, phases["4"]["without"], phases["4"]["with"], 33_000)
    out = fairness._outcome(result)
    assert [g.met for g in out.goals] == [False, False, True]
    assert "processes outside the lab: 2% and 40%" in out.report_md
    assert "less to give the VRs in 1:4 with XTC" in out.report_md
    assert "Both VRs stayed under their setpoints, uncapped" in out.report_md
    phases["4"]["with"] = _fair_phase(25_000, 33_000, 100.0, 60.0)
    phases["4"]["with"]["one"]["path"] = {"dropped_in_vr_fraction": 0.08}
    pts[1] = fairness.fairness_point(4, phases["4"]["without"], phases["4"]["with"], 33_000)
    out = fairness._outcome(result)
    assert "VR 1 (1 flow) stayed under its setpoint, uncapped" in out.report_md
    assert "(8.0% of its data segments were lost inside the VR)" in out.report_md
    assert "above its setpoint" not in out.report_md
    phases["4"]["with"]["many"]["forwarded_pps"] = 36_300
    phases["4"]["with"]["many"]["forwarded_cv"] = 0.12
    pts[1] = fairness.fairness_point(4, phases["4"]["without"], phases["4"]["with"], 33_000)
    out = fairness._outcome(result)
    assert "VR 2 (4 flows) sat 10% above its setpoint; its 1 s rates scattered by 12%" in out.report_md
    assert "VR 2 (1 flow) " in out.report_md
    png = tmp_path / "fairness.png"
    out.plot(png)  # type: ignore[misc]
    assert png.stat().st_size > 10_000


def test_experiments_refuse_bad_options_before_touching_the_host(tmp_path: Path) -> None:
    ctx = RunContext(out_dir=tmp_path, quick=True)
    with pytest.raises(ValueError, match="--tcpudp-udp-share"):
        tcpudp.run(ctx, argparse.Namespace(tcpudp_hold=20.0, tcpudp_udp_share=1.5, tcpudp_frame=524, model=None))
    with pytest.raises(LabError, match="frame_bytes"):
        tcpudp.run(ctx, argparse.Namespace(tcpudp_hold=20.0, tcpudp_udp_share=0.2, tcpudp_frame=60, model=None))
    with pytest.raises(ValueError, match="--tcpudp-hold"):
        tcpudp.run(RunContext(out_dir=tmp_path), argparse.Namespace(tcpudp_hold=2.0, tcpudp_udp_share=0.2,
                                                                    tcpudp_frame=524, model=None))
    with pytest.raises(ValueError, match="--fairness-flows"):
        fairness.run(ctx, argparse.Namespace(fairness_flows="0", fairness_hold=15.0, model=None))


def test_vr_drops_counts_both_directions_of_a_two_way_forwarder() -> None:
    from xtc_lab.lab.drops import vr_drops

    def ifc(rx: int = 0, tx: int = 0, tx_drops: int = 0) -> dict[str, int]:
        return {"rx_packets": rx, "tx_packets": tx, "rx_drops": 0, "tx_drops": tx_drops}

    delta = {"t_s": 2.0, "softnet": {"backlog_drops": 4, "time_squeeze": 0},
             "host": {"v1": ifc(rx=200, tx=1000, tx_drops=2), "v2": ifc(rx=900, tx=210)},
             "vr1": {"dev": {"eth0": ifc(rx=1000), "eth1": ifc(rx=200)}, "cpu_s": 1.0,
                     "sockets": {"eth0": {"drops": 90, "rcvbuf_bytes": 212992}, "eth1": {"drops": 10, "rcvbuf_bytes": 1}},
                     "cgroup": {"nr_periods": 20, "nr_throttled": 5}}}
    d = vr_drops(delta, {"vr1": ("v1", "v2")})
    assert d["host"]["backlog_drop_pps"] == 2.0
    v = d["vr1"]
    assert (v["handed_pps"], v["received_pps"], v["forwarded_pps"]) == (605.0, 600.0, 550.0)
    assert (v["socket_drop_pps"], v["socket_drop_eth0_pps"], v["host_tx_drop_pps"]) == (50.0, 45.0, 1.0)
    assert v["socket_drop_share"] == pytest.approx(50 / 600)
    assert (v["cpu_share"], v["throttled_share"], v["rcvbuf_bytes"]) == (0.5, 0.25, 212992)
    assert v["throttled_s_per_s"] == 0.0 and v["run_delay_share"] is None  # not read: none
    delta["vr1"]["cgroup"]["throttled_s"] = 0.5
    delta["vr1"]["run_delay_s"] = 0.6  # waited runnable for a CPU (schedstat), 0.3 s a second
    v = vr_drops(delta, {"vr1": ("v1", "v2")})["vr1"]
    assert (v["throttled_s_per_s"], v["run_delay_share"]) == (0.25, 0.3)


def test_qemu_host_side_rates_from_the_host_counters() -> None:
    host = {"xtcx-ab12-g1": {"rx_packets": 50_000, "tx_packets": 10, "rx_drops": 0, "tx_drops": 0},
            "vif7.0": {"rx_packets": 100, "tx_packets": 30_000, "rx_drops": 0, "tx_drops": 20_000},
            "vif7.1": {"rx_packets": 29_000, "tx_packets": 200, "rx_drops": 0, "tx_drops": 0}}
    out = tcpudp.qemu_host_side(host, 2.0, "xtcx-ab12-g1", ("vif7.0", "vif7.1"))
    assert out == {"sent_pps": 25_000.0, "tap_tx_pps": 15_100.0, "tap_tx_drop_pps": 10_000.0}
    assert math.isnan(tcpudp.qemu_host_side(host, 2.0, "gone", ("vif7.0", "vif7.1"))["sent_pps"])
    with pytest.raises(ValueError, match="dt_s"):
        tcpudp.qemu_host_side(host, 0.0, "xtcx-ab12-g1", ("vif7.0",))
