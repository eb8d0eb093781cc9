"""TCP through a real LXC VR, and ``xtc lab run tcpudp --quick`` as a process.

* One and four iperf3 TCP flows of the paper's 524-byte segments through a real VR: the parsed
  report is sane (flows, MSS, bytes per flow), and the host's counters see one packet per
  segment (the stream turns off segmentation offload; with it the host would count 64 KB
  super-frames) and the ACKs coming back.
* ``xtc lab run tcpudp --quick``: its JSON is complete and its numbers are sane (both phases,
  both VRs, finite rates, caps within 1..100% of one CPU, the UDP VR capped under XTC), and
  nothing with the run's lab prefix is left behind.  Goals are not checked here: they are
  measurements, and a shared host may miss them.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from labruns import lab_run_result, run_xtc

from xtc_lab.lab.netlab import NetLab
from xtc_lab.lab.traffic import TcpResult, start_tcp_stream

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.slow]

PAYLOAD_BYTES = 524 - 66  # a full data segment's payload with MSS 470 and timestamps


def _stream(lab: NetLab, flows: int, seconds: int) -> tuple[TcpResult, dict[str, int]]:
    vr = lab.vrs[0]
    c0 = vr.counters()
    with start_tcp_stream(lab, vr, seconds, flows=flows) as s:
        res = s.wait()
    time.sleep(0.2)
    c1 = vr.counters()
    return res, {k: c1[k] - c0[k] for k in c0}


@pytest.mark.timeout(40)
def test_tcp_one_and_four_flows_through_a_real_vr(vr_lab) -> None:
    lab: NetLab = vr_lab(n_vrs=1)
    for flows in (1, 4):
        res, d = _stream(lab, flows, 3)
        print(f"\n{flows} flow(s): {res.received_bits_per_s / 1e6:.1f} Mbit/s, retransmits {res.retransmits}, "
              f"per flow {res.flow_received_bytes}; host counters {d}")
        assert res.flows == flows and len(res.flow_received_bytes) == flows
        assert res.mss_bytes == 470
        assert 2.5 <= res.seconds <= 4.0
        assert all(b > 0 for b in res.flow_received_bytes), "every flow moved data"
        assert res.received_bytes == sum(res.flow_received_bytes)
        assert res.received_bytes > 1_000_000, "at least ~2.7 Mbit/s through an unlimited VR"
        assert res.retransmits is not None
        # one packet per segment: the data packets handed to the VR are at least the payload
        # received over the payload per segment (with offload they would be ~100x fewer) ...
        segments = res.received_bytes / PAYLOAD_BYTES
        assert d["offered_from_tg"] >= 0.95 * segments, (d, segments)
        assert d["offered_from_tg"] <= 3.0 * segments + 10_000, "not much more than data + retransmits + handshakes"
        # ... and what the VR forwarded both ways is data plus ACKs.
        acks = d["forwarded"] - d["forwarded_to_tr"]
        assert d["forwarded_to_tr"] >= 0.95 * segments
        assert acks > 0.05 * segments, "the receiver's ACKs came back through the VR"


def _finite_pos(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.experiment  # 33 s: Figure 17's quick run (its pure parts: tests/unit/test_lab_tcp_pure.py)
@pytest.mark.timeout(80)
def test_lab_run_tcpudp_quick(libvirtd, tmp_path: Path) -> None:
    r = run_xtc(["lab", "run", "tcpudp", "--quick", "--out", str(tmp_path)], 75)
    res = lab_run_result(r, tmp_path, "tcpudp")
    for key in ("phases", "comparison", "setpoints_pps", "recording", "goals", "host", "frame_bytes", "tcp_mss_bytes"):
        assert key in res, key
    assert res["frame_bytes"] == 524 and res["tcp_mss_bytes"] == 470 and res["udp_payload_bytes"] == 482
    assert len(res["goals"]) == 4 and all(isinstance(g["met"], bool) for g in res["goals"])
    for phase in ("without", "with"):
        ph = res["phases"][phase]
        for vr in ("tcp", "udp"):
            assert _finite_pos(ph[vr]["forwarded_pps"]), (phase, vr, ph[vr])
            assert _finite_pos(ph[vr]["offered_pps"]), (phase, vr, ph[vr])
            assert _finite_pos(ph[vr]["cpu_percent"]), (phase, vr, ph[vr])
        assert ph["tcp"]["iperf3"]["mss_bytes"] == 470
        assert ph["udp"]["sender"]["sent_pps"] > 0.3 * res["udp_offered_pps"]
        assert ph["aggregate_pps"] == pytest.approx(ph["tcp"]["forwarded_pps"] + ph["udp"]["forwarded_pps"])
        assert 150 <= sum(ph["host_cpu_percent"].values()) <= 250  # 2 cores = 200% (any host: n_cpus * 100)
    sp = res["setpoints_pps"]
    agg = res["phases"]["without"]["aggregate_pps"]
    assert sp["udp"] == pytest.approx(0.2 * agg, abs=100) and sp["tcp"] == pytest.approx(0.8 * agg, abs=100)
    # without XTC nothing is capped; with XTC the UDP VR is, within the 1..100% bounds
    assert res["phases"]["without"]["udp"]["cap_percent"] is None
    caps = [c for c in res["recording"]["series"][res["vrs"]["udp"]]["cap_percent"] if c is not None]
    assert caps and all(1.0 <= c <= 100.0 for c in caps), caps
    assert res["phases"]["with"]["udp"]["cap_percent"] < 50
    cmp_ = res["comparison"]
    assert cmp_["aggregate_with_pps"] == pytest.approx(res["phases"]["with"]["aggregate_pps"])
    assert cmp_["tcp_gain_pps"] == pytest.approx(res["phases"]["with"]["tcp"]["forwarded_pps"]
                                                 - res["phases"]["without"]["tcp"]["forwarded_pps"])
    md = (tmp_path / "tcpudp.md").read_text()
    assert "| aggregate (kp/s) | ~100 |" in md and "## Goals" in md
