"""The statistics and the report of Figure 17 run several ways, phases alternated (pure: no I/O).

What :mod:`xtc_lab.lab.experiments.tcpudp_phases` measured, window by window, turned into issue 48's
phase objects (means and standard deviations), the paired differences of the repetitions with a 95 %
t interval, the goals, the sentences on where the host's work goes, the markdown and the figure.
The phases' names and the numbers every phase object carries are declared here, once.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xtc_lab.lab.experiments import Goal, Outcome
from xtc_lab.lab.experiments.tcpudp import (
    PAPER,
    PAPER_KPPS,
)
from xtc_lab.lab.harness import (
    markdown_table,
    save_figure,
)

PHASES = ("without", "xtc", "xtc+early-drop", "xtc+early-drop-noloss", "xtc+early-drop-loss", "xtc+early-drop-margin8", "xtc+early-drop-tbf",
          "xtc+input-drop", "xtc+input-bpf")
#: The phases with the product's early drop, and the daemon's ``[daemon]`` keys in each.
EARLY_DROP_PHASES: dict[str, dict[str, Any]] = {
    "xtc+early-drop": {"early_drop_limiter": "bpf"},
    # the rule before the VR's own losses raised the limit (daemon.early_drop_loss_bound_fraction = 0)
    "xtc+early-drop-noloss": {"early_drop_limiter": "bpf", "early_drop_loss_bound_fraction": 0.0},
    # the VR's own losses raising the limit up to 1.25x the setpoint (off by default)
    "xtc+early-drop-loss": {"early_drop_limiter": "bpf", "early_drop_loss_bound_fraction": 0.25},
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
        "host_delivery_cost_cpu_percent",
        # where the VRs' own drops come from: the cap (CFS throttling), waiting for a CPU, the socket's buffer
        "udp_throttled_share", "udp_throttled_ms_per_s", "udp_run_delay_ms_per_s", "udp_rcvbuf_bytes",
        "tcp_throttled_share", "tcp_throttled_ms_per_s", "tcp_run_delay_ms_per_s")
#: Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (beyond: the normal's 1.96).
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


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
                    ("xtc+early-drop-noloss", "early drop (the eBPF bucket on the vif, the VR's own losses not counted)"),
                    ("xtc+early-drop-loss", "early drop (the eBPF bucket on the vif, the VR's own losses up to 1.25x)"),
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


# ------------------------------------------------------------------------------ pure: the tables' cells
def number(v: Any, nd: int = 1) -> str:
    """``v`` with ``nd`` decimals, or ``-`` when it is missing or not finite (a table's cell)."""
    return "-" if not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


_f = number  # the short name the report's tables use


def interval(c: Mapping[str, Any] | None) -> str:
    """A paired difference (:func:`paired_difference`) as ``+mean +-half-width``, `` (noise)`` when its
    interval holds 0, or ``-`` when there is none."""
    if not c or not isinstance(c.get("mean"), (int, float)) or not math.isfinite(c["mean"]):
        return "-"
    sep = "" if c.get("separated") else " (noise)"
    return f"{c['mean']:+.1f} +-{number(c['ci95'])}{sep}"


def setpoints_line(result: Mapping[str, Any]) -> str:
    """A run's setpoints, emulated delivery cost and windows per phase, in one line."""
    sp = result["setpoints_pps"]
    return (f"setpoints: UDP {sp['udp'] / 1e3:.2f} kp/s, TCP {sp['tcp'] / 1e3:.2f} kp/s; "
            f"cost {result.get('host_delivery_cost_us')} us; windows per phase {result['alternate']}")


def udp_error_text(phase: str, s: Mapping[str, Any]) -> str:
    """`` (+1.0%)``: how far the UDP VR forwarded from its setpoint in ``phase`` (nothing without XTC)."""
    if phase == "without":
        return ""
    return f" ({100 * (s['udp_forwarded_kpps'] / s['udp_setpoint_kpps'] - 1):+.1f}%)"


def over_xtc_lines(comp: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Per phase compared with XTC alone (:func:`comparisons`), one line of its paired differences."""
    return [f"{p} vs XTC alone, paired: " + ", ".join(
        f"{k.replace('_change_over_xtc', '')} {interval(v)}" for k, v in c.items()
        if k.endswith(("_over_xtc_percent", "_over_xtc_kpps")))
        for p, c in comp.items() if "softirq_change_over_xtc_percent" in c]


def goal_lines(goals: Sequence[Mapping[str, Any]]) -> list[str]:
    """The goals of a result's ``goals`` list as a markdown check list."""
    return [f"- [{'x' if g.get('met') else ' '}] {g.get('name') or g.get('goal')}: {g.get('measured')}" for g in goals]


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
`xtc+early-drop` (the daemon's eBPF bucket on the vifs), `xtc+early-drop-noloss` (the same without raising the
limit for the VR's own losses), `xtc+early-drop-margin8` (the same, margin 0.08) and `xtc+early-drop-tbf` (its TBF).{idtxt}{costtxt}

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
