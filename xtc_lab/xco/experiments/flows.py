"""Bulk flows between lab VMs (iperf3), pings, and the switch-port counters around them."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xtc_lab.lab.netlab import LabError
from xtc_lab.lab.traffic import iperf3_tcp_argv
from xtc_lab.xco.testbed import Testbed

UDP_PAYLOAD_BYTES = 1400  # one datagram per frame (netperf's 64 KB messages would be IP fragments)
BASE_PORT = 5201


@dataclass
class Flow:
    sender: str
    proto: str  # "tcp" or "udp"
    port: int
    server: subprocess.Popen[bytes]
    client: subprocess.Popen[bytes] | None = None


def wait_listening(tb: Testbed, ns: str, ports: Sequence[int], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    want = {f":{p}" for p in ports}
    while time.monotonic() < deadline:
        out = tb.run(ns, ["ss", "-Hltn"]).stdout
        have = {w for w in want if re.search(re.escape(w) + r"\s", out)}
        if have == want:
            return
        time.sleep(0.05)
    raise LabError(f"iperf3 servers on {sorted(ports)} not listening in {ns} within {timeout_s} s")


def run_flows(tb: Testbed, senders: Sequence[tuple[str, str]], receiver: str, duration_s: int,
              udp_rate_bps: int, udp_payload_bytes: int = UDP_PAYLOAD_BYTES) -> list[dict[str, Any]]:
    """Start ``senders`` ((host, "tcp"|"udp")) towards ``receiver``'s VM together; wait; return per-flow results.

    UDP senders send ``udp_rate_bps`` (the NIC rate: netperf sends as fast as it can) in datagrams of
    ``udp_payload_bytes`` (above 1472 a datagram leaves as IP fragments, and losing one loses the
    datagram); TCP is one iperf3 connection each.  Goodput is what the receiver got
    (iperf3's ``sum_received``), bits/s.
    """
    raddr, rns = tb.vm(receiver)
    flows = []
    for k, (h, proto) in enumerate(senders):
        port = BASE_PORT + k
        srv = tb.spawn(rns, ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        flows.append(Flow(h, proto, port, srv))
    wait_listening(tb, rns, [f.port for f in flows])
    for f in flows:
        _addr, sns = tb.vm(f.sender)
        if f.proto == "tcp":
            argv = iperf3_tcp_argv(raddr, duration_s, port=f.port)
        else:
            argv = ["iperf3", "-c", raddr, "-p", str(f.port), "-u", "-l", str(udp_payload_bytes),
                    "-b", str(udp_rate_bps), "-t", str(duration_s), "--json"]
        f.client = tb.spawn(sns, argv)
    out = []
    for f in flows:
        assert f.client is not None
        try:
            stdout, stderr = f.client.communicate(timeout=duration_s + 30)
        except subprocess.TimeoutExpired:
            f.client.kill()
            stdout, stderr = f.client.communicate()
        rec: dict[str, Any] = {"sender": f.sender, "proto": f.proto}
        try:
            doc = json.loads(stdout)
            end = doc["end"]
            recv = end.get("sum_received") or end["sum"]
            rec["goodput_bps"] = float(recv["bits_per_second"])
            if f.proto == "udp":
                s = end["sum"]
                rec["sent_bps"] = float(s["bits_per_second"])
                rec["lost_percent"] = float(recv.get("lost_percent", s.get("lost_percent", 0.0)))
            else:
                rec["retransmits"] = int(end.get("sum_sent", {}).get("retransmits", 0))
        except (ValueError, KeyError, TypeError) as e:
            rec["error"] = f"iperf3 output unusable ({e}): {stderr.decode(errors='replace')[-300:]}"
            rec["goodput_bps"] = 0.0
        out.append(rec)
    for f in flows:
        try:
            f.server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            f.server.kill()
    return out


def port_delta(before: dict[str, Any], after: dict[str, Any], link: str, seconds: float) -> dict[str, Any]:
    """Counters of one emulated port between two :meth:`Testbed.port_stats` readings."""
    b, a = before[link], after[link]
    pk = a["packets"] - b["packets"]
    dr = a["drops"] - b["drops"]
    by = a["bytes"] - b["bytes"]
    return {"link": link, "packets": pk, "drops": dr, "bytes": by,
            "loss_percent": 100.0 * dr / (pk + dr) if pk + dr else 0.0,
            "utilisation": by * 8 / seconds / a["rate_bps"]}


_RTT = re.compile(r"time=([\d.]+) ms")


def ping_rtts(tb: Testbed, src: str, dst: str, count: int, interval_s: float = 0.01) -> dict[str, Any]:
    """``count`` pings from ``src``'s VM to ``dst``'s VM: RTTs (ms) and their percentiles; lost ones counted."""
    _a, sns = tb.vm(src)
    daddr, _ = tb.vm(dst)
    p = tb.run(sns, ["ping", "-n", "-i", str(interval_s), "-c", str(count), "-W", "1", daddr],
               timeout_s=count * interval_s + 30)
    rtts = [float(m) for m in _RTT.findall(p.stdout)]
    res: dict[str, Any] = {"sent": count, "received": len(rtts), "rtts_ms": rtts}
    if rtts:
        arr = np.asarray(rtts)
        res.update({"p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99)),
                    "max_ms": float(arr.max()), "min_ms": float(arr.min())})
    return res
