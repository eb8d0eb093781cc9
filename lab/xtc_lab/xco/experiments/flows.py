"""Bulk flows between lab VMs (iperf3), pings, and the switch-port counters around them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from xtc_lab.lab.netlab import LabError
from xtc_lab.lab.traffic import iperf3_tcp_argv
from xtc_lab.xco.testbed import Testbed

UDP_PAYLOAD_BYTES = 1400  # one datagram per frame (netperf's 64 KB messages would be IP fragments)
BASE_PORT = 5201
#: Figure 1(a)'s senders, each on its own host, and its bottleneck: the switch port into the receiver r1.
FIG1A_SENDERS = ("s1", "s2", "s3", "s4", "s5")
FIG1A_BOTTLENECK = "sw1>r1"


class Fig1a(NamedTuple):
    """What the Figure 1(a) experiments (senders s1..s5, each on its own host, into r1) start from."""

    tb: Testbed
    #: How long the senders send per run, s: 3 with ``--quick``, else 10.
    duration_s: int
    #: The switch port every flow crosses (:data:`FIG1A_BOTTLENECK`).
    bottleneck: str
    #: Its rate, bits/s (scaled).
    bottleneck_bps: int
    #: A sender's NIC rate (``s1>sw1``), bits/s (scaled): the rate UDP senders send at.
    nic_bps: int


def fig1a(ctx: Any) -> Fig1a:
    """The testbed, run length and rates of a Figure 1(a) experiment run with ``ctx``."""
    tb = ctx.tb
    return Fig1a(tb, 3 if ctx.quick else 10, FIG1A_BOTTLENECK, tb.rate_bps(FIG1A_BOTTLENECK), tb.rate_bps("s1>sw1"))


@dataclass
class TrafficFlow:
    sender: str
    proto: str  # "tcp" or "udp"
    port: int
    server: subprocess.Popen[bytes]
    receiver: str = ""
    client: subprocess.Popen[bytes] | None = None


def wait_listening(tb: Testbed, ns: str, ports: Sequence[int], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    want = {f":{p}" for p in ports}
    while time.monotonic() < deadline:
        out = tb.run(ns, ["ss", "-Hltn"]).stdout
        have = {w for w in want if re.search(re.escape(w) + r"\s", out)}
        if have == want:
            return
        time.sleep(0.05)
    raise LabError(f"iperf3 servers on {sorted(ports)} not listening in {ns} within {timeout_s} s")


def helper(name: str) -> list[str]:
    """The command that runs one of this directory's helper programs as a script (``udpflow``,
    ``stripe``): standard library only, so it starts fast in many namespaces at once."""
    return [sys.executable, str(Path(__file__).with_name(f"{name}.py"))]


def json_of(p: subprocess.Popen[bytes], timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    text = out.decode(errors="replace").strip()
    for candidate in (text, text.splitlines()[-1] if text else ""):  # iperf3's JSON; a helper's last line
        try:
            return json.loads(candidate), ""
        except ValueError:
            continue
    return None, f"output unusable: {text[-200:]!r} {err.decode(errors='replace')[-300:]}"


def run_flows(tb: Testbed, senders: Sequence[tuple[str, str]], receiver: str | Mapping[str, str], duration_s: int,
              udp_rate_bps: int, udp_payload_bytes: int = UDP_PAYLOAD_BYTES,
              udp_rates_bps: dict[str, int] | None = None, congestion: str | None = None) -> list[dict[str, Any]]:
    """Start ``senders`` ((host, "tcp"|"udp")) towards ``receiver``'s VM together (or, a mapping,
    each towards the VM of its own receiver host); wait; return per-flow results.

    TCP: one iperf3 connection each, goodput from iperf3's ``sum_received``.  UDP: a paced sender
    at ``udp_rate_bps`` (the NIC rate: netperf sends as fast as it can) of ``udp_payload_bytes``
    datagrams (above 1472 a datagram leaves as IP fragments, and losing one loses the datagram) and a
    counting sink at the receiver (:mod:`xtc_lab.xco.experiments.udpflow`); goodput is what the
    sink got over ``duration_s``.  Bits/s.  ``udp_rates_bps``: per sender host, a rate that replaces
    ``udp_rate_bps``.  ``congestion``: the TCP senders' congestion control (iperf3 ``-C``), None
    for :data:`TCP_CONGESTION`.
    """
    congestion = congestion or TCP_CONGESTION
    flows = []
    for k, (h, proto) in enumerate(senders):
        port = BASE_PORT + k
        rcv = receiver if isinstance(receiver, str) else receiver[h]
        _raddr, rns = tb.vm(rcv)
        if proto == "tcp":
            srv = tb.spawn(rns, ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        else:
            srv = tb.spawn(rns, [*helper("udpflow"), "sink", str(port), str(duration_s)])
            assert srv.stdout is not None
            if srv.stdout.readline().strip() != b"ready":
                raise LabError(f"UDP sink on port {port} did not start")
        flows.append(TrafficFlow(h, proto, port, srv, rcv))
    for rcv in dict.fromkeys(f.receiver for f in flows):
        wait_listening(tb, tb.vm(rcv)[1], [f.port for f in flows if f.proto == "tcp" and f.receiver == rcv])
    for f in flows:
        _addr, sns = tb.vm(f.sender)
        raddr = tb.vm(f.receiver)[0]
        if f.proto == "tcp":
            f.client = tb.spawn(sns, iperf3_tcp_argv(raddr, duration_s, port=f.port, congestion=congestion))
        else:
            rate = (udp_rates_bps or {}).get(f.sender, udp_rate_bps)
            f.client = tb.spawn(sns, [*helper("udpflow"), "send", raddr, str(f.port), str(rate),
                                      str(udp_payload_bytes), str(duration_s)])
    out = []
    for f in flows:
        assert f.client is not None
        rec: dict[str, Any] = {"sender": f.sender, "receiver": f.receiver, "proto": f.proto, "goodput_bps": 0.0}
        doc, err = json_of(f.client, duration_s + 30)
        if f.proto == "tcp":
            try:
                end = doc["end"]  # type: ignore[index]
                rec["goodput_bps"] = float(end["sum_received"]["bits_per_second"])
                rec["retransmits"] = int(end.get("sum_sent", {}).get("retransmits", 0))
            except (KeyError, TypeError, ValueError) as e:
                rec["error"] = err or f"iperf3 output unusable ({e})"
            try:
                f.server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                f.server.kill()
        else:
            got, err2 = json_of(f.server, 15)
            if doc is None or got is None:
                rec["error"] = err or err2
            else:
                rec["sent_bps"] = doc["bytes"] * 8 / duration_s
                rec["goodput_bps"] = got["bytes"] * 8 / duration_s
                rec["datagrams_sent"] = doc["datagrams"]
                rec["datagrams_received"] = got["datagrams"]
                rec["lost_percent"] = 100.0 * (1 - got["datagrams"] / doc["datagrams"]) if doc["datagrams"] else 0.0
        out.append(rec)
    return out


def run_flows_across(tb: Testbed, link: str, senders: Sequence[tuple[str, str]], receiver: str | Mapping[str, str],
                     duration_s: int,
                     udp_rate_bps: int, udp_payload_bytes: int = UDP_PAYLOAD_BYTES,
                     udp_rates_bps: dict[str, int] | None = None,
                     congestion: str | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """:func:`run_flows`, and the switch port ``link``'s counters over them (:func:`port_delta` for
    ``duration_s``): ``(per-flow results, port)``."""
    before = tb.port_stats()
    flows = run_flows(tb, senders, receiver, duration_s, udp_rate_bps, udp_payload_bytes, udp_rates_bps, congestion)
    after = tb.port_stats()
    return flows, port_delta(before, after, link, duration_s)


def flow_errors(flows: Sequence[Mapping[str, Any]]) -> list[str]:
    """``sender: error`` of every flow of :func:`run_flows` that failed (a point's ``errors``)."""
    return [f"{f['sender']}: {f['error']}" for f in flows if f.get("error")]


def failed_flows_md(points: Sequence[Mapping[str, Any]]) -> str:
    """The report's paragraph naming the flows that failed at any of ``points`` (their ``errors``);
    empty when none did."""
    errors = [e for p in points for e in p["errors"]]
    return f"\n\nFlows that failed: {'; '.join(errors)}." if errors else ""


def port_delta(before: dict[str, Any], after: dict[str, Any], link: str, seconds: float) -> dict[str, Any]:
    """Counters of one emulated port between two :meth:`Testbed.port_stats` readings."""
    b, a = before[link], after[link]
    pk = a["packets"] - b["packets"]
    dr = a["drops"] - b["drops"]
    by = a["bytes"] - b["bytes"]
    return {"link": link, "packets": pk, "drops": dr, "bytes": by,
            "loss_percent": 100.0 * dr / (pk + dr) if pk + dr else 0.0,
            "utilisation": by * 8 / seconds / a["rate_bps"]}


def ip_reassembly(tb: Testbed, host: str) -> dict[str, int]:
    """IP reassembly counters of a host's VM (``/proc/net/snmp``: ReasmReqds, ReasmOKs, ReasmFails)."""
    text = tb.run(tb.vm(host)[1], ["cat", "/proc/net/snmp"]).stdout
    lines = [ln.split() for ln in text.splitlines() if ln.startswith("Ip:")]
    if len(lines) < 2:
        raise LabError(f"no Ip: lines in /proc/net/snmp of {host}'s VM")
    row = dict(zip(lines[0][1:], lines[1][1:]))
    return {k: int(row[k]) for k in ("ReasmReqds", "ReasmOKs", "ReasmFails")}


_RTT = re.compile(r"time=([\d.]+) ms")
#: ping's summary: "N packets transmitted, M received, ..., time T ms" (T: from the first request to the last)
_SPAN = re.compile(r"packets transmitted.*time (\d+)ms")


#: The TCP senders' congestion control (iperf3 ``-C``); None: the VM namespace's default, which on
#: this project's VMs is BBR (``net.ipv4.tcp_congestion_control``).  ``XTC_XCO_LAB_TCP_CONGESTION``
#: sets it, for before/after runs.
TCP_CONGESTION = os.environ.get("XTC_XCO_LAB_TCP_CONGESTION") or None


#: The ICMP payload of :func:`ping_rtts`' echo requests, bytes (ping's default) ...
PING_PAYLOAD_BYTES = 56
#: ... and the frame each one is on a link: Ethernet 14 + IPv4 20 + ICMP 8 + the payload.
PING_FRAME_BYTES = 14 + 20 + 8 + PING_PAYLOAD_BYTES


def ping_rtts(tb: Testbed, src: str, dst: str, count: int, interval_s: float = 0.01) -> dict[str, Any]:
    """``count`` pings (:data:`PING_FRAME_BYTES` each) from ``src``'s VM to ``dst``'s VM: RTTs (ms)
    and their percentiles; lost ones counted."""
    _a, sns = tb.vm(src)
    daddr, _ = tb.vm(dst)
    p = tb.run(sns, ["ping", "-n", "-s", str(PING_PAYLOAD_BYTES), "-i", str(interval_s), "-c", str(count), "-W", "1",
                     daddr],
               timeout_s=count * interval_s + 30)
    rtts = [float(m) for m in _RTT.findall(p.stdout)]
    res: dict[str, Any] = {"sent": count, "received": len(rtts), "rtts_ms": rtts}
    span = _SPAN.search(p.stdout)
    if span:
        res["span_ms"] = int(span.group(1))
    if rtts:
        arr = np.asarray(rtts)
        res.update({"p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99)),
                    "max_ms": float(arr.max()), "min_ms": float(arr.min())})
    return res
