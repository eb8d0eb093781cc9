"""Where a VR's frames are lost: the counters read before and after a measured interval.

Shared by the lab experiments (multihop, sixvr, tcpudp): :func:`loss_snapshot` reads, once,
every counter that says where a frame was dropped (the host's per-CPU backlog, the host-side
veths and qdiscs, each VR's own interfaces, its forwarder's packet sockets (``ss -0 -m``,
``skmem`` ``d``: the receive queue was full), its CPU seconds, the time it waited runnable for a CPU (``/proc/<pid>/schedstat``) and its CFS
throttling);
:func:`counter_delta` subtracts two readings.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Sequence

from xtc_lab.lab.netlab import LabError


def net_core_sysctls() -> dict[str, int | None]:
    """net.core.rmem_default / rmem_max (socket receive buffer, bytes) and netdev_max_backlog (frames)."""
    out: dict[str, int | None] = {}
    for key in ("rmem_default", "rmem_max", "netdev_max_backlog"):
        try:
            out[key] = int(Path(f"/proc/sys/net/core/{key}").read_text())
        except (OSError, ValueError):
            out[key] = None
    return out


def _softnet_totals(text: str) -> dict[str, int]:
    """Sum over CPUs of ``/proc/net/softnet_stat``: backlog drops (column 2) and time squeezes (3)."""
    dropped = squeezed = 0
    for line in text.split("\n"):
        cols = line.split()
        if len(cols) >= 3:
            dropped += int(cols[1], 16)
            squeezed += int(cols[2], 16)
    return {"backlog_drops": dropped, "time_squeeze": squeezed}


def parse_ss_packet(text: str) -> dict[str, dict[str, int]]:
    """Parse ``ss -0 -m -H`` (packet sockets with their memory): per bound interface, the
    socket's receive buffer (``rb``, bytes), its queued bytes (``r``) and its drops (``d``,
    frames dropped because the receive queue was full).  Sockets on the same interface add up."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        fields = line.split()
        mem = next((f for f in fields if f.startswith("skmem:(")), None)
        if mem is None or len(fields) < 4:
            continue
        iface = fields[3].rsplit(":", 1)[-1]
        kv = {}
        for item in mem[len("skmem:("):].rstrip(")").split(","):
            key = item.rstrip("0123456789")
            if key and item[len(key):]:
                kv[key] = int(item[len(key):])
        s = out.setdefault(iface, {"rcvbuf_bytes": 0, "queued_bytes": 0, "drops": 0})
        s["rcvbuf_bytes"] += kv.get("rb", 0)
        s["queued_bytes"] += kv.get("r", 0)
        s["drops"] += kv.get("d", 0)
    return out


def _snmp_udp(text: str) -> dict[str, int]:
    """The ``Udp:`` counters of ``/proc/net/snmp`` (InDatagrams, InErrors, RcvbufErrors, ...)."""
    rows = [ln.split()[1:] for ln in text.splitlines() if ln.startswith("Udp:")]
    return {k: int(v) for k, v in zip(rows[0], rows[1])} if len(rows) >= 2 else {}


def _ifc(c: Any) -> dict[str, int]:
    return {"rx_packets": c.rx_packets, "tx_packets": c.tx_packets, "rx_drops": c.rx_drops, "tx_drops": c.tx_drops}


def _qdisc_drops(pid: int | None = None) -> int:
    """Packets dropped by every qdisc of a namespace (the host's, or that of process ``pid``)."""
    import json
    import subprocess

    cmd = ["tc", "-s", "-j", "qdisc", "show"]
    if pid is not None:
        cmd = ["nsenter", "-t", str(pid), "-n", *cmd]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
        return sum(int(q.get("drops", 0)) for q in json.loads(out or "[]"))
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def loss_snapshot(vrs: Sequence[Any], pids: dict[str, int], host_ifaces: Sequence[str]) -> dict[str, Any]:
    """Every counter that says where a frame of the chain was lost, read once (cumulative values).

    Parameters
    ----------
    vrs
        The VRs (``vifs`` = host-side (upstream, downstream) interfaces); each is keyed by its
        ``router`` (a chain's VR) or else its ``name``.
    pids
        That key -> pid of a process inside that VR (its forwarder): the VR's own network
        namespace is read through ``/proc/<pid>/net/...`` and ``nsenter``.
    host_ifaces
        Host-side interfaces of the generator and receiver (their veth ends on the bridges).

    Returns
    -------
    dict
        ``t_s`` (monotonic, s); ``softnet`` (host-wide backlog drops and time squeezes);
        ``host`` (per host-side interface: rx/tx packets and drops); ``host_qdisc_drops``;
        per VR in ``vrs`` (by its key): ``dev`` (the VR's eth0/eth1 as it sees them), ``sockets``
        (its packet sockets per interface: ``rcvbuf_bytes``, ``queued_bytes``, ``drops``),
        ``udp`` (``/proc/net/snmp`` Udp counters of its namespace), ``qdisc_drops``,
        ``cpu_s`` (the forwarder's CPU seconds), ``run_delay_s`` (seconds it waited runnable for a
        CPU: the scheduler's ``/proc/<pid>/schedstat``, when readable) and ``cgroup``
        (``nr_periods``, ``nr_throttled``, ``throttled_s`` of its cpu cgroup, when readable).
    """
    import subprocess

    from xtc.host.counters import parse_proc_net_dev
    from xtc_lab.lab.hog import process_cpu_cgroup

    snap: dict[str, Any] = {"t_s": time.monotonic(), "softnet": _softnet_totals(Path("/proc/net/softnet_stat").read_text())}
    host = parse_proc_net_dev(Path("/proc/net/dev").read_text())
    wanted = [*host_ifaces, *(v for vr in vrs for v in vr.vifs)]
    snap["host"] = {i: _ifc(host[i]) for i in wanted if i in host}
    snap["host_qdisc_drops"] = _qdisc_drops()
    tck = os.sysconf("SC_CLK_TCK")
    for vr in vrs:
        key = vr.router or vr.name
        pid = pids[key]
        d: dict[str, Any] = {}
        try:
            dev = parse_proc_net_dev(Path(f"/proc/{pid}/net/dev").read_text())
            d["dev"] = {i: _ifc(c) for i, c in dev.items() if i != "lo"}
            d["udp"] = _snmp_udp(Path(f"/proc/{pid}/net/snmp").read_text())
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            d["cpu_s"] = (int(stat[11]) + int(stat[12])) / tck
        except OSError:
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):  # (no CONFIG_SCHED_INFO: left out)
            d["run_delay_s"] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
        ss = subprocess.run(["nsenter", "-t", str(pid), "-n", "ss", "-0", "-m", "-H"], capture_output=True,
                            text=True, timeout=10)
        d["sockets"] = parse_ss_packet(ss.stdout)
        d["qdisc_drops"] = _qdisc_drops(pid)
        try:
            text = (process_cpu_cgroup(pid).path / "cpu.stat").read_text()
            st = dict(ln.split() for ln in text.splitlines() if len(ln.split()) == 2)
            throttled_s = (int(st["throttled_time"]) / 1e9 if "throttled_time" in st
                           else int(st.get("throttled_usec", 0)) / 1e6)
            d["cgroup"] = {"nr_periods": int(st.get("nr_periods", 0)), "nr_throttled": int(st.get("nr_throttled", 0)),
                           "throttled_s": throttled_s}
        except (OSError, ValueError, LabError):
            pass
        snap[key] = d
    return snap


def counter_delta(a: Any, b: Any) -> Any:
    """``b - a`` leaf by leaf (nested dicts of numbers); a receive buffer size is kept as ``b``'s."""
    if isinstance(b, dict):
        return {k: (v if k == "rcvbuf_bytes" else counter_delta(a.get(k, 0) if isinstance(a, dict) else 0, v))
                for k, v in b.items()}
    return b - a


def vr_drops(delta: dict[str, Any], vifs: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Where each VR's frames went over one interval, both directions (a two-way forwarder), in packets per second.

    Parameters
    ----------
    delta
        :func:`counter_delta` of two :func:`loss_snapshot` readings of the VRs (keyed by name).
    vifs
        VR name -> its host-side (generator side, receiver side) interfaces.

    Returns
    -------
    dict
        Per VR: ``handed_pps`` (host-side TX into the VR, both vifs: data one way, ACKs the
        other), ``host_tx_drop_pps`` (the host's veth could not hand a frame over),
        ``received_pps`` (the VR's eth0 + eth1 RX), ``socket_drop_pps`` (its forwarder's receive
        queues were full, ``ss`` skmem ``d``), ``socket_drop_share`` (of ``received_pps``),
        ``socket_drop_eth0_pps`` (the data direction), ``forwarded_pps`` (host-side RX from the
        VR), ``cpu_share`` (forwarder CPU seconds per second), ``throttled_share`` (fraction of
        its CFS periods throttled), ``throttled_s_per_s`` (seconds throttled per second),
        ``run_delay_share`` (seconds its forwarder waited runnable for a CPU per second; None
        when not readable), ``rcvbuf_bytes`` (of its eth0 socket); and ``"host"``:
        ``backlog_drop_pps`` (the host's per-CPU input backlog).
    """
    dt = delta["t_s"]
    h = delta["host"]
    out: dict[str, dict[str, float]] = {"host": {"backlog_drop_pps": delta["softnet"]["backlog_drops"] / dt}}
    for name, (up, down) in vifs.items():
        d = delta.get(name, {})
        dev, socks, cg = d.get("dev", {}), d.get("sockets", {}), d.get("cgroup", {})
        received = sum(dev.get(i, {}).get("rx_packets", 0) for i in ("eth0", "eth1")) / dt
        sock_drop = sum(socks.get(i, {}).get("drops", 0) for i in ("eth0", "eth1")) / dt
        out[name] = {
            "handed_pps": (h[up]["tx_packets"] + h[down]["tx_packets"]) / dt,
            "host_tx_drop_pps": (h[up]["tx_drops"] + h[down]["tx_drops"]) / dt,
            "received_pps": received, "socket_drop_pps": sock_drop,
            "socket_drop_share": sock_drop / received if received else 0.0,
            "socket_drop_eth0_pps": socks.get("eth0", {}).get("drops", 0) / dt,
            "forwarded_pps": (h[up]["rx_packets"] + h[down]["rx_packets"]) / dt,
            "cpu_share": d.get("cpu_s", 0.0) / dt,
            "throttled_share": (cg["nr_throttled"] / cg["nr_periods"]) if cg.get("nr_periods") else 0.0,
            "throttled_s_per_s": cg.get("throttled_s", 0.0) / dt,
            "run_delay_share": d["run_delay_s"] / dt if "run_delay_s" in d else None,
            "rcvbuf_bytes": socks.get("eth0", {}).get("rcvbuf_bytes"),
        }
    return out
