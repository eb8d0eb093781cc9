"""TCP and UDP VRs sharing the host, without and with XTC (the paper's Figure 17).

The paper (section 7.3) runs two VRs on one Xen host: one forwards a TCP flow, the other a
UDP flow of 100 kp/s, both of 524-byte packets.  Without XTC the UDP VR takes most of Dom0
(UDP has no congestion control), for an aggregate of about 100 kp/s.  With XTC, setpoints of
20 kp/s (UDP VR) and 80 kp/s (TCP VR) give the TCP VR 16 kp/s more but take 49 kp/s from the
UDP VR: the aggregate falls to 68 kp/s, because Dom0 still moves the whole 100 kp/s of UDP to
the capped VR, which drops what it cannot forward.

Here two LXC VRs of the lab share the host kernel (the lab's Dom0) on 2 cores: VR 1 forwards
one iperf3 TCP flow (MSS set so a full data segment is ``--tcpudp-frame`` bytes on the wire,
one segment per packet, see :mod:`xtc_lab.lab.traffic`), VR 2 a paced UDP stream of
``--offered-pps`` packets of the same size.  Phase 1 (without XTC): both VRs unlimited.
Phase 2 (with XTC): an ``xtc daemon`` holds the UDP VR at ``--tcpudp-udp-share`` (20%) of
phase 1's aggregate and the TCP VR at the rest (80%), as the paper's 20 and 80 kp/s of ~100.
Each phase is measured for ``--tcpudp-hold`` seconds after the streams (and, in phase 2, the
controllers) have settled.

A VR's throughput is what XTC controls: packets/s forwarded, summed over both its vifs
(host-side RX in ``/proc/net/dev``).  For the TCP VR that is data segments *and* ACKs; its
"offered" rate is the data segments handed to it.  The CPU picture (each VR's CPU time from
libvirt, the host's from ``/proc/stat``) is recorded per phase: it shows where the cycles the
capped UDP VR no longer uses go.

``--kind qemu`` builds the two VRs as QEMU domains (:meth:`NetLab.add_qemu_vr`: the guest kernel
forwards, capped through ``vcpu_quota``): a VR's CPU is then its QEMU process (vCPU and emulator
threads, libvirt ``getCPUStats``), the frames it lost are counted on the host side only (a guest has
no forwarder socket to read), and because a QEMU VR's tap counts as handed over only what QEMU read
from it, each phase also records what the generators sent (``sent_pps``, the host side of their
veths) and what the taps dropped (``tap_tx_drop_pps``).

``--kind netns`` builds them as the lab's forwarder in a namespace and a cgroup each (the daemon's
cgroup backend; a VR's CPU from its cgroup's accounting).  ``--tcpudp-phases`` runs Figure 17 several
ways with the phases alternated (:mod:`xtc_lab.lab.experiments.tcpudp_phases`, issue 48 item 3).

Units: packets/s (pps; kp/s in the report), percent of one CPU, seconds.

Why one file: one experiment (Figure 17) from its run to its report, like the other experiment
modules; the CPU accounting of its phases (``/proc/stat`` and the VRs' and other processes' ticks)
is read by this experiment alone.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xtc_lab.lab.experiments import Goal, Outcome
from xtc_lab.lab.drops import counter_delta, loss_snapshot, vr_drops
from xtc_lab.lab.hog import vr_forwarder_pids
from xtc_lab.lab.harness import QEMU_READY_TIMEOUT_S, controller_model, LabDaemon, Recorder, RunContext, experiment_lab, markdown_table, mean, wait_with_progress, save_figure
from xtc_lab.lab.hostcost import check_cost_us
from xtc_lab.lab.netlab import VR, LabError, NetLab
from xtc_lab.lab.traffic import (
    PAPER_TCP_FRAME_BYTES,
    TcpResult,
    start_streams,
    start_tcp_stream,
    start_udp_stream,
    tcp_mss_for_frame,
    udp_payload_for_frame,
)

TITLE = "a TCP VR and a UDP VR sharing the host, without and with XTC"
PAPER = "Figure 17"
#: VR kinds (``--kind``): LXC VRs (the lab's forwarder) or QEMU VRs (the guest kernel forwards).
KINDS = ("lxc", "netns", "qemu")

#: The paper's numbers (section 7.3, kp/s): aggregate without and with XTC, setpoints, TCP gain, UDP loss.
PAPER_KPPS = {"aggregate_without": 100.0, "aggregate_with": 68.0, "setpoint_udp": 20.0, "setpoint_tcp": 80.0,
              "tcp_gain": 16.0, "udp_loss": 49.0}
#: Tolerance for "held at its setpoint" (the paper's controllers have a 10% dead zone).
HOLD_TOLERANCE = 0.10
HOST_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tcpudp")
    g.add_argument("--tcpudp-rcvbuf", type=int, default=0,
                   help="receive buffer of both forwarders' packet sockets, bytes (default 0: the kernel's default, "
                        "about 250 frames)")
    g.add_argument("--tcpudp-hold", type=float, default=20.0,
                   help="seconds measured per phase (default 20; quick: a third, at least 4)")
    g.add_argument("--tcpudp-udp-share", type=float, default=0.2,
                   help="UDP VR's setpoint as a share of the aggregate without XTC "
                        "(default 0.2; the TCP VR gets the rest)")
    g.add_argument("--tcpudp-phases", default=None, metavar="P1,P2,...",
                   help="Figure 17 several ways, alternated (issue 48 item 3): a comma list of without, xtc, "
                        "xtc+early-drop (the daemon's default limiter on the vifs: the eBPF bucket), "
                        "xtc+early-drop-noloss (the same, the VR's own losses not counted: the default), "
                        "xtc+early-drop-loss (the same, the VR's own losses up to 1.25x), "
                        "xtc+early-drop-margin8 (the same, margin 0.08), xtc+early-drop-tbf (its TBF), "
                        "xtc+input-drop, xtc+input-bpf (lab only: the same excess "
                        "dropped at the host's input port, before the bridge); the first must be 'without' "
                        "(the setpoints come from it). Default: the classic two phases")
    g.add_argument("--tcpudp-alternate", type=int, default=1, metavar="N",
                   help="with --tcpudp-phases: run the phases in turn N times (default 1)")
    g.add_argument("--tcpudp-input-factor", type=float, default=None,
                   help="with xtc+input-drop: the input-side TBF's rate as a multiple of the UDP setpoint "
                        "(default (1 + margin) * (1 + step) of the daemon's limiter, 1.32: the level its limit "
                        "holds for a VR forwarding its setpoint)")
    g.add_argument("--host-delivery-cost-us", type=float, default=None, metavar="X",
                   help="with --tcpudp-phases and --kind netns, lab only: emulate Xen netback's copy, X "
                        "microseconds of host softirq work for every packet delivered into a VR (a spin in a "
                        "cls_bpf program on the clsact ingress of the VR's own veth ends, after the product's "
                        "early-drop limiter: a packet it drops does not pay; xtc_lab.lab.hostcost). Default: none")
    g.add_argument("--tcpudp-frame", type=int, default=PAPER_TCP_FRAME_BYTES,
                   help=f"size of both flows' packets on the wire, bytes "
                        f"(default {PAPER_TCP_FRAME_BYTES}, the paper's)")


# ------------------------------------------------------------------------------ CPU picture
@dataclass(frozen=True)
class CpuSnapshot:
    """CPU time used so far: per VR (ns, from libvirt), by the host (``/proc/stat`` ticks), by the
    processes outside the lab (per pid, ticks; see :func:`other_process_ticks`) and by the XTC
    daemon (ticks; None without one)."""

    t_s: float  # monotonic clock, s
    vr_cpu_ns: Mapping[str, int]
    host_ticks: Mapping[str, int]
    other_ticks: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (ticks, start tick)
    uptime_s: float | None = None  # /proc/uptime when taken (process start ticks count from boot)
    daemon_ticks: int | None = None


def parse_proc_stat_cpu(text: str) -> dict[str, int]:
    """The aggregate ``cpu`` line of ``/proc/stat`` as {field: ticks} (fields of :data:`HOST_CPU_FIELDS`)."""
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == "cpu":
            if len(f) < 1 + len(HOST_CPU_FIELDS):
                raise ValueError(f"/proc/stat cpu line has {len(f) - 1} fields, want {len(HOST_CPU_FIELDS)}")
            return {name: int(v) for name, v in zip(HOST_CPU_FIELDS, f[1:])}
    raise ValueError("/proc/stat has no aggregate 'cpu' line")


PF_KTHREAD = 0x00200000  # a kernel thread (its time is the kernel's work: softirq, ...)


def parse_pid_stat_ticks(text: str) -> int:
    """User + system ticks of a process from its ``/proc/<pid>/stat`` line (all its threads)."""
    f = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    return int(f[11]) + int(f[12])


def parse_pid_stat_start_ticks(text: str) -> int:
    """When a process started, clock ticks after boot, from its ``/proc/<pid>/stat`` line."""
    return int(text.rsplit(")", 1)[1].split()[19])


def pid_stat_is_kernel_thread(text: str) -> bool:
    """True if the ``/proc/<pid>/stat`` line is a kernel thread's (flags has PF_KTHREAD)."""
    return bool(int(text.rsplit(")", 1)[1].split()[6]) & PF_KTHREAD)


def cpu_use(a: CpuSnapshot, b: CpuSnapshot, n_cpus: int, ticks_per_s: float = 100.0) -> dict[str, Any]:
    """CPU use between two snapshots, in percent of one CPU (a host of ``n_cpus`` has ``100 * n_cpus``).

    Returns ``{"vr_percent": {vr: %}, "host_percent": {field: %}, "others_percent": %,
    "daemon_percent": % or None}``; a VR missing from either snapshot is left out;
    ``others_percent`` counts the processes outside the lab (load the lab does not control):
    those in both snapshots, and those that started between them (all their time) if ``a`` has
    its ``uptime_s``; a process that started and ended between them is missed.
    """
    dt = b.t_s - a.t_s
    if dt <= 0:
        raise ValueError(f"snapshots out of order (dt {dt:g} s)")
    vr = {k: 100.0 * (b.vr_cpu_ns[k] - a.vr_cpu_ns[k]) / 1e9 / dt for k in a.vr_cpu_ns if k in b.vr_cpu_ns}
    d = {k: b.host_ticks[k] - a.host_ticks[k] for k in HOST_CPU_FIELDS}
    total = sum(d.values())
    host = {k: (100.0 * n_cpus * v / total if total > 0 else math.nan) for k, v in d.items()}
    other = sum(max(0, b.other_ticks[p][0] - t) for p, (t, _) in a.other_ticks.items() if p in b.other_ticks)
    if a.uptime_s is not None:  # processes that started between the snapshots: all their time
        other += sum(t for p, (t, start) in b.other_ticks.items()
                     if p not in a.other_ticks and start / ticks_per_s >= a.uptime_s)
    daemon = (None if a.daemon_ticks is None or b.daemon_ticks is None
              else 100.0 * max(0, b.daemon_ticks - a.daemon_ticks) / ticks_per_s / dt)
    return {"vr_percent": vr, "host_percent": host, "others_percent": 100.0 * other / ticks_per_s / dt,
            "daemon_percent": daemon}


def other_process_ticks(lab_prefix: str, exclude: Sequence[int] = (), proc: Path = Path("/proc"),
                        netns_dir: Path = Path("/run/netns")) -> dict[int, tuple[int, int]]:
    """(CPU ticks, start tick) of every user process not part of the lab ``lab_prefix`` (load from outside it).

    Left out: this process, ``exclude`` (the daemon), kernel threads (their time is the
    kernel's packet work, in the host's softirq and system time), processes in the lab's
    network namespaces (its traffic tools) and in its VRs' cgroups (the forwarders).
    """
    lab_ns = set()
    try:
        for e in netns_dir.iterdir():
            if e.name.startswith(lab_prefix + "-"):
                try:
                    lab_ns.add(os.stat(e).st_ino)
                except OSError:
                    continue
    except OSError:
        pass
    skip = {os.getpid(), *exclude}
    out = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            stat = (entry / "stat").read_text()
            if pid_stat_is_kernel_thread(stat) or os.stat(entry / "ns" / "net").st_ino in lab_ns:
                continue
            if f"-{lab_prefix}-" in (entry / "cgroup").read_text():  # .../lxc-<pid>-<prefix>-vr1.libvirt-lxc
                continue
            out[int(entry.name)] = (parse_pid_stat_ticks(stat), parse_pid_stat_start_ticks(stat))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return out


def parse_cgroup_cpu_ns(text: str, version: int) -> int:
    """Cumulative CPU time, ns, from a cgroup's accounting file: v1 ``cpuacct.usage`` (ns) or v2
    ``cpu.stat`` (its ``usage_usec`` line, times 1000)."""
    if version == 1:
        return int(text.split()[0])
    for line in text.splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "usage_usec":
            return int(f[1]) * 1000
    raise ValueError("cpu.stat has no usage_usec line")


def netns_vr_cpu_ns(cgroup_dir: str) -> int:
    """A netns VR's CPU time so far, ns, from its cgroup (the file the daemon's cgroup backend reads)."""
    from xtc.host.cgroup import cpu_time_file

    path, version = cpu_time_file(cgroup_dir, lambda: Path("/proc/self/mountinfo").read_text())
    return parse_cgroup_cpu_ns(Path(path).read_text(), version)


def cpu_snapshot(lab: NetLab, vrs: Sequence[VR], daemon_pid: int | None = None,
                 proc: Path = Path("/proc")) -> CpuSnapshot:
    """Read every VR's CPU time (libvirt ``getCPUStats``), the host's, other processes' and the daemon's ticks now."""
    import libvirt

    t = time.monotonic()
    vr_ns = {}
    for vr in vrs:
        try:
            if vr.kind == "netns":  # a netns VR: its cgroup's accounting (cpuacct.usage or cpu.stat)
                if vr.cgroup is not None:
                    vr_ns[vr.name] = netns_vr_cpu_ns(vr.cgroup)
                continue
            vr_ns[vr.name] = int(lab.domain(vr).getCPUStats(True)[0]["cpu_time"])
        except (libvirt.libvirtError, LabError, KeyError, IndexError, OSError, LookupError, ValueError):
            continue  # the VR is left out of this phase's CPU picture
    daemon = None
    if daemon_pid is not None:
        try:
            daemon = parse_pid_stat_ticks((proc / str(daemon_pid) / "stat").read_text())
        except (OSError, ValueError, IndexError):
            daemon = None
    try:
        uptime: float | None = float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        uptime = None
    return CpuSnapshot(t_s=t, vr_cpu_ns=vr_ns, host_ticks=parse_proc_stat_cpu((proc / "stat").read_text()),
                       other_ticks=other_process_ticks(lab.prefix, [] if daemon_pid is None else [daemon_pid], proc),
                       daemon_ticks=daemon, uptime_s=uptime)


# ------------------------------------------------------------------------------ pure analysis
def window_mean(t_s: Sequence[float], values: Sequence[float | None], t0_s: float, t1_s: float) -> float:
    """Mean of the samples that end within [t0_s, t1_s] (None values skipped; NaN if none)."""
    return mean([v for t, v in zip(t_s, values) if t0_s <= t <= t1_s and v is not None])


def goodput_in_window(tcp: TcpResult, t_start_s: float, t0_s: float, t1_s: float) -> float:
    """Mean goodput, bits/s, of the iperf3 1 s intervals inside [t0_s, t1_s] (recorder time).

    ``t_start_s`` is when the client started on the recorder's clock (iperf3's intervals count
    from its own start, a fraction of a second later: the alignment is to within ~1 s).
    """
    return mean([b for t, b in tcp.interval_bits_per_s if t0_s <= t_start_s + t <= t1_s + 0.5])


def path_rates(c0: Mapping[str, int], c1: Mapping[str, int], dt_s: float) -> dict[str, float]:
    """One VR's packets/s in each direction between two readings of ``VR.counters()`` ``dt_s`` apart.

    ``into_vr_pps``: handed to the VR from the generator's side; ``out_to_receiver_pps``: what
    it sent on towards the receiver; ``out_to_generator_pps``: what it sent back (TCP's ACKs);
    ``dropped_in_vr_fraction``: the share of the packets handed to it that it did not pass on
    (its socket overflowed or its send failed; for TCP these are the losses its congestion
    control reacts to).  Packets in flight at the edges make it slightly inexact.
    """
    if dt_s <= 0:
        raise ValueError(f"dt_s must be positive, got {dt_s!r}")
    into = (c1["offered_from_tg"] - c0["offered_from_tg"]) / dt_s
    to_tr = (c1["forwarded_to_tr"] - c0["forwarded_to_tr"]) / dt_s
    back = ((c1["forwarded"] - c1["forwarded_to_tr"]) - (c0["forwarded"] - c0["forwarded_to_tr"])) / dt_s
    return {"into_vr_pps": into, "out_to_receiver_pps": to_tr, "out_to_generator_pps": back,
            "dropped_in_vr_fraction": 1.0 - to_tr / into if into > 0 else math.nan}


def qemu_host_side(host_delta: Mapping[str, Mapping[str, int]], dt_s: float, generator_iface: str,
                   vifs: Sequence[str]) -> dict[str, float]:
    """What the host did with a QEMU VR's frames over ``dt_s`` s, from :func:`loss_snapshot`'s ``"host"`` deltas.

    ``sent_pps``: what the generator sent (host-side RX of its veth ``generator_iface``); ``tap_tx_pps``:
    what QEMU read from the VR's taps (``vifs``, both directions); ``tap_tx_drop_pps``: what the taps
    dropped because QEMU did not read it in time (the guest was capped or busy).  A missing interface
    gives NaN.
    """
    if dt_s <= 0:
        raise ValueError(f"dt_s must be positive, got {dt_s!r}")

    def rate(iface: str, key: str) -> float:
        c = host_delta.get(iface)
        return c[key] / dt_s if c is not None else math.nan

    return {"sent_pps": rate(generator_iface, "rx_packets"),
            "tap_tx_pps": sum(rate(v, "tx_packets") for v in vifs),
            "tap_tx_drop_pps": sum(rate(v, "tx_drops") for v in vifs)}


def min_max_ratio(rates_pps: Sequence[float]) -> float:
    """The paper's fairness: lowest over highest throughput (1 = equal; NaN without a positive rate)."""
    rs = [r for r in rates_pps if not math.isnan(r)]
    if not rs or max(rs) <= 0:
        return math.nan
    return min(rs) / max(rs)


def setpoints_from_aggregate(aggregate_pps: float, udp_share: float) -> dict[str, float]:
    """The phase-2 setpoints: ``udp_share`` of the phase-1 aggregate to the UDP VR, the rest to the TCP VR."""
    if not 0 < udp_share < 1:
        raise ValueError(f"udp_share {udp_share!r} must be between 0 and 1")
    if not aggregate_pps > 0:
        raise ValueError(f"aggregate_pps {aggregate_pps!r} must be positive")
    return {"udp": round(udp_share * aggregate_pps, -2), "tcp": round((1 - udp_share) * aggregate_pps, -2)}


def compare_phases(without: Mapping[str, Any], with_xtc: Mapping[str, Any],
                   setpoints_pps: Mapping[str, float]) -> dict[str, Any]:
    """What XTC changed: per-VR and aggregate differences, and the UDP packets wasted on the capped VR.

    ``without`` and ``with_xtc`` hold ``{"tcp": {...}, "udp": {...}}`` phase summaries with
    ``forwarded_pps`` and ``offered_pps``.  ``udp_dropped_by_vr_pps`` is what the host still
    handed the UDP VR beyond what it forwarded: the Dom0 work the paper calls wasted.  For a QEMU
    VR (``host_sent_pps`` in its summary: what its generator sent) that is what the host moved to
    its tap, whether or not QEMU read it (its ``offered_pps`` counts only what QEMU read).
    """
    tw, uw = without["tcp"]["forwarded_pps"], without["udp"]["forwarded_pps"]
    tx, ux = with_xtc["tcp"]["forwarded_pps"], with_xtc["udp"]["forwarded_pps"]
    agg_wo, agg_w = tw + uw, tx + ux
    gain, loss = tx - tw, uw - ux
    return {
        "aggregate_without_pps": agg_wo, "aggregate_with_pps": agg_w,
        "aggregate_change_pps": agg_w - agg_wo,
        "tcp_gain_pps": gain, "udp_loss_pps": loss,
        "gain_over_loss": gain / loss if loss > 0 else math.nan,
        "udp_offered_with_pps": with_xtc["udp"].get("host_sent_pps", with_xtc["udp"]["offered_pps"]),
        "udp_dropped_by_vr_pps": with_xtc["udp"].get("host_sent_pps", with_xtc["udp"]["offered_pps"]) - ux,
        "udp_setpoint_error": (ux - setpoints_pps["udp"]) / setpoints_pps["udp"],
        "tcp_setpoint_error": (tx - setpoints_pps["tcp"]) / setpoints_pps["tcp"],
        "min_max_without": min_max_ratio([tw, uw]), "min_max_with": min_max_ratio([tx, ux]),
    }


def summarise_vr(series: Mapping[str, Sequence[Any]], t0_s: float, t1_s: float) -> dict[str, float]:
    """Mean forwarded and offered pps and cap over [t0_s, t1_s] of one VR's recorded series (JSON form).

    ``forwarded_cv`` is the scatter of the forwarded samples (standard deviation over mean;
    NaN with fewer than two samples): TCP's sawtooth makes it large.
    """
    t = series["t_s"]
    fwd = [v for tt, v in zip(t, series["forwarded_pps"]) if t0_s <= tt <= t1_s and v is not None]
    m = mean(fwd)
    cv = (math.sqrt(sum((v - m) ** 2 for v in fwd) / (len(fwd) - 1)) / m) if len(fwd) > 1 and m > 0 else math.nan
    return {"forwarded_pps": m, "offered_pps": window_mean(t, series["offered_pps"], t0_s, t1_s),
            "cap_percent": window_mean(t, series["cap_percent"], t0_s, t1_s), "forwarded_cv": cv}


# ------------------------------------------------------------------------------ the run
@dataclass
class PhaseTimes:
    """Where a phase's parts fall on the recorder's clock (s)."""

    start_s: float
    measure_from_s: float
    measure_to_s: float

    def window_s(self, dt_s: float) -> tuple[float, float]:
        """The measured window (s, recorder's clock): from the first sample of period ``dt_s`` (s)
        wholly after ``measure_from_s``, to ``measure_to_s``."""
        return self.measure_from_s + dt_s, self.measure_to_s


def summarise_phase(rec: Recorder, times: PhaseTimes, cpu: Mapping[str, Any], vrs: Mapping[str, VR]) -> dict[str, Any]:
    """A phase's summary: ``measure_s``, one :func:`summarise_vr` per key of ``vrs`` (with the VR's
    ``cpu_percent`` and per-direction ``path`` rates), and the host's, others' and daemon's CPU.

    Parameters
    ----------
    rec : Recorder
        The phase's recording.
    times : PhaseTimes
        The phase's times (s); the VRs are summarised over :meth:`PhaseTimes.window_s`.
    cpu : Mapping
        The host picture of :func:`run_phase` (percent of one CPU, and ``"paths"``).
    vrs : Mapping
        The summary's key for each VR.
    """
    t0, t1 = times.window_s(rec.dt_s)
    out: dict[str, Any] = {"measure_s": [round(times.measure_from_s, 2), round(times.measure_to_s, 2)]}
    for key, vr in vrs.items():
        out[key] = summarise_vr(rec.series[vr.name].to_json(), t0, t1)
        out[key]["cpu_percent"] = cpu["vr_percent"].get(vr.name, math.nan)
        out[key]["path"] = cpu["paths"].get(vr.name)
        out[key]["drops"] = cpu.get("drops", {}).get(vr.name)
    out["host_cpu_percent"] = cpu["host_percent"]
    out["others_cpu_percent"] = cpu["others_percent"]
    out["daemon_cpu_percent"] = cpu["daemon_percent"]
    out["load_avg_1m"] = cpu.get("load_avg_1m")
    return out


def run_phase(ctx: RunContext, lab: NetLab, rec: Recorder, label: str, streams: Callable[[float], list[Any]],
              warm_s: float, settle_s: float, hold_s: float, on_warm: Callable[[], None] | None = None,
              daemon_pid: int | None = None,
              snapshot: Callable[[], Any] | None = None) -> tuple[PhaseTimes, list[Any], dict[str, Any]]:
    """Run one phase: start the streams, warm up, call ``on_warm`` (e.g. activate XTC), settle, measure.

    ``streams(duration_s)`` starts the phase's streams and returns them (each with ``wait``
    and ``stop``).  ``daemon_pid``: the XTC daemon, whose CPU is reported on its own.  Returns
    the phase's times, the streams' results and its host picture over the measured window: the
    CPU use of :func:`cpu_use` plus ``"paths"``, each VR's per-direction rates (:func:`path_rates`).
    ``snapshot()``, if given, is read at both ends of the measured window, next to the CPU
    snapshots: the two readings are the picture's ``"extra"`` (the caller's own counters).
    """
    duration_s = math.ceil(warm_s + settle_s + hold_s + 2)
    t_start = rec.mark(f"{label}: streams start")
    running = streams(duration_s)
    try:
        wait_with_progress(warm_s, f"{label}: warming up", ctx.say)
        if on_warm is not None:
            on_warm()
            rec.mark(f"{label}: XTC on")
        if settle_s > 0:
            wait_with_progress(settle_s, f"{label}: settling", ctx.say)
        c0, k0 = cpu_snapshot(lab, lab.vrs, daemon_pid), {vr.name: vr.counters() for vr in lab.vrs}
        e0 = snapshot() if snapshot is not None else None
        qemu_vrs = [vr for vr in lab.vrs if vr.kind == "qemu"]
        # A QEMU VR has no forwarder process whose namespace could be read: its losses are the host side's.
        pids = {vr.name: vr_forwarder_pids(lab, vr)[0] for vr in lab.vrs if vr.kind != "qemu"}
        host_ifaces = [f"{lab.prefix}-g{vr.k}" for vr in qemu_vrs] + [v for vr in qemu_vrs for v in vr.vifs]
        load_1m = os.getloadavg()[0]
        s0 = loss_snapshot([vr for vr in lab.vrs if vr.kind != "qemu"], pids, host_ifaces)
        t0 = rec.mark(f"{label}: measure")
        wait_with_progress(hold_s, f"{label}: measuring", ctx.say)
        t1 = rec.mark(f"{label}: end")
        c1, k1 = cpu_snapshot(lab, lab.vrs, daemon_pid), {vr.name: vr.counters() for vr in lab.vrs}
        e1 = snapshot() if snapshot is not None else None
        delta = counter_delta(s0, loss_snapshot([vr for vr in lab.vrs if vr.kind != "qemu"], pids, host_ifaces))
        drops = vr_drops(delta, {vr.name: vr.vifs for vr in lab.vrs if vr.kind != "qemu"})
        drops.update({vr.name: qemu_host_side(delta["host"], delta["t_s"], f"{lab.prefix}-g{vr.k}", vr.vifs)
                      for vr in qemu_vrs})
        results = [s.wait() for s in running]
    finally:
        for s in running:
            s.stop()
    picture = cpu_use(c0, c1, os.cpu_count() or 1, os.sysconf("SC_CLK_TCK"))
    picture["paths"] = {name: path_rates(k0[name], k1[name], c1.t_s - c0.t_s) for name in k0 if name in k1}
    picture["drops"] = drops
    picture["load_avg_1m"] = round(load_1m, 2)
    picture["extra"] = (e0, e1)
    return PhaseTimes(t_start, t0, t1), results, picture


def run(ctx: RunContext, args: argparse.Namespace) -> Outcome:
    hold_s = ctx.phase(args.tcpudp_hold)
    if hold_s < 4:
        raise ValueError(f"--tcpudp-hold {args.tcpudp_hold:g}: want at least 4 s")
    share = args.tcpudp_udp_share
    if not 0.02 <= share <= 0.98:
        raise ValueError(f"--tcpudp-udp-share {share:g}: want 0.02..0.98")
    frame = args.tcpudp_frame
    mss, payload = tcp_mss_for_frame(frame), udp_payload_for_frame(frame)
    warm_s, settle_s = (2.0, 6.0) if ctx.quick else (3.0, 12.0)
    model = controller_model(getattr(args, "model", None))
    result: dict[str, Any] = {
        "title": TITLE, "paper": PAPER, "paper_kpps": PAPER_KPPS, "udp_offered_pps": ctx.offered_pps,
        "frame_bytes": frame, "tcp_mss_bytes": mss, "tcp_payload_bytes": mss - 12, "udp_payload_bytes": payload,
        "hold_s": hold_s, "warm_s": warm_s, "settle_s": settle_s, "udp_share": share, "model": model,
        "n_cpus": os.cpu_count() or 1,
        "throughput": "packets/s forwarded, summed over both vifs of a VR (TCP: data segments and ACKs)",
    }
    ctx.say(f"two VRs: TCP (1 flow, MSS {mss}, {frame}-byte segments) and UDP ({ctx.offered_pps:.0f} pps of "
            f"{frame}-byte packets); {hold_s:g} s measured per phase")
    rcvbuf = int(getattr(args, "tcpudp_rcvbuf", 0) or 0)
    if rcvbuf and not 4096 <= rcvbuf <= 1 << 30:
        raise ValueError(f"--tcpudp-rcvbuf {rcvbuf}: want 0 (the kernel's default) or 4096..{1 << 30} bytes")
    result["rcvbuf_bytes_asked"] = rcvbuf or None
    kind = ctx.kind
    if kind not in KINDS:
        raise ValueError(f"tcpudp: --kind {kind} VRs are not supported (want one of {', '.join(KINDS)})")
    if kind == "qemu" and rcvbuf:
        raise ValueError("--tcpudp-rcvbuf sets the lab forwarder's socket buffer: it does not apply to --kind qemu "
                         "(the guest kernel forwards)")
    if getattr(args, "host_delivery_cost_us", None) is not None:
        result["host_delivery_cost_us"] = check_cost_us(args.host_delivery_cost_us)
        if not getattr(args, "tcpudp_phases", None) or kind != "netns":
            raise ValueError("--host-delivery-cost-us is built for the alternated run (--tcpudp-phases) on "
                             "--kind netns VRs (their own veth ends are in a namespace the lab names)")
    if getattr(args, "tcpudp_phases", None):  # Figure 17 several ways, alternated (issue 48 item 3)
        from xtc_lab.lab.experiments import tcpudp_phases

        return tcpudp_phases.run(ctx, args, result, model)
    with experiment_lab(result, 0, mode=kind, say=ctx.say) as (lab, workdir, caps):
        tcp_vr, udp_vr = add_two_vrs(ctx, lab, kind, rcvbuf)
        result["vrs"] = {"tcp": tcp_vr.name, "udp": udp_vr.name}

        def streams(duration_s: float) -> list[Any]:
            return start_streams(
                lambda: start_tcp_stream(lab, tcp_vr, duration_s, flows=1, frame_bytes=frame),
                lambda: start_udp_stream(lab, udp_vr, ctx.offered_pps, duration_s, payload_bytes=payload))

        phases: dict[str, Any] = {}
        with Recorder([tcp_vr, udp_vr], dt_s=1.0, caps=caps) as rec:
            ctx.say("-- phase 1: without XTC (both VRs unlimited)")
            times, (tcp_res, udp_res), cpu = run_phase(ctx, lab, rec, "without XTC", streams, warm_s, 0.0, hold_s)
            phases["without"] = phase_summary(rec, times, tcp_res, udp_res, cpu, tcp_vr, udp_vr)
            _say_phase(ctx, "without XTC", phases["without"])
            agg = phases["without"]["tcp"]["forwarded_pps"] + phases["without"]["udp"]["forwarded_pps"]
            if not agg > 0:
                raise LabError("the VRs forwarded nothing without XTC; the lab's traffic did not flow")
            sp = setpoints_from_aggregate(agg, share)
            result["setpoints_pps"] = sp
            ctx.say(f"-- phase 2: with XTC (UDP VR {sp['udp']:.0f} pps, TCP VR {sp['tcp']:.0f} pps)")
            with LabDaemon(workdir / "xtcd", lab.uri, daemon_domains([tcp_vr, udp_vr]), kind="xtc", model=model,
                           cfs_period_us=ctx.cfs_period_us) as d:
                def activate() -> None:
                    d.activate(udp_vr.name, sp["udp"])
                    d.activate(tcp_vr.name, sp["tcp"])

                dpid = None if d.proc is None else d.proc.pid
                times, (tcp_res, udp_res), cpu = run_phase(ctx, lab, rec, "with XTC", streams, warm_s, settle_s,
                                                           hold_s, on_warm=activate, daemon_pid=dpid)
            phases["with"] = phase_summary(rec, times, tcp_res, udp_res, cpu, tcp_vr, udp_vr)
            _say_phase(ctx, "with XTC", phases["with"])
        caps.close()
        result["recording"] = rec.to_json()
    result["phases"] = phases
    result["comparison"] = compare_phases(phases["without"], phases["with"], result["setpoints_pps"])
    return _outcome(result)


def add_two_vrs(ctx: RunContext, lab: NetLab, kind: str, rcvbuf: int = 0) -> tuple[VR, VR]:
    """The experiment's TCP VR and UDP VR, of ``kind`` ("lxc", "netns" in its own cgroup, or "qemu")."""
    if kind == "qemu":
        return (lab.add_qemu_vr(ready_timeout_s=QEMU_READY_TIMEOUT_S),
                lab.add_qemu_vr(ready_timeout_s=QEMU_READY_TIMEOUT_S))
    if kind == "netns":
        return (lab.add_netns_vr(work_iters=ctx.work_iters, cgroup=True, work_factor=ctx.work_factor,
                                 rcvbuf_bytes=rcvbuf or None),
                lab.add_netns_vr(work_iters=ctx.work_iters, cgroup=True, work_factor=ctx.work_factor,
                                 rcvbuf_bytes=rcvbuf or None))
    return (lab.add_vr(work_iters=ctx.work_iters, rcvbuf_bytes=rcvbuf or None),
            lab.add_vr(work_iters=ctx.work_iters, rcvbuf_bytes=rcvbuf or None))


def daemon_domains(vrs: Sequence[VR]) -> list[str | VR]:
    """What :class:`LabDaemon` is given for ``vrs``: a netns VR itself (the cgroup backend), a libvirt VR by name."""
    return [vr if vr.kind == "netns" else vr.name for vr in vrs]


def phase_summary(rec: Recorder, times: PhaseTimes, tcp_res: TcpResult, udp_res: Any, cpu: Mapping[str, Any],
                   tcp_vr: VR, udp_vr: VR) -> dict[str, Any]:
    out = summarise_phase(rec, times, cpu, {"tcp": tcp_vr, "udp": udp_vr})
    out["tcp"]["goodput_bits_per_s"] = goodput_in_window(tcp_res, times.start_s, *times.window_s(rec.dt_s))
    out["tcp"]["iperf3"] = {"seconds": tcp_res.seconds, "received_bits_per_s": tcp_res.received_bits_per_s,
                            "retransmits": tcp_res.retransmits, "mss_bytes": tcp_res.mss_bytes}
    out["udp"]["sender"] = {"sent_pps": udp_res.sent_pps, "seconds": udp_res.seconds}
    out["aggregate_pps"] = out["tcp"]["forwarded_pps"] + out["udp"]["forwarded_pps"]
    for key in ("tcp", "udp"):
        d = out[key].get("drops") or {}
        if "sent_pps" in d:  # a QEMU VR: what its generator sent, all of which the host moved to its tap
            out[key]["host_sent_pps"] = d["sent_pps"]
    return out


def _say_phase(ctx: RunContext, label: str, ph: Mapping[str, Any]) -> None:
    ctx.say(f"   {label}: TCP VR {ph['tcp']['forwarded_pps']:.0f} pps (CPU {ph['tcp']['cpu_percent']:.0f}%), "
            f"UDP VR {ph['udp']['forwarded_pps']:.0f} of {ph['udp']['offered_pps']:.0f} pps offered "
            f"(CPU {ph['udp']['cpu_percent']:.0f}%), aggregate {ph['aggregate_pps']:.0f} pps")


# ------------------------------------------------------------------------------ report
def outside_load_note(a: Mapping[str, Any], b: Mapping[str, Any], label_a: str, label_b: str) -> str:
    """A sentence naming load from outside the lab that differed between two phases ("" if none).

    Two signs: the processes outside the lab (``others_cpu_percent``) and the host's
    user time; the lab's own tools and forwarders spend their time in the kernel (a quiet phase
    shows a few percent of user time), so a jump in user time is work the lab did not do, e.g.
    processes that started and ended within the window, which the per-process count misses.
    """
    def get(ph: Mapping[str, Any], *keys: str) -> float:
        v: Any = ph
        for k in keys:
            v = v.get(k) if isinstance(v, Mapping) else None
        return math.nan if v is None else float(v)

    oa, ob = get(a, "others_cpu_percent"), get(b, "others_cpu_percent")
    ua, ub = get(a, "host_cpu_percent", "user"), get(b, "host_cpu_percent", "user")
    diffs = [abs(ob - oa) > 10 if not (math.isnan(oa) or math.isnan(ob)) else False,
             abs(ub - ua) > 15 if not (math.isnan(ua) or math.isnan(ub)) else False]
    if not any(diffs):
        return ""
    busier = label_b if (ub - ua if diffs[1] else ob - oa) > 0 else label_a
    return (f"Load from outside the lab differed between the phases: host user time {_pct(ua)}% in {label_a} and "
            f"{_pct(ub)}% in {label_b} (processes outside the lab: {_pct(oa)}% and {_pct(ob)}%; the lab's "
            f"own tools run mostly in the kernel), so the host had less to give the VRs in {busier}.")


_VR_WORDS = {"lxc": "LXC VRs", "qemu": "QEMU VRs (each a libvirt QEMU domain whose guest kernel forwards)"}


def _accel_text(result: Mapping[str, Any]) -> str:
    return f" (QEMU accel {result['accel']})" if result.get("vr_kind") == "qemu" and result.get("accel") else ""


def _pct(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.0f}"


def _socket_text(vr: Mapping[str, Any]) -> str:
    """What the VR's forwarder sockets dropped (receive queue full), as a clause ("" if not measured)."""
    d = vr.get("drops")
    if not d:
        return ""
    if "socket_drop_pps" not in d:  # a QEMU VR: the host side only
        return (f"; its generator sent {d['sent_pps']:.0f} pps, QEMU read {d['tap_tx_pps']:.0f} pps from its taps and "
                f"the taps dropped {d['tap_tx_drop_pps']:.0f} pps that QEMU did not read in time")
    return (f"; its forwarder's receive sockets dropped {d['socket_drop_pps']:.0f} pps, "
            f"{100 * d['socket_drop_share']:.1f}% of what it received, {d['socket_drop_eth0_pps']:.0f} pps of them data; "
            f"throttled in {100 * d['throttled_share']:.0f}% of its CFS periods")


def lost_in_vr_text(vr: Mapping[str, Any]) -> str:
    """The share of packets a VR did not pass on, as a percentage string ("-" if not measured)."""
    path = vr.get("path")
    if not path or path.get("dropped_in_vr_fraction") is None or math.isnan(path["dropped_in_vr_fraction"]):
        return "-"
    return f"{100 * path['dropped_in_vr_fraction']:.1f}%"


def _k(pps: float) -> str:
    return "-" if pps is None or (isinstance(pps, float) and math.isnan(pps)) else f"{pps / 1000:.1f}"


def _outcome(result: dict[str, Any]) -> Outcome:
    cmp_, sp, paper = result["comparison"], result["setpoints_pps"], PAPER_KPPS
    wo, w = result["phases"]["without"], result["phases"]["with"]
    rows = [
        ("TCP VR forwarded (kp/s)", "-", _k(wo["tcp"]["forwarded_pps"]), "-", _k(w["tcp"]["forwarded_pps"]),
         f"{paper['setpoint_tcp']:g}", _k(sp["tcp"])),
        ("UDP VR forwarded (kp/s)", "-", _k(wo["udp"]["forwarded_pps"]), "-", _k(w["udp"]["forwarded_pps"]),
         f"{paper['setpoint_udp']:g}", _k(sp["udp"])),
        ("aggregate (kp/s)", f"~{paper['aggregate_without']:g}", _k(cmp_["aggregate_without_pps"]),
         f"{paper['aggregate_with']:g}", _k(cmp_["aggregate_with_pps"]), "100", _k(sp["udp"] + sp["tcp"])),
    ]
    detail = []
    for label, p in (("without XTC", wo), ("with XTC", w)):
        hc = p["host_cpu_percent"]
        detail.append((label, _k(p["tcp"]["offered_pps"]), _k(p["tcp"]["forwarded_pps"]),
                       _pct(p["tcp"]["goodput_bits_per_s"] / 1e6),
                       p["tcp"]["iperf3"]["retransmits"],
                       lost_in_vr_text(p["tcp"]), _k(p["udp"]["offered_pps"]), _k(p["udp"]["forwarded_pps"]),
                       lost_in_vr_text(p["udp"]),
                       _pct(p["tcp"]["cap_percent"]), _pct(p["udp"]["cap_percent"]),
                       f"{p['tcp']['cpu_percent']:.0f}", f"{p['udp']['cpu_percent']:.0f}",
                       f"{hc['softirq']:.0f}", f"{hc['system']:.0f}", f"{hc['user']:.0f}", f"{hc['idle']:.0f}",
                       _pct(p["others_cpu_percent"]), _pct(p["daemon_cpu_percent"])))
    gain_k, loss_k = cmp_["tcp_gain_pps"] / 1000, cmp_["udp_loss_pps"] / 1000
    explain = _explanation(result)
    md = f"""# TCP and UDP VRs sharing the host ({PAPER})

Two {_VR_WORDS.get(result.get('vr_kind', 'lxc'), 'LXC VRs')} on one {result['n_cpus']}-core host{_accel_text(result)}: VR 1 forwards one iperf3 TCP flow, VR 2 a paced UDP stream of
{result['udp_offered_pps']:.0f} pps; both flows use {result['frame_bytes']}-byte packets on the wire (TCP: MSS
{result['tcp_mss_bytes']}, {result['tcp_payload_bytes']} bytes of payload per segment with the timestamp option, one
segment per packet; UDP: {result['udp_payload_bytes']}-byte payloads).  Phase 1 without XTC; phase 2 with the
daemon holding the UDP VR at {100 * result['udp_share']:.0f}% of phase 1's aggregate and the TCP VR at the rest
(the paper: 20 and 80 kp/s of ~100).  Each phase measured for {result['hold_s']:.0f} s (1 s samples), phase 2
after {result['settle_s']:.0f} s of settling.  Throughput = {result['throughput']}.

{markdown_table(['', 'paper without XTC', 'lab without XTC', 'paper with XTC', 'lab with XTC',
                 'paper setpoint', 'lab setpoint'], rows)}

XTC's effect: TCP VR **{gain_k:+.1f} kp/s** (paper +{paper['tcp_gain']:g}), UDP VR **{-loss_k:+.1f} kp/s**
(paper -{paper['udp_loss']:g}), aggregate {_k(cmp_['aggregate_without_pps'])} ->
{_k(cmp_['aggregate_with_pps'])} kp/s (paper ~100 -> 68).  Min-max ratio of the two VRs:
{cmp_['min_max_without']:.2f} without, {cmp_['min_max_with']:.2f} with.  Under XTC the host still handed the UDP
VR {_k(cmp_['udp_offered_with_pps'])} kp/s, of which the VR dropped {_k(cmp_['udp_dropped_by_vr_pps'])} kp/s.

Per phase (TCP "offered" = data segments handed to the VR; "lost in VR" = share of the packets handed to a VR
that it did not pass on; caps and CPU in percent of one CPU; host CPU from
/proc/stat, {100 * result['n_cpus']}% = all cores; "other processes" = CPU of processes outside the lab, load this
experiment does not control on a shared host):

{markdown_table(['phase', 'TCP offered kp/s', 'TCP fwd kp/s', 'TCP goodput Mbit/s', 'TCP retransmits (whole stream)',
                 'TCP data lost in VR', 'UDP offered kp/s', 'UDP fwd kp/s', 'UDP lost in VR', 'TCP cap', 'UDP cap',
                 'TCP VR CPU', 'UDP VR CPU',
                 'host softirq', 'host system', 'host user', 'host idle', 'other processes', 'XTC daemon'], detail)}

## What it shows

{explain}
"""
    goals = [
        Goal("without XTC the UDP VR forwards more than the TCP VR (UDP has no congestion control; paper Fig. 17)",
             f"UDP {_k(wo['udp']['forwarded_pps'])} vs TCP {_k(wo['tcp']['forwarded_pps'])} kp/s",
             wo["udp"]["forwarded_pps"] > wo["tcp"]["forwarded_pps"]),
        Goal(f"with XTC the UDP VR is held at its setpoint ({_k(sp['udp'])} kp/s) within {100 * HOLD_TOLERANCE:.0f}%",
             f"{_k(w['udp']['forwarded_pps'])} kp/s ({100 * cmp_['udp_setpoint_error']:+.1f}%)",
             abs(cmp_["udp_setpoint_error"]) <= HOLD_TOLERANCE),
        Goal("with XTC the TCP VR forwards more than without (paper: +16 kp/s)", f"{gain_k:+.1f} kp/s", gain_k > 0),
        Goal("the paper's waste: the TCP gain is smaller than the UDP loss (paper: +16 vs -49 kp/s)",
             f"+{gain_k:.1f} vs -{loss_k:.1f} kp/s" if gain_k >= 0 else f"{gain_k:+.1f} vs -{loss_k:.1f} kp/s",
             cmp_["tcp_gain_pps"] < cmp_["udp_loss_pps"]),
    ]

    def plot(path: Path) -> None:
        plot_tcpudp(result, path)

    return Outcome(result=result, report_md=md, plot=plot, goals=goals)


def _explanation(result: Mapping[str, Any]) -> str:
    ph, cmp_, sp = result["phases"], result["comparison"], result["setpoints_pps"]
    qemu = result.get("vr_kind") == "qemu"
    its_cpu = "its QEMU process (vCPU and emulator threads)" if qemu else "its forwarder"
    where_dropped = "at its tap (QEMU did not read them in time)" if qemu else "at its socket"
    why_lost = ("the guest drops them when its vCPU does not keep up" if qemu else
                "its forwarder's receive socket overflows, or a send fails, when it is not scheduled in time on the busy cores")
    wo, w = ph["without"], ph["with"]
    lines = []
    if wo["udp"]["forwarded_pps"] > wo["tcp"]["forwarded_pps"]:
        lines.append(f"Without XTC the UDP VR takes the larger share ({_k(wo['udp']['forwarded_pps'])} vs "
                     f"{_k(wo['tcp']['forwarded_pps'])} kp/s), as in the paper: its sender does not back off when "
                     "packets are lost, while TCP's congestion control cuts its window at every loss "
                     f"({lost_in_vr_text(wo['tcp'])} of its data segments were lost inside the VR{_socket_text(wo['tcp'])}).")
    else:
        lines.append(f"Without XTC the TCP VR forwards as much as or more than the UDP VR "
                     f"({_k(wo['tcp']['forwarded_pps'])} vs {_k(wo['udp']['forwarded_pps'])} kp/s); unlike the "
                     "paper's Xen host, this host's kernel did not let the UDP flow crowd TCP out.")
    reached = w["tcp"]["forwarded_pps"] >= (1 - HOLD_TOLERANCE) * sp["tcp"]
    tcp_cap = w["tcp"]["cap_percent"]
    tcp_capped = not math.isnan(tcp_cap) and tcp_cap < 95
    lines.append(f"With XTC the UDP VR's cap falls to {w['udp']['cap_percent']:.0f}% of a CPU "
                 f"({its_cpu} used {wo['udp']['cpu_percent']:.0f}% before, {w['udp']['cpu_percent']:.0f}% now) "
                 f"and it forwards {_k(w['udp']['forwarded_pps'])} kp/s against a setpoint of {_k(sp['udp'])}. "
                 f"The TCP VR {'reaches' if reached else 'does not reach'} its setpoint of {_k(sp['tcp'])} kp/s "
                 f"({_k(w['tcp']['forwarded_pps'])} kp/s, {its_cpu} at {w['tcp']['cpu_percent']:.0f}% of a CPU)"
                 + (f"; its cap is {tcp_cap:.0f}%." if tcp_capped else
                    f"; its cap stays at {_pct(tcp_cap)}%, so XTC does not limit it: the TCP flow is held back by "
                    "its own congestion control (it retransmitted "
                    f"{w['tcp']['iperf3']['retransmits']} segments during that stream; "
                    f"{lost_in_vr_text(w['tcp'])} of its data "
                    f"segments were lost inside the VR: {why_lost}) and by the host's per-packet work."))
    note = outside_load_note(wo, w, "phase 1 (without XTC)", "phase 2 (with XTC)")
    if note:
        lines.append(note)
    lines.append(f"The TCP gain ({cmp_['tcp_gain_pps'] / 1000:+.1f} kp/s) is "
                 f"{'smaller' if cmp_['tcp_gain_pps'] < cmp_['udp_loss_pps'] else 'not smaller'} than the UDP loss "
                 f"({cmp_['udp_loss_pps'] / 1000:.1f} kp/s): the UDP source does not slow down, so the host (the lab's "
                 f"Dom0) still moves {_k(cmp_['udp_offered_with_pps'])} kp/s of UDP to the capped VR, which drops "
                 f"{_k(cmp_['udp_dropped_by_vr_pps'])} kp/s of it {where_dropped}.  That delivery is kernel softirq "
                 f"work charged to no VR (host softirq {wo['host_cpu_percent']['softirq']:.0f}% without XTC, "
                 f"{w['host_cpu_percent']['softirq']:.0f}% with), so the capacity the cap takes from the UDP VR "
                 "is only "
                 "partly freed for the TCP VR: the waste the paper describes in section 7.3.")
    if wo["tcp"].get("drops") and "socket_drop_pps" not in wo["tcp"]["drops"]:
        lines.append("Where the QEMU VRs' frames went (host side; on a QEMU VR \"offered\" is what QEMU read from the "
                     "tap, and a frame it did not read in time is the tap's drop: host work spent on a frame no VR "
                     "forwards): "
                     + "; ".join(f"{label}, {name} VR{_socket_text(ph[k][name])} (load {ph[k].get('load_avg_1m')})"
                                 for k, label in (("without", "without XTC"), ("with", "with XTC"))
                                 for name in ("tcp", "udp")) + ".")
    elif wo["tcp"].get("drops"):
        rb = result.get("rcvbuf_bytes_asked")
        lines.append("Where the VRs lost frames (forwarder receive sockets, `ss -0 -m` skmem `d`, buffer "
                     f"{'the kernel default' if not rb else f'{rb} bytes'}): "
                     + "; ".join(f"{label}, {name} VR{_socket_text(ph[k][name])} (load {ph[k].get('load_avg_1m')})"
                                 for k, label in (("without", "without XTC"), ("with", "with XTC"))
                                 for name in ("tcp", "udp")) + ".")
    return "\n\n".join(lines)


def plot_tcpudp(result: Mapping[str, Any], path: Path) -> None:
    """Time series of both VRs (with phases, setpoints and caps) and the bars of Figure 17."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, axb) = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [2.2, 1]})
    rec, vrs = result["recording"], result["vrs"]
    colors = {"tcp": "tab:blue", "udp": "tab:red"}
    ax2 = ax.twinx()
    for key, name in vrs.items():
        s = rec["series"][name]
        ax.plot(s["t_s"], [r / 1000 for r in s["forwarded_pps"]], color=colors[key],
                label=f"{key.upper()} VR forwarded")
        if key == "udp":
            ax.plot(s["t_s"], [r / 1000 for r in s["offered_pps"]], color=colors[key], ls=":", alpha=0.7,
                    label="UDP offered")
        ax2.plot(s["t_s"], [math.nan if c is None else c for c in s["cap_percent"]], color=colors[key], alpha=0.35,
                 lw=3, label=f"{key.upper()} cap")
    marks = {m["label"]: m["t_s"] for m in rec["marks"]}
    for label in ("without XTC", "with XTC"):
        a, b = marks.get(f"{label}: measure"), marks.get(f"{label}: end")
        if a is not None and b is not None:
            ax.axvspan(a, b, color="grey", alpha=0.12)
            ax.text((a + b) / 2, 0.98, label, transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=8)
    t_on, t_end = marks.get("with XTC: XTC on"), marks.get("with XTC: end")
    if t_on is not None and t_end is not None:
        for key in ("tcp", "udp"):
            ax.hlines(result["setpoints_pps"][key] / 1000, t_on, t_end, colors=colors[key], linestyles="--", lw=1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("kp/s (both vifs)")
    ax2.set_ylabel("cap (% of one CPU)")
    ax.set_ylim(bottom=0)
    ax2.set_ylim(0, 105)
    ax.legend(loc="center left", fontsize=7)
    ax.set_title("forwarded packets/s per VR; grey: measured windows; dashed: setpoints; thick pale: caps (right)",
                 fontsize=9)

    ph, sp = result["phases"], result["setpoints_pps"]
    groups = ["without XTC", "with XTC", "setpoint"]
    tcp_vals = [ph[k]["tcp"]["forwarded_pps"] / 1000 for k in ("without", "with")] + [sp["tcp"] / 1000]
    udp_vals = [ph[k]["udp"]["forwarded_pps"] / 1000 for k in ("without", "with")] + [sp["udp"] / 1000]
    x = range(len(groups))
    axb.bar([i - 0.2 for i in x], tcp_vals, 0.4, color=colors["tcp"], label="TCP VR")
    axb.bar([i + 0.2 for i in x], udp_vals, 0.4, color=colors["udp"], label="UDP VR")
    for i in x:
        if i < 2:
            axb.text(i, max(tcp_vals[i], udp_vals[i]) * 1.02, f"sum {tcp_vals[i] + udp_vals[i]:.0f}", ha="center",
                     fontsize=8)
    axb.set_xticks(list(x), groups)
    axb.set_ylabel("kp/s")
    axb.set_title("Figure 17 on the lab (paper: aggregate ~100 -> 68 kp/s)", fontsize=9)
    axb.legend(fontsize=8)
    save_figure(fig, path)
