"""Figure 17 several ways, phases alternated: ``xtc lab run tcpudp --tcpudp-phases ... --tcpudp-alternate N``.

Issue 48 item 3: the paper's TCP + UDP VRs (Figure 17) rerun without XTC, with XTC, and with XTC
plus early drop, alternated in one run so that the host's drift falls on every phase alike; and
a fourth, lab-only phase that drops the same excess on the host's *input* side instead
(:mod:`xtc_lab.lab.inputdrop`: the generator-side port's ingress, u32 by the address routed
through the UDP VR + mirred to an IFB carrying a TBF, before the bridge), to learn where the
host's work on the capped VR's excess goes.

Phases (``--tcpudp-phases``, the first must be ``without``: the setpoints come from its first
run, as in the classic run):

* ``without``: both VRs unlimited, no daemon;
* ``xtc``: a fresh ``xtc daemon`` holds the UDP VR at ``--tcpudp-udp-share`` of the first
  ``without`` aggregate and the TCP VR at the rest;
* ``xtc+early-drop``: the same with early drop asked for *both* VRs (the product's default limiter,
  the queue-less eBPF packet-rate bucket on the clsact egress of their host-side vifs,
  ``daemon.early_drop_limiter = "bpf"``; the TCP VR's source backs off, so it must get none);
* ``xtc+early-drop-noloss``: the same eBPF bucket with ``daemon.early_drop_loss_bound_fraction = 0``
  (the rule before the VR's own losses at its socket raised its limit: the paired comparison;
  since that rule is off by default, the same as ``xtc+early-drop``);
* ``xtc+early-drop-loss``: the same eBPF bucket with ``daemon.early_drop_loss_bound_fraction = 0.25``
  (the VR's own losses raise its limit up to 1.25x the setpoint: the opt-in rule);
* ``xtc+early-drop-margin8``: the same eBPF bucket with ``daemon.early_drop_margin_fraction = 0.08``
  (the default 0.05: the margin measured against handed/setpoint and the UDP VR's tracking);
* ``xtc+early-drop-tbf``: the same with the product's other limiter, the TBF ``ed0:`` root qdisc on
  the vifs (``daemon.early_drop_limiter = "tbf"``);
* ``xtc+input-drop``: ``xtc`` plus the lab's input-side TBF at ``--tcpudp-input-factor`` times
  the UDP setpoint (default: the level the daemon's TBF limit holds for a VR forwarding its
  setpoint, (1 + margin)(1 + step) = 1.32);
* ``xtc+input-bpf``: the same rate, dropped on the same port by a packet-rate bucket in eBPF
  (:mod:`xtc_lab.lab.bpfbucket`: cls_bpf direct-action keyed by the destination MAC of the
  frames through the VR; no IFB hop for what passes, the product's credit, and by default the
  level of the product's eBPF limit, 1.07x the setpoint): the product's bucket, placed before the
  bridge instead of on the vif (what the place costs).

Per window (one phase, one repetition): what the UDP generator sent (host RX of its port, before
any limiter), what the host handed each VR (host TX of its vifs), what each VR forwarded, what
each VR dropped itself (handed, not passed on; and its forwarder socket's drops), what the vif
limiter and the input limiter dropped, the VRs' caps and CPU, the lab's traffic tools' CPU, the
host's softirq, system, user and idle CPU, the load average, and whether each VR carried an
early-drop limiter (the eBPF filter or the TBF ``ed0:``) at the end.  Per phase: means, standard deviations and, against ``without``
(and ``xtc``), the *paired* differences of the repetitions with a 95 % t interval.

Units: kp/s in the flat records (``*_kpps``), percent of one CPU (a 2-core host has 200 %).

Why its own file: the multi-phase run, next to the classic two-phase run of
:mod:`xtc_lab.lab.experiments.tcpudp` whose phase machinery it reuses; its statistics and its
report (pure) are :mod:`xtc_lab.lab.experiments.tcpudp_phases_report`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from xtc_lab.lab import bpfbucket, hostcost, inputdrop
from xtc_lab.lab.experiments import Outcome
from xtc_lab.lab.experiments.tcpudp import (
    add_two_vrs,
    daemon_domains,
    parse_pid_stat_ticks,
    phase_summary,
    run_phase,
    setpoints_from_aggregate,
)
from xtc_lab.lab.experiments.tcpudp_phases_report import (
    EARLY_DROP_PHASES,
    INPUT_PHASES,
    PHASES,
    TITLE,
    outcome,
)
from xtc_lab.lab.harness import (
    LabDaemon,
    Recorder,
    RunContext,
    experiment_lab,
)
from xtc_lab.lab.netlab import VR, LabError, NetLab, pids_in_netns, read_packet_counters
from xtc_lab.lab.traffic import start_streams, start_tcp_stream, start_udp_stream

ED_HANDLE = "ed0:"  # the product's early-drop TBF (xtc.host.tclimiter.ROOT_HANDLE, major 0xed0)


# ------------------------------------------------------------------------------ pure: the plan
def parse_phases(text: str) -> tuple[str, ...]:
    """``--tcpudp-phases``: a comma list of :data:`PHASES`, no repeats, ``without`` first."""
    names = tuple(p.strip() for p in str(text).split(",") if p.strip())
    bad = [p for p in names if p not in PHASES]
    if bad:
        raise ValueError(f"--tcpudp-phases: unknown phase {bad[0]!r} (want some of {', '.join(PHASES)})")
    if not names:
        raise ValueError("--tcpudp-phases: no phase named")
    if len(set(names)) != len(names):
        raise ValueError(f"--tcpudp-phases {text!r}: a phase is named twice (use --tcpudp-alternate to repeat)")
    if names[0] != "without":
        raise ValueError(f"--tcpudp-phases {text!r}: the first phase must be 'without' (the setpoints come from it)")
    return names


def phase_order(phases: Sequence[str], alternate: int) -> list[tuple[int, str]]:
    """The windows in the order they run: (repetition, phase), the phases in turn ``alternate`` times."""
    if isinstance(alternate, bool) or not isinstance(alternate, int) or not 1 <= alternate <= 100:
        raise ValueError(f"--tcpudp-alternate {alternate!r}: want 1..100")
    return [(rep, p) for rep in range(alternate) for p in phases]


def default_input_factor(limiter: str = "tbf") -> float:
    """The input-side limit over the UDP setpoint: (1 + margin)(1 + step) of the daemon's ``limiter``
    (the level its limit holds for a VR that forwards its setpoint): 1.32 for the TBF (the IFB +
    TBF phase), 1.07 for the eBPF bucket (the input-side bucket's phase)."""
    from xtc.daemon.limiter_policy import tuning_for

    t = tuning_for(limiter)
    return (1 + t.margin_fraction) * (1 + t.step_fraction)


def input_bpf_for(prefix: str, vr: VR, setpoint_pps: float, factor: float, mac: str) -> bpfbucket.BpfBucket:
    """The eBPF bucket of ``vr`` on its generator's port, for frames to ``mac`` (what the generator sends
    through it), at ``factor`` times ``setpoint_pps``, with the product's eBPF credit (0.3 s)."""
    from xtc.daemon.limiter_policy import BPF_TUNING

    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and 0.5 <= factor <= 10):
        raise ValueError(f"--tcpudp-input-factor {factor!r}: want 0.5..10")
    return bpfbucket.BpfBucket(port=f"{prefix}-g{vr.k}", mac=mac, rate_pps=factor * setpoint_pps,
                               burst_s=BPF_TUNING.burst_s)


def input_drop_for(prefix: str, vr: VR, setpoint_pps: float, factor: float, frame_bytes: int) -> inputdrop.InputDrop:
    """The input-side limiter of ``vr``: on its generator's port, for the packets addressed through
    it, at ``factor`` times ``setpoint_pps`` in ``frame_bytes`` frames; the TBF of the product's shape."""
    from xtc.daemon.limiter_policy import DEFAULT_TUNING, limit_bytes

    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and 0.5 <= factor <= 10):
        raise ValueError(f"--tcpudp-input-factor {factor!r}: want 0.5..10")
    lim = limit_bytes(factor * setpoint_pps, frame_bytes, DEFAULT_TUNING)
    return inputdrop.InputDrop(port=f"{prefix}-g{vr.k}", ifb=f"{prefix}-i{vr.k}", dst_addr=vr.tr_addr,
                               rate_bytes_per_s=int(lim.rate_bytes_per_s), burst_bytes=int(lim.burst_bytes),
                               limit_bytes=int(lim.burst_bytes))


# ------------------------------------------------------------------------------ pure: one window
def window_record(phase: str, rep: int, summary: Mapping[str, Any], e0: Mapping[str, Any], e1: Mapping[str, Any],
                  setpoints_pps: Mapping[str, float]) -> dict[str, Any]:
    """One window's flat record (kp/s, percent of one CPU) from the phase summary of
    :func:`xtc_lab.lab.experiments.tcpudp.phase_summary` and the two :func:`snapshot` readings.

    ``e0``/``e1`` hold ``t_s``, ``sent`` (packets the generator port received, per VR key),
    ``vif_limiter_drops`` (per VR key), ``input_drops``, ``tools_ticks`` (per VR key), ``ticks_per_s``,
    (``e1``) ``limited`` (per VR key) and, with the emulated delivery cost, ``cost`` (per VR key: the
    packets that paid it and the ns they spent, :func:`cost_counts`).
    """
    dt = e1["t_s"] - e0["t_s"]
    if dt <= 0:
        raise ValueError(f"window {phase} #{rep + 1}: snapshots out of order (dt {dt:g} s)")
    tps = float(e1.get("ticks_per_s", 100.0))

    def k(pps: float | None) -> float:
        return math.nan if pps is None else pps / 1e3

    def per_s(key: str, who: str | None = None) -> float:
        a, b = (e0[key], e1[key]) if who is None else (e0[key].get(who), e1[key].get(who))
        return math.nan if a is None or b is None else (b - a) / dt

    hc = summary["host_cpu_percent"]
    xtc_on = phase != "without"
    out: dict[str, Any] = {"phase": phase, "rep": rep, "xtc_on": xtc_on, "measure_s": summary.get("measure_s"),
                           "load_avg_1m": summary.get("load_avg_1m")}
    for key in ("tcp", "udp"):
        vr = summary[key]
        path = vr.get("path") or {}
        drops = vr.get("drops") or {}
        into, to_tr = path.get("into_vr_pps"), path.get("out_to_receiver_pps")
        out[f"{key}_handed_kpps"] = k(vr["offered_pps"])
        out[f"{key}_forwarded_kpps"] = k(vr["forwarded_pps"])
        out[f"{key}_setpoint_kpps"] = k(setpoints_pps.get(key))
        out[f"{key}_dropped_in_vr_kpps"] = k(into - to_tr) if into is not None and to_tr is not None else math.nan
        out[f"{key}_socket_drop_kpps"] = k(drops.get("socket_drop_pps"))
        # where the VR's own drops come from: its cap (CFS throttling), its forwarder waiting for a CPU
        # (runnable, not running), or its socket's buffer (the receive buffer it had)
        out[f"{key}_throttled_share"] = drops.get("throttled_share", math.nan)
        out[f"{key}_throttled_ms_per_s"] = 1e3 * drops.get("throttled_s_per_s", math.nan)
        rd = drops.get("run_delay_share")
        out[f"{key}_run_delay_ms_per_s"] = math.nan if rd is None else 1e3 * rd
        rb = drops.get("rcvbuf_bytes")
        out[f"{key}_rcvbuf_bytes"] = math.nan if rb is None else rb
        # a counter that went back (the daemon took the limiter off and put it on again: a new one
        # counts from 0) gives what the new one counted (inputdrop.drops_between: a lower bound)
        d0, d1 = e0["vif_limiter_drops"].get(key), e1["vif_limiter_drops"].get(key)
        out[f"{key}_dropped_by_vif_limiter_kpps"] = (
            math.nan if d0 is None or d1 is None else inputdrop.drops_between(d0, d1) / dt / 1e3)
        out[f"{key}_cap_percent"] = vr.get("cap_percent", math.nan)
        out[f"{key}_vr_cpu_percent"] = vr.get("cpu_percent", math.nan)
        out[f"{key}_tools_cpu_percent"] = 100.0 * per_s("tools_ticks", key) / tps
        out[f"{key}_limited"] = bool(e1.get("limited", {}).get(key, False))
        # the eBPF limit on the VR's vifs at the window's start and end (NaN: none, or the TBF's)
        out[f"{key}_vif_limit_kpps"] = statistics.fmean(
            [e.get("vif_limit_pps", {}).get(key, math.nan) for e in (e0, e1)]) / 1e3
        # the emulated delivery cost (--host-delivery-cost-us): packets into the VR that paid it
        c0, c1 = e0.get("cost", {}).get(key), e1.get("cost", {}).get(key)
        out[f"{key}_cost_paid_kpps"] = math.nan if c0 is None or c1 is None else (c1[0] - c0[0]) / dt / 1e3
        out[f"{key}_cost_cpu_percent"] = math.nan if c0 is None or c1 is None else 100.0 * (c1[1] - c0[1]) / 1e9 / dt
    out["host_delivery_cost_cpu_percent"] = out["tcp_cost_cpu_percent"] + out["udp_cost_cpu_percent"]
    out["udp_sent_kpps"] = per_s("sent", "udp") / 1e3
    # the sender's own count over its whole stream (host RX of the port misses what an ingress redirect drops)
    out["udp_sender_kpps"] = k((summary["udp"].get("sender") or {}).get("sent_pps"))
    out["udp_dropped_at_input_kpps"] = per_s("input_drops") / 1e3
    out["tcp_goodput_mbps"] = summary["tcp"].get("goodput_bits_per_s", math.nan) / 1e6
    out["tcp_retransmits"] = summary["tcp"].get("iperf3", {}).get("retransmits")
    for f in ("softirq", "system", "user", "idle", "irq"):
        out[f"host_{f}_percent"] = hc.get(f, math.nan)
    out["others_cpu_percent"] = summary.get("others_cpu_percent", math.nan)
    d = summary.get("daemon_cpu_percent")
    out["daemon_cpu_percent"] = math.nan if d is None else d
    return out


# ------------------------------------------------------------------------------ the run
def cost_counts(costs: Mapping[str, hostcost.DeliveryCost]) -> dict[str, tuple[int, int]]:
    """Per VR key: (packets that paid the emulated delivery cost, ns spent on them) so far, over its interfaces."""
    out = {}
    for key, c in costs.items():
        slots = c.counts().values()
        out[key] = (sum(x.packets for x in slots), sum(x.spent_ns for x in slots))
    return out


def snapshot(lab: NetLab, vrs: Mapping[str, VR], limiter: Any, ticks_per_s: float,
             costs: Mapping[str, hostcost.DeliveryCost] | None = None) -> dict[str, Any]:
    """The counters a window needs besides the CPU picture (see :func:`window_record`)."""
    c = read_packet_counters()
    out: dict[str, Any] = {"t_s": time.monotonic(), "ticks_per_s": ticks_per_s, "sent": {}, "vif_limiter_drops": {},
                           "limited": {}, "tools_ticks": {}, "vif_limit_pps": {}}
    for key, vr in vrs.items():
        port = c.get(f"{lab.prefix}-g{vr.k}")
        out["sent"][key] = None if port is None else port[0]  # host RX of the generator's port: what it sent
        rows = [inputdrop.qdisc_rows(v) or [] for v in vr.vifs]
        bpf = [_bpf_limiter(v) for v in vr.vifs]  # the eBPF bucket's, read through its program's maps
        out["vif_limiter_drops"][key] = (sum(inputdrop.drops_of(r, "tbf", ED_HANDLE) for r in rows)
                                         + sum(int(b["dropped_packets"]) for b in bpf if b is not None))
        out["limited"][key] = (any(inputdrop.has_of(r, "tbf", ED_HANDLE) for r in rows)
                               or any(b is not None for b in bpf))
        out["vif_limit_pps"][key] = max((b.get("rate_pps", math.nan) for b in bpf if b is not None), default=math.nan)
        ticks = 0
        for ns in (vr.tg_ns, vr.tr_ns):
            for pid in pids_in_netns(ns):
                try:
                    ticks += parse_pid_stat_ticks(Path(f"/proc/{pid}/stat").read_text())
                except (OSError, ValueError, IndexError):
                    continue
        out["tools_ticks"][key] = ticks
    out["input_drops"] = limiter.dropped_packets() if limiter is not None else 0  # the input side's limiter
    if costs:
        out["cost"] = cost_counts(costs)
    return out


def _bpf_limiter(vif: str) -> dict[str, float] | None:
    """The product's eBPF limiter on ``vif`` (its limit and drop counter), None: none (or unreadable)."""
    from xtc.host.bpflimiter import read_attached
    from xtc.host.limiter import LimiterError

    try:
        return read_attached(vif)
    except LimiterError:
        return None


def run(ctx: RunContext, args: argparse.Namespace, result: dict[str, Any], model: str) -> Outcome:
    """The alternated run (``result`` holds the classic run's header already)."""
    import os

    phases = parse_phases(args.tcpudp_phases)
    order = phase_order(phases, int(getattr(args, "tcpudp_alternate", 1)))
    given = getattr(args, "tcpudp_input_factor", None)
    factor = given if given is not None else default_input_factor("tbf")
    factor_bpf = given if given is not None else default_input_factor("bpf")
    kind = ctx.kind
    if kind == "qemu" and set(INPUT_PHASES) & set(phases):
        raise ValueError("the input-side phases are built for LXC and netns VRs only (a QEMU VR's frames are "
                         "addressed to the guest's own MAC)")
    hold_s, warm_s, settle_s = result["hold_s"], result["warm_s"], result["settle_s"]
    frame, payload = result["frame_bytes"], result["udp_payload_bytes"]
    tps = float(os.sysconf("SC_CLK_TCK"))
    result.update(title=TITLE, phase_names=list(phases), alternate=len(order) // len(phases), order=[
        f"{p} #{r + 1}" for r, p in order], input_factor=factor if set(INPUT_PHASES) & set(phases) else None)
    windows: list[dict[str, Any]] = []
    with experiment_lab(result, 0, mode=kind, say=ctx.say) as (lab, workdir, caps):
        tcp_vr, udp_vr = add_two_vrs(ctx, lab, kind, result.get("rcvbuf_bytes_asked") or 0)
        vrs = {"tcp": tcp_vr, "udp": udp_vr}
        result["vrs"] = {"tcp": tcp_vr.name, "udp": udp_vr.name}
        costs = delivery_costs(vrs, result.get("host_delivery_cost_us"))  # the emulated Dom0 cost, every phase
        if costs:
            result["host_delivery_cost"] = {"cost_us": result["host_delivery_cost_us"], "where": {
                k: {"netns": c.netns, "interfaces": list(c.ifnames)} for k, c in costs.items()},
                "how": "cls_bpf direct-action on the clsact ingress of the VR's own veth ends (lab/xtc_lab/lab/hostcost.py)"}
        setpoints: dict[str, float] | None = None
        limiters: dict[str, Any] = {}  # input-side phase -> its limiter (made once, installed per window)

        def streams(duration_s: float) -> list[Any]:
            return start_streams(
                lambda: start_tcp_stream(lab, tcp_vr, duration_s, flows=1, frame_bytes=frame),
                lambda: start_udp_stream(lab, udp_vr, ctx.offered_pps, duration_s, payload_bytes=payload))

        with _in_place(costs, ctx.say), Recorder([tcp_vr, udp_vr], dt_s=1.0, caps=caps) as rec:
            for n, (rep, phase) in enumerate(order):
                label = f"{phase} #{rep + 1}"
                ctx.say(f"-- window {n + 1}/{len(order)}: {label} (load {os.getloadavg()[0]:.2f})")
                if phase == "without":
                    times, (tcp_res, udp_res), cpu = run_phase(ctx, lab, rec, label, streams, warm_s, 0.0, hold_s,
                                                               snapshot=lambda: snapshot(lab, vrs, None, tps, costs))
                else:
                    assert setpoints is not None  # parse_phases: "without" runs first
                    sp = setpoints
                    if phase == "xtc+input-drop" and phase not in limiters:
                        idrop = limiters[phase] = input_drop_for(lab.prefix, udp_vr, sp["udp"], factor, frame)
                        result["input_drop"] = {"port": idrop.port, "ifb": idrop.ifb, "dst": idrop.dst_addr,
                                                "rate_bytes_per_s": idrop.rate_bytes_per_s,
                                                "rate_pps": idrop.rate_bytes_per_s / frame,
                                                "burst_bytes": idrop.burst_bytes, "limit_bytes": idrop.limit_bytes}
                    if phase == "xtc+input-bpf" and phase not in limiters:
                        b = limiters[phase] = input_bpf_for(lab.prefix, udp_vr, sp["udp"], factor_bpf,
                                                            bpfbucket.ns_mac(udp_vr.tr_ns))
                        result["input_bpf"] = {"port": b.port, "mac": b.mac, "rate_pps": b.rate_pps,
                                               "burst_s": b.burst_s}
                    times, (tcp_res, udp_res), cpu = _xtc_window(
                        ctx, lab, rec, label, streams, (warm_s, settle_s, hold_s), vrs, sp, phase,
                        limiters.get(phase), workdir / f"xtcd-{n}", model, tps, costs)
                summary = phase_summary(rec, times, tcp_res, udp_res, cpu, tcp_vr, udp_vr)
                if setpoints is None:
                    agg = summary["tcp"]["forwarded_pps"] + summary["udp"]["forwarded_pps"]
                    if not agg > 0:
                        raise LabError("the VRs forwarded nothing without XTC; the lab's traffic did not flow")
                    setpoints = setpoints_from_aggregate(agg, result["udp_share"])
                    result["setpoints_pps"] = setpoints
                    ctx.say(f"   setpoints: UDP VR {setpoints['udp']:.0f} pps, TCP VR {setpoints['tcp']:.0f} pps")
                e0, e1 = cpu["extra"]
                w = window_record(phase, rep, summary, e0, e1, setpoints)
                windows.append(w)
                ctx.say(f"   {label}: UDP sent {w['udp_sent_kpps']:.1f} handed {w['udp_handed_kpps']:.1f} fwd "
                        f"{w['udp_forwarded_kpps']:.2f} kp/s, TCP fwd {w['tcp_forwarded_kpps']:.1f} kp/s, softirq "
                        f"{w['host_softirq_percent']:.0f}% system {w['host_system_percent']:.0f}% idle "
                        f"{w['host_idle_percent']:.0f}%, limiter tcp/udp {w['tcp_limited']}/{w['udp_limited']}"
                        + ("" if not costs else f", emulated delivery cost {w['host_delivery_cost_cpu_percent']:.0f}% "
                           f"(paid by {w['udp_cost_paid_kpps']:.1f} / {w['tcp_cost_paid_kpps']:.1f} kp/s UDP / TCP)"))
        caps.close()
        result["recording"] = rec.to_json()
    return outcome(result, windows)


def delivery_costs(vrs: Mapping[str, VR], cost_us: float | None) -> dict[str, hostcost.DeliveryCost]:
    """The emulated delivery cost of each VR (none without ``cost_us``): on its own veth ends ``eth0`` and
    ``eth1`` in its namespace (a netns VR's namespace is its name)."""
    if cost_us is None:
        return {}
    bad = [vr.name for vr in vrs.values() if vr.kind != "netns"]
    if bad:
        raise ValueError(f"--host-delivery-cost-us: VR {bad[0]} is not a netns VR (use --kind netns)")
    return {key: hostcost.DeliveryCost(vr.name, ("eth0", "eth1"), cost_us) for key, vr in vrs.items()}


@contextlib.contextmanager
def _in_place(costs: Mapping[str, hostcost.DeliveryCost], say: Any) -> Iterator[None]:
    """Every delivery cost installed, and removed on the way out (also after an error, a half-done
    install, or SIGTERM's SystemExit)."""
    try:
        for c in costs.values():
            say(f"   emulated delivery cost: {c.cost_us:g} us a packet into {c.netns} ({', '.join(c.ifnames)})")
            c.install()
        yield
    finally:
        for c in costs.values():
            c.remove()


def _xtc_window(ctx: RunContext, lab: NetLab, rec: Recorder, label: str, streams: Any,
                times_s: tuple[float, float, float], vrs: Mapping[str, VR], sp: Mapping[str, float], phase: str,
                idrop: Any, workdir: Path, model: str, tps: float,
                costs: Mapping[str, hostcost.DeliveryCost] | None = None) -> tuple[Any, Any, Any]:
    """One window with a fresh daemon holding both VRs (early drop asked for both in ``xtc+early-drop``),
    and ``idrop`` (an input-side limiter: ``install``, ``remove``, ``dropped_packets``) in place from the
    activation to the end (taken away whatever happens)."""
    warm_s, settle_s, hold_s = times_s
    early = phase in EARLY_DROP_PHASES
    installed: list[Any] = []
    with LabDaemon(workdir, lab.uri, daemon_domains([vrs["tcp"], vrs["udp"]]), kind="xtc", model=model,
                   cfs_period_us=ctx.cfs_period_us,
                   daemon_extra=EARLY_DROP_PHASES.get(phase)) as d:
        def on() -> None:
            d.call("activate", vr=vrs["udp"].name, setpoint_pps=float(sp["udp"]), early_drop=early)
            d.call("activate", vr=vrs["tcp"].name, setpoint_pps=float(sp["tcp"]), early_drop=early)
            if idrop is not None:
                installed.append(idrop)  # first: a half-done install is taken back too
                idrop.install()

        try:
            return run_phase(ctx, lab, rec, label, streams, warm_s, settle_s, hold_s, on_warm=on,
                             daemon_pid=None if d.proc is None else d.proc.pid,
                             snapshot=lambda: snapshot(lab, vrs, idrop, tps, costs))
        finally:
            for x in installed:
                x.remove(missing_ok=True)
