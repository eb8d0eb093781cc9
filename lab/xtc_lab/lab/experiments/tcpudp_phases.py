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

Why its own file: the multi-phase run, its statistics and its report, next to the classic two-phase
run of :mod:`xtc_lab.lab.experiments.tcpudp` whose phase machinery it reuses.
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
from xtc_lab.lab.experiments import Goal, Outcome
from xtc_lab.lab.experiments.tcpudp import (
    PAPER,
    PAPER_KPPS,
    phase_summary,
    add_two_vrs,
    daemon_domains,
    parse_pid_stat_ticks,
    run_phase,
    setpoints_from_aggregate,
)
from xtc_lab.lab.harness import (
    LabDaemon,
    Recorder,
    RunContext,
    experiment_lab,
    markdown_table,
    save_figure,
)
from xtc_lab.lab.netlab import VR, LabError, NetLab, pids_in_netns, read_packet_counters
from xtc_lab.lab.traffic import start_streams, start_tcp_stream, start_udp_stream

PHASES = ("without", "xtc", "xtc+early-drop", "xtc+early-drop-margin8", "xtc+early-drop-tbf", "xtc+input-drop",
          "xtc+input-bpf")
#: The phases with the product's early drop, and the daemon's ``[daemon]`` keys in each.
EARLY_DROP_PHASES: dict[str, dict[str, Any]] = {
    "xtc+early-drop": {"early_drop_limiter": "bpf"},
    "xtc+early-drop-margin8": {"early_drop_limiter": "bpf", "early_drop_margin_fraction": 0.08},
    "xtc+early-drop-tbf": {"early_drop_limiter": "tbf"},
}
#: The lab-only phases that drop the UDP VR's excess at the host's input port (before the bridge).
INPUT_PHASES = ("xtc+input-drop", "xtc+input-bpf")
TITLE = "Figure 17 several ways (without XTC, XTC, XTC + early drop, XTC + input-side drop), alternated"
#: Issue 48's goals for the early-drop phase.
HANDED_TOLERANCE = 0.10  # what the host hands the capped UDP VR, within this of its setpoint
UDP_HOLD_TOLERANCE = 0.03  # the UDP VR's forwarding, within this of its setpoint
PAPER_TCP_GAIN_KPPS = PAPER_KPPS["tcp_gain"]
#: The numbers every phase object of the report carries (issue 48's schema and what answers it).
KEYS = ("udp_sent_kpps", "udp_sender_kpps", "udp_handed_kpps", "udp_setpoint_kpps", "udp_forwarded_kpps", "udp_dropped_in_vr_kpps",
        "udp_socket_drop_kpps", "udp_dropped_by_vif_limiter_kpps", "udp_dropped_at_input_kpps", "udp_vif_limit_kpps",
        "tcp_handed_kpps", "tcp_forwarded_kpps", "tcp_setpoint_kpps", "tcp_dropped_in_vr_kpps",
        "tcp_dropped_by_vif_limiter_kpps", "tcp_goodput_mbps",
        "tcp_cap_percent", "udp_cap_percent", "tcp_vr_cpu_percent", "udp_vr_cpu_percent",
        "tcp_tools_cpu_percent", "udp_tools_cpu_percent",
        "host_softirq_percent", "host_system_percent", "host_user_percent", "host_idle_percent",
        "host_irq_percent", "others_cpu_percent", "daemon_cpu_percent", "load_avg_1m",
        "udp_cost_paid_kpps", "tcp_cost_paid_kpps", "udp_cost_cpu_percent", "tcp_cost_cpu_percent",
        "host_delivery_cost_cpu_percent")
#: Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (beyond: the normal's 1.96).
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
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


# ------------------------------------------------------------------------------ pure: statistics
def _finite(xs: Sequence[Any]) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)]


def t95(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with ``df`` degrees of freedom (NaN for df < 1)."""
    if df < 1:
        return math.nan
    return T95[df - 1] if df <= len(T95) else 1.96


def mean_ci(xs: Sequence[Any]) -> dict[str, float]:
    """Mean, sample standard deviation, count and 95 % t half-width of the finite values of ``xs``."""
    v = _finite(xs)
    n = len(v)
    m = statistics.fmean(v) if v else math.nan
    sd = statistics.stdev(v) if n > 1 else math.nan
    return {"mean": m, "sd": sd, "n": n, "ci95": t95(n - 1) * sd / math.sqrt(n) if n > 1 else math.nan}


def phase_stats(windows: Sequence[Mapping[str, Any]], phases: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per phase: the mean of every :data:`KEYS` number over its windows (issue 48's flat schema), its
    standard deviation as ``<key>_sd``, ``windows`` (how many), and how many windows ended with an
    early-drop limiter on each VR (``tcp_limited_windows``, ``udp_limited_windows``)."""
    out: dict[str, dict[str, Any]] = {}
    for p in phases:
        ws = [w for w in windows if w["phase"] == p]
        if not ws:
            continue
        s: dict[str, Any] = {"windows": len(ws), "xtc_on": p != "without"}
        for key in KEYS:
            st = mean_ci([w.get(key) for w in ws])
            s[key] = st["mean"]
            s[f"{key}_sd"] = st["sd"]
        s["tcp_limited_windows"] = sum(bool(w.get("tcp_limited")) for w in ws)
        s["udp_limited_windows"] = sum(bool(w.get("udp_limited")) for w in ws)
        out[p] = s
    return out


def paired_difference(windows: Sequence[Mapping[str, Any]], key: str, phase: str, base: str) -> dict[str, Any]:
    """``key`` in ``phase`` minus ``key`` in ``base``, repetition by repetition (alternated phases of
    one repetition ran minutes apart, so the host's drift mostly cancels), with its mean and 95 % t
    half-width; ``separated``: the interval excludes 0 (the phases differ beyond the noise)."""
    by = {(w["phase"], w["rep"]): w.get(key) for w in windows}
    reps = sorted({w["rep"] for w in windows})
    diffs = []
    for r in reps:
        a, b = by.get((phase, r)), by.get((base, r))
        if len(_finite([a, b])) == 2:
            diffs.append(float(a) - float(b))  # type: ignore[arg-type]
    st = mean_ci(diffs)
    return {"key": key, "phase": phase, "base": base, "per_rep": diffs, "mean": st["mean"], "ci95": st["ci95"],
            "n": st["n"], "separated": bool(st["n"] > 1 and abs(st["mean"]) > st["ci95"])}


def comparisons(windows: Sequence[Mapping[str, Any]], phases: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per phase other than ``without``: its paired differences against ``without`` (TCP gain, UDP
    loss, host softirq and system) and, for the drop phases, against ``xtc`` (what dropping early adds)."""
    out: dict[str, dict[str, Any]] = {}
    ran = {w["phase"] for w in windows}
    for p in phases:
        if p == "without" or p not in ran:
            continue
        c = {name: paired_difference(windows, key, p, "without") for name, key in (
            ("tcp_gain_over_without_kpps", "tcp_forwarded_kpps"), ("udp_change_over_without_kpps", "udp_forwarded_kpps"),
            ("softirq_change_over_without_percent", "host_softirq_percent"),
            ("system_change_over_without_percent", "host_system_percent"))}
        if p != "xtc" and "xtc" in ran:
            c.update({name: paired_difference(windows, key, p, "xtc") for name, key in (
                ("tcp_change_over_xtc_kpps", "tcp_forwarded_kpps"),
                ("udp_handed_change_over_xtc_kpps", "udp_handed_kpps"),
                ("softirq_change_over_xtc_percent", "host_softirq_percent"),
                ("system_change_over_xtc_percent", "host_system_percent"),
                ("idle_change_over_xtc_percent", "host_idle_percent"),
                ("udp_tools_change_over_xtc_percent", "udp_tools_cpu_percent"),
                ("tcp_vr_cpu_change_over_xtc_percent", "tcp_vr_cpu_percent"),
                ("udp_vr_cpu_change_over_xtc_percent", "udp_vr_cpu_percent"),
                ("delivery_cost_change_over_xtc_percent", "host_delivery_cost_cpu_percent"))})
        out[p] = c
    return out


def goals(stats: Mapping[str, Mapping[str, Any]], comp: Mapping[str, Mapping[str, Any]]) -> list[Goal]:
    """Issue 48's goals for Figure 17 with early drop, measured (only those whose phases ran)."""
    out: list[Goal] = []
    ed, xtc = stats.get("xtc+early-drop"), stats.get("xtc")
    if ed is None:
        return out
    sp = ed["udp_setpoint_kpps"]
    handed_err = ed["udp_handed_kpps"] / sp - 1 if sp else math.nan
    out.append(Goal(f"with early drop the host hands the capped UDP VR within {100 * HANDED_TOLERANCE:.0f}% of its "
                    "setpoint", f"{ed['udp_handed_kpps']:.1f} kp/s for {sp:.1f} ({100 * handed_err:+.0f}%)",
                    abs(handed_err) <= HANDED_TOLERANCE))
    g = comp["xtc+early-drop"]["tcp_gain_over_without_kpps"]
    out.append(Goal(f"with early drop the TCP VR gains at least the paper's +{PAPER_TCP_GAIN_KPPS:g} kp/s over no XTC",
                    f"{g['mean']:+.1f} kp/s (+-{g['ci95']:.1f}, {g['n']} paired repetitions)",
                    g["mean"] >= PAPER_TCP_GAIN_KPPS))
    if xtc is not None:
        s = comp["xtc+early-drop"]["softirq_change_over_xtc_percent"]
        out.append(Goal("host softirq CPU visibly lower with early drop than with XTC alone (the paired difference's "
                        "95% interval below 0)",
                        f"{ed['host_softirq_percent']:.1f}% vs {xtc['host_softirq_percent']:.1f}%: "
                        f"{s['mean']:+.1f} (+-{s['ci95']:.1f}) points",
                        s["n"] > 1 and s["mean"] + s["ci95"] < 0))
    udp_err = ed["udp_forwarded_kpps"] / sp - 1 if sp else math.nan
    out.append(Goal(f"with early drop the UDP VR still within {100 * UDP_HOLD_TOLERANCE:.0f}% of its setpoint",
                    f"{ed['udp_forwarded_kpps']:.2f} kp/s for {sp:.2f} ({100 * udp_err:+.1f}%)",
                    abs(udp_err) <= UDP_HOLD_TOLERANCE))
    no_limit = ed["tcp_limited_windows"] == 0
    harm_txt = f"a limiter on the TCP VR at the end of {ed['tcp_limited_windows']} of {ed['windows']} windows"
    harm_ok = no_limit
    if xtc is not None:
        d = comp["xtc+early-drop"]["tcp_change_over_xtc_kpps"]
        harm_txt += f"; TCP VR with early drop vs XTC alone {d['mean']:+.1f} (+-{d['ci95']:.1f}) kp/s"
        harm_ok = harm_ok and not (d["separated"] and d["mean"] < 0)
    out.append(Goal("no harm: the TCP VR (early drop asked for it too) gets no limiter and forwards no less than "
                    "with XTC alone (beyond the noise)", harm_txt, harm_ok))
    left = [p for p, s in stats.items() if p in ("without", "xtc") and (s["tcp_limited_windows"] or s["udp_limited_windows"])]
    out.append(Goal("nothing left behind: no early-drop limiter at the end of a window without early drop",
                    "none" if not left else f"found in phase(s) {', '.join(left)}", not left))
    return out


def where_work_goes(stats: Mapping[str, Mapping[str, Any]], comp: Mapping[str, Mapping[str, Any]],
                    n_cpus: int) -> list[str]:
    """What the phases say about where the host's work on the capped VR's excess goes (sentences)."""
    lines: list[str] = []
    xtc = stats.get("xtc")
    if xtc is None:
        return lines

    def diff(p: str, key: str) -> str:
        d = comp[p][key]
        return f"{d['mean']:+.1f} (+-{d['ci95']:.1f}{', beyond the noise' if d['separated'] else ', within the noise'})"

    for p, name in (("xtc+early-drop", "early drop (the eBPF bucket on the vif)"),
                    ("xtc+early-drop-margin8", "early drop (the eBPF bucket on the vif, margin 0.08)"),
                    ("xtc+early-drop-tbf", "early drop (the TBF on the vif)"),
                    ("xtc+input-drop", "input-side drop (IFB + TBF, before the bridge)"),
                    ("xtc+input-bpf", "input-side drop (eBPF bucket, before the bridge)")):
        s = stats.get(p)
        if s is None:
            continue
        lines.append(
            f"With {name} the host handed the UDP VR {s['udp_handed_kpps']:.1f} kp/s (XTC alone "
            f"{xtc['udp_handed_kpps']:.1f}); the limiter dropped "
            f"{(s['udp_dropped_by_vif_limiter_kpps'] if p in EARLY_DROP_PHASES else s['udp_dropped_at_input_kpps']):.1f} kp/s and the VR "
            f"itself {s['udp_dropped_in_vr_kpps']:.1f} (XTC alone: the VR {xtc['udp_dropped_in_vr_kpps']:.1f}). Against XTC "
            f"alone, paired: host softirq {diff(p, 'softirq_change_over_xtc_percent')} points, system "
            f"{diff(p, 'system_change_over_xtc_percent')}, idle {diff(p, 'idle_change_over_xtc_percent')}, the UDP "
            f"generator's CPU {diff(p, 'udp_tools_change_over_xtc_percent')}, the TCP VR "
            f"{diff(p, 'tcp_change_over_xtc_kpps')} kp/s.")
    ed = stats.get("xtc+early-drop")
    if ed is not None and math.isfinite(xtc["host_delivery_cost_cpu_percent"]):
        lines.append(
            f"The emulated Dom0 delivery cost took {xtc['host_delivery_cost_cpu_percent']:.1f}% of a CPU under XTC alone "
            f"(paid by {xtc['udp_cost_paid_kpps']:.1f} kp/s into the UDP VR, {xtc['tcp_cost_paid_kpps']:.1f} into the TCP "
            f"VR) and {ed['host_delivery_cost_cpu_percent']:.1f}% with early drop ({ed['udp_cost_paid_kpps']:.1f} / "
            f"{ed['tcp_cost_paid_kpps']:.1f}): early drop freed {diff('xtc+early-drop', 'delivery_cost_change_over_xtc_percent')} "
            f"points of it. Against XTC alone, paired: host idle {diff('xtc+early-drop', 'idle_change_over_xtc_percent')}, "
            f"the TCP VR's CPU {diff('xtc+early-drop', 'tcp_vr_cpu_change_over_xtc_percent')}, the UDP VR's CPU "
            f"{diff('xtc+early-drop', 'udp_vr_cpu_change_over_xtc_percent')}, the UDP generator's CPU "
            f"{diff('xtc+early-drop', 'udp_tools_change_over_xtc_percent')}, the TCP VR "
            f"{diff('xtc+early-drop', 'tcp_change_over_xtc_kpps')} kp/s.")
    # What holds the TCP VR back under XTC: its cap, the cores, or neither.
    cap, cpu = xtc["tcp_cap_percent"], xtc["tcp_vr_cpu_percent"]
    idle = xtc["host_idle_percent"]
    reasons = []
    if math.isfinite(cap) and cap < 95 and math.isfinite(cpu) and cpu >= 0.85 * cap:
        reasons.append(f"its own cap binds (cap {cap:.0f}%, its forwarder used {cpu:.0f}%)")
    if math.isfinite(idle) and idle < 0.1 * 100 * n_cpus:
        reasons.append(f"the {n_cpus} cores are nearly full (host idle {idle:.0f}% of {100 * n_cpus}%)")
    if xtc["tcp_dropped_in_vr_kpps"] > 0.02 * max(xtc["tcp_handed_kpps"], 1e-9):
        reasons.append(f"it loses {xtc['tcp_dropped_in_vr_kpps']:.2f} kp/s of what it is handed, which TCP takes for "
                       "congestion")
    lines.append("Under XTC alone the TCP VR forwarded " f"{xtc['tcp_forwarded_kpps']:.1f} kp/s for a setpoint of "
                 f"{xtc['tcp_setpoint_kpps']:.1f}; " + ("; ".join(reasons) if reasons else
                                                       "neither its cap nor the cores bind and it loses little") + ".")
    return lines


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
        tcp_vr, udp_vr = add_two_vrs(ctx, lab, kind)
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


# ------------------------------------------------------------------------------ report
def outcome(result: dict[str, Any], windows: list[dict[str, Any]]) -> Outcome:
    """The report of an alternated run: ``result["phases"]`` (issue 48's schema), the windows, the
    paired comparisons, the goals, and the markdown."""
    phases = result["phase_names"]
    stats = phase_stats(windows, phases)
    comp = comparisons(windows, phases)
    for p, c in comp.items():  # the TCP gain over "without" in each phase object, as the schema asks
        stats[p]["tcp_gain_over_without_kpps"] = c["tcp_gain_over_without_kpps"]["mean"]
        stats[p]["tcp_gain_over_without_ci95_kpps"] = c["tcp_gain_over_without_kpps"]["ci95"]
    if "without" in stats:
        stats["without"]["tcp_gain_over_without_kpps"] = 0.0
        sp = result.get("setpoints_pps") or {}
        # the setpoint the XTC phases hold, for reference (no daemon runs in this phase: xtc_on false)
        stats["without"]["udp_setpoint_kpps"] = sp.get("udp", math.nan) / 1e3
        stats["without"]["tcp_setpoint_kpps"] = sp.get("tcp", math.nan) / 1e3
    result["phases"] = stats
    result["comparisons"] = comp
    result["windows"] = windows
    gs = goals(stats, comp)
    md = report_md(result, stats, comp)

    def plot(path: Path) -> None:
        plot_phases(result, path)

    return Outcome(result=result, report_md=md, plot=plot, goals=gs)


def _f(v: Any, nd: int = 1) -> str:
    return "-" if not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


def _pm(s: Mapping[str, Any], key: str, nd: int = 1) -> str:
    sd = s.get(f"{key}_sd")
    return _f(s.get(key), nd) + ("" if sd is None or not math.isfinite(sd) else f" +-{_f(sd, nd)}")


def report_md(result: Mapping[str, Any], stats: Mapping[str, Mapping[str, Any]],
              comp: Mapping[str, Mapping[str, Any]]) -> str:
    sp = result.get("setpoints_pps") or {}
    rows = []
    for p, s in stats.items():
        g = comp.get(p, {}).get("tcp_gain_over_without_kpps")
        rows.append((p, s["windows"], _pm(s, "udp_sent_kpps"), _pm(s, "udp_handed_kpps"), _f(s.get("udp_vif_limit_kpps"), 2),
                     _pm(s, "udp_forwarded_kpps", 2),
                     _f(s["udp_dropped_in_vr_kpps"]), _f(s["udp_dropped_by_vif_limiter_kpps"]),
                     _f(s["udp_dropped_at_input_kpps"]), _pm(s, "tcp_forwarded_kpps"),
                     "-" if g is None else f"{g['mean']:+.1f} +-{_f(g['ci95'])}",
                     _f(s["tcp_cap_percent"], 0), _f(s["tcp_vr_cpu_percent"], 0), _f(s["udp_cap_percent"], 0),
                     _f(s["udp_vr_cpu_percent"], 0), _f(s["udp_tools_cpu_percent"], 0), _f(s["tcp_tools_cpu_percent"], 0),
                     _pm(s, "host_softirq_percent"), _pm(s, "host_system_percent"), _f(s["host_user_percent"], 0),
                     _f(s["host_idle_percent"], 0), _f(s["host_delivery_cost_cpu_percent"], 0), _f(s["load_avg_1m"], 2),
                     f"{s['tcp_limited_windows']}/{s['udp_limited_windows']}"))
    table = markdown_table(
        ["phase", "windows", "UDP sent kp/s", "UDP handed kp/s", "UDP vif limit kp/s (eBPF)", "UDP fwd kp/s", "UDP dropped by VR", "by vif limiter",
         "at input", "TCP fwd kp/s", "TCP gain over without (paired, 95%)", "TCP cap %", "TCP VR CPU %", "UDP cap %",
         "UDP VR CPU %", "UDP generator CPU %", "TCP tools CPU %", "host softirq %", "host system %", "host user %",
         "host idle %", "emulated delivery cost CPU %", "load", "limiter at end (TCP/UDP)"], rows)
    wrows = [(f"{w['phase']} #{w['rep'] + 1}", _f(w["load_avg_1m"], 2), _f(w["udp_sent_kpps"]), _f(w["udp_handed_kpps"]),
              _f(w["udp_forwarded_kpps"], 2), _f(w["tcp_forwarded_kpps"]), _f(w["host_softirq_percent"]),
              _f(w["host_system_percent"]), _f(w["host_idle_percent"])) for w in result.get("windows", [])]
    wtable = markdown_table(["window", "load", "UDP sent", "UDP handed", "UDP fwd", "TCP fwd", "softirq %", "system %",
                             "idle %"], wrows)
    work = "\n\n".join(where_work_goes(stats, comp, int(result.get("n_cpus", 2))))
    idr = result.get("input_drop")
    ib = result.get("input_bpf")
    idtxt = ("" if not idr else
             f" The input-side limiter: ingress u32 `ip dst {idr['dst']}/32` on `{idr['port']}` + mirred to IFB "
             f"`{idr['ifb']}` with a TBF of {idr['rate_bytes_per_s']} B/s ({idr['rate_pps']:.0f} pps of "
             f"{result['frame_bytes']}-byte frames, {result.get('input_factor', 0):.2f}x the UDP setpoint), bucket and "
             f"queue {idr['burst_bytes']} B.") + ("" if not ib else
             f" The eBPF bucket: cls_bpf direct-action on `{ib['port']}`'s clsact ingress, frames to {ib['mac']} "
             f"at {ib['rate_pps']:.0f} pps with {1000 * ib['burst_s']:.0f} ms of credit (lab/xtc_lab/lab/bpfbucket.py).")
    hc = result.get("host_delivery_cost")
    costtxt = ("" if not hc else
               f" **Emulated Dom0 (lab only):** every packet delivered into a VR cost the host {hc['cost_us']:g} us more "
               "of softirq work, spent by a cls_bpf program on the clsact ingress of the VR's own veth ends (after "
               "the product's early-drop limiter: a packet it drops does not pay; lab/xtc_lab/lab/hostcost.py); "
               "\"emulated delivery cost CPU\" is the time that program spent, in percent of one CPU.")
    title = TITLE + ("" if not hc else f", on an emulated Dom0 ({hc['cost_us']:g} us a delivered packet)")
    return f"""# {title} ({PAPER}; issue 48 item 3)

Two {result.get('vr_kind', 'lxc')} VRs on one {result['n_cpus']}-core host: VR 1 forwards one iperf3 TCP flow, VR 2 a paced
UDP stream asked at {result['udp_offered_pps']:.0f} pps, both {result['frame_bytes']}-byte frames.  Phases in turn
{result['alternate']} times ({', '.join(result['phase_names'])}); each window measured {result['hold_s']:g} s
(the XTC phases after {result['settle_s']:g} s of settling with a fresh daemon).  Setpoints from the first
`without` window: UDP VR {sp.get('udp', math.nan) / 1e3:.2f} kp/s, TCP VR {sp.get('tcp', math.nan) / 1e3:.2f} kp/s
({100 * result['udp_share']:.0f}% / the rest of its aggregate).  Early drop was asked for both VRs in
`xtc+early-drop` (the daemon's eBPF bucket on the vifs), `xtc+early-drop-margin8` (the same, margin 0.08)
and `xtc+early-drop-tbf` (its TBF).{idtxt}{costtxt}

Means (+- standard deviation over the windows); "sent" = what the UDP generator sent (host RX of its port, before
any limiter); "handed" = host TX of the VR's vifs; "dropped by VR" = handed but not passed on; CPU in percent of one
CPU ({100 * result['n_cpus']}% = the host); "generator CPU" = the lab's traffic tools of that VR (they run in its
namespaces, mostly in the kernel: sending is host work too).

{table}

## Where the host's work goes

{work}

## Every window (in the order run)

{wtable}
"""


def plot_phases(result: Mapping[str, Any], path: Path) -> None:
    """Bars per phase (means, sd whiskers): UDP sent/handed/forwarded and TCP forwarded; host CPU."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = result["phases"]
    names = list(stats)
    fig, (ax, axc) = plt.subplots(1, 2, figsize=(13, 4.4))
    series = (("udp_sent_kpps", "UDP sent", "tab:pink"), ("udp_handed_kpps", "UDP handed", "tab:red"),
              ("udp_forwarded_kpps", "UDP forwarded", "darkred"), ("tcp_forwarded_kpps", "TCP forwarded", "tab:blue"))
    width = 0.8 / len(series)
    for i, (key, label, color) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, [stats[n][key] for n in names], width, yerr=[_nz(stats[n][f"{key}_sd"]) for n in names],
               color=color, label=label, capsize=2)
    sp = (result.get("setpoints_pps") or {}).get("udp")
    if sp:
        ax.axhline(sp / 1e3, color="darkred", ls="--", lw=1, label="UDP setpoint")
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylabel("kp/s")
    ax.set_title("Figure 17 several ways: means over the alternated windows (whiskers: sd)", fontsize=9)
    ax.legend(fontsize=7)
    cpu = (("host_softirq_percent", "softirq", "tab:orange"), ("host_system_percent", "system", "tab:green"),
           ("host_user_percent", "user", "tab:purple"), ("host_idle_percent", "idle", "tab:gray"))
    if any(math.isfinite(stats[n].get("host_delivery_cost_cpu_percent", math.nan)) for n in names):
        cpu += (("host_delivery_cost_cpu_percent", "emulated delivery cost (in softirq)", "tab:brown"),)
    width = 0.8 / len(cpu)
    for i, (key, label, color) in enumerate(cpu):
        xs = [j + (i - (len(cpu) - 1) / 2) * width for j in range(len(names))]
        axc.bar(xs, [stats[n][key] for n in names], width, yerr=[_nz(stats[n].get(f"{key}_sd", math.nan)) for n in names],
                color=color, label=label, capsize=2)
    axc.set_xticks(range(len(names)), names, fontsize=8)
    axc.set_ylabel(f"% of one CPU ({100 * result['n_cpus']}% = host)")
    axc.set_title("host CPU per phase", fontsize=9)
    axc.legend(fontsize=7)
    save_figure(fig, path)


def _nz(v: Any) -> float:
    return 0.0 if not isinstance(v, (int, float)) or not math.isfinite(v) else float(v)
