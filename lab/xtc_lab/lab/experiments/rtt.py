"""Packet loss and RTT of a ping probe through a VR that XTC holds at a setpoint (the paper's Figure 7).

The paper (section 7.1) sends a ``ping`` probe at 0.1 kp/s through a VR forwarding a UDP flow
while XTC holds it at setpoints from 20 to 90 kp/s, and reports the probe's packet loss ratio
("proportional to the distance between Throughput Setpoint and the flow rate": XTC limits the
VR by making it drop, and every flow through it shares the drops) and its average RTT ("the
larger the difference between Throughput Setpoint and the flow rate, the longer is the RTT":
about 55 ms at 20 kp/s, section 7.3).

Here one LXC VR forwards a steady 64-byte UDP stream (``--offered-pps``); first without XTC,
then with an ``xtc daemon`` holding ``--rtt-setpoints`` (fractions of the rate the VR forwarded
unlimited during the probe without XTC, highest first), each for ``--rtt-settle-s`` to settle and then ``--rtt-ping-s`` with
the probe: ``ping -i 0.01`` (100 requests/s) from the generator namespace to the receiver,
through the VR both ways (the forwarder is two-way, so the replies cross the VR too).  Per
setpoint: the probe's loss ratio, its mean, median and 95th-percentile RTT, and, beside them,
the stream's own drop ratio over the same seconds (1 - forwarded / offered, from the host-side
counters), which the paper's observation says the probe's loss should follow.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from xtc_lab.lab.experiments import Goal, Outcome
from xtc_lab.lab.harness import controller_model, LabDaemon, Recorder, RunContext, experiment_lab, markdown_table, mean, wait_with_progress, save_figure
from xtc_lab.lab.probe import start_ping
from xtc_lab.lab.traffic import start_udp_stream

TITLE = "ping loss ratio and RTT through a VR held by XTC at several setpoints"
PAPER = "Figure 7"
FRACTIONS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)
QUICK_FRACTIONS = (0.6, 0.2)
PAPER_RTT_AT_20_KPPS_MS = 55.0  # section 7.3: "an aggressive limitation of 20kp/s produces an Average RTT of approximately 55ms"
PAPER_OBSERVATION = ("probe loss proportional to the distance between setpoint and flow rate (tends to zero near "
                     "the flow rate); average RTT grows as XTC limits harder, about 55 ms at 20 kp/s of a 100 kp/s flow")
LOSS_MATCH = 0.10  # the probe's loss within 10 points of the stream's drop ratio


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("rtt")
    g.add_argument("--rtt-setpoints", default=None,
                   help="comma-separated setpoints as fractions of the unlimited rate "
                        "(default 0.9,0.8,...,0.2; quick: 0.6,0.2)")
    g.add_argument("--rtt-settle-s", type=float, default=None, help="seconds to settle at each setpoint (default 8; quick 5)")
    g.add_argument("--rtt-ping-s", type=float, default=None, help="seconds of probe per setpoint (default 12; quick 6)")
    g.add_argument("--rtt-interval-s", type=float, default=0.01,
                   help="seconds between echo requests (default 0.01: the paper's 0.1 kp/s)")
    g.add_argument("--rtt-model", default=None,
                   help="model file for XTC's controller (default xtc/models/lab.toml if present, else the paper's)")


# ------------------------------------------------------------------------------ pure analysis
def parse_fractions(text: str | None, quick: bool) -> tuple[float, ...]:
    """Setpoint fractions from ``--rtt-setpoints`` (default: the paper's range), checked, highest first."""
    if text is None:
        return QUICK_FRACTIONS if quick else FRACTIONS
    try:
        fr = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--rtt-setpoints {text!r}: want comma-separated fractions such as 0.6,0.2") from None
    if not fr or any(not 0.03 <= f <= 1.0 for f in fr):
        raise ValueError(f"--rtt-setpoints {text!r}: want fractions of the unlimited rate in 0.03..1")
    return tuple(sorted(fr, reverse=True))


def window_rates(t_s: list[float], fwd_pps: list[float], off_pps: list[float], t0_s: float,
                 t1_s: float) -> tuple[float, float, float]:
    """Mean forwarded and offered rate over the samples ending in (t0, t1], and the stream's drop ratio."""
    f = [r for t, r in zip(t_s, fwd_pps) if t0_s < t <= t1_s]
    o = [r for t, r in zip(t_s, off_pps) if t0_s < t <= t1_s]
    fm, om = mean(f), mean(o)
    drop = max(0.0, 1.0 - fm / om) if o and om > 0 else math.nan
    return fm, om, drop


def loss_follows_stream(rows: list[dict[str, Any]], tolerance: float = LOSS_MATCH) -> tuple[bool, float]:
    """Whether every row's probe loss is within ``tolerance`` of its stream drop ratio; the worst gap."""
    gaps = [abs(r["ping"]["loss_ratio"] - r["stream_drop_ratio"]) for r in rows
            if r["ping"]["loss_ratio"] is not None and not math.isnan(r["ping"]["loss_ratio"])
            and not math.isnan(r["stream_drop_ratio"])]
    if len(gaps) < len(rows) or not gaps:
        return False, math.nan
    worst = max(gaps)
    return worst <= tolerance, worst


def cap_warnings(result: dict[str, Any]) -> list[str]:
    """What the recorded caps say is wrong with a run: no cap under XTC, or one without it (empty if fine)."""
    out = []
    if result["without_xtc"]["cap_percent"] is not None:
        out.append("without XTC: the VR had a cap: these are not the numbers of an unlimited VR")
    missing = [r["label"] for r in result["setpoints"] if r["cap_percent"] is None]
    if missing:
        out.append(f"at {', '.join(missing)}: the VR's cap could not be read (libvirt unreachable, e.g. libvirtd "
                   "restarted by other work on the host), so the daemon could not control it: not XTC's numbers")
    return out


def rank_correlation(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (NaN for fewer than 3 pairs; ties averaged)."""
    if len(xs) != len(ys):
        raise ValueError("rank_correlation needs sequences of equal length")
    pairs = [(x, y) for x, y in zip(xs, ys) if not (math.isnan(x) or math.isnan(y))]
    if len(pairs) < 3:
        return math.nan

    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r

    rx, ry = ranks([p[0] for p in pairs]), ranks([p[1] for p in pairs])
    mx, my = mean(rx), mean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy) if vx > 0 and vy > 0 else math.nan


# ------------------------------------------------------------------------------ the run

def run(ctx: RunContext, args: argparse.Namespace) -> Outcome:
    fractions = parse_fractions(getattr(args, "rtt_setpoints", None), ctx.quick)
    settle_s = getattr(args, "rtt_settle_s", None) or (5.0 if ctx.quick else 8.0)
    ping_s = getattr(args, "rtt_ping_s", None) or (6.0 if ctx.quick else 12.0)
    interval_s = float(getattr(args, "rtt_interval_s", 0.01))
    if settle_s < 2 or ping_s < 2:
        raise ValueError(f"--rtt-settle-s {settle_s:g} / --rtt-ping-s {ping_s:g}: want at least 2 s each")
    if not 0.002 <= interval_s <= 1.0:
        raise ValueError(f"--rtt-interval-s {interval_s:g} out of range 0.002..1")
    model = controller_model(getattr(args, "rtt_model", None))
    # ping may send more slowly than 1 / interval (see PingResult.request_rate_pps): room for that;
    # the stream is stopped when the run ends anyway.
    total_s = 2 * (ping_s + 3 + len(fractions) * (settle_s + ping_s + 3)) + 30
    result: dict[str, Any] = {"title": TITLE, "paper": PAPER, "paper_observation": PAPER_OBSERVATION,
                              "paper_rtt_at_20_kpps_ms": PAPER_RTT_AT_20_KPPS_MS, "offered_pps": ctx.offered_pps,
                              "model": model, "settle_s": settle_s, "ping_s": ping_s, "ping_interval_s": interval_s,
                              "fractions": list(fractions)}
    with experiment_lab(result, 1, work_iters=ctx.work_iters) as (lab, workdir, caps):
        vr = lab.vrs[0]
        with start_udp_stream(lab, vr, ctx.offered_pps, duration_s=total_s), \
                Recorder([vr], dt_s=1.0, caps=caps) as rec:
            wait_with_progress(1.5, "stream starting", ctx.say)

            def probe(label: str, setpoint: float | None, fraction: float | None) -> dict[str, Any]:
                t0 = rec.mark(f"ping {label}")
                run_ = start_ping(lab, vr.tg_ns, vr.tr_addr, interval_s=interval_s, duration_s=ping_s)
                wait_with_progress(ping_s, f"probe {label}", ctx.say)
                res = run_.result()
                t1 = rec.now()
                s = rec.series[vr.name]
                fwd, off, drop = window_rates(s.t_s, s.forwarded_pps, s.offered_pps, t0, t1)
                caps_w = [c for t, c in zip(s.t_s, s.cap_percent) if t0 < t <= t1 and c is not None]
                row = {"label": label, "fraction": fraction, "setpoint_pps": setpoint, "forwarded_pps": fwd,
                       "offered_pps": off, "stream_drop_ratio": drop, "cap_percent": mean(caps_w) if caps_w else None,
                       "setpoint_error": (fwd - setpoint) / setpoint if setpoint else None,
                       "ping": res.summary(), "t0_s": t0, "t1_s": t1}
                ctx.say(f"   {label}: forwarded {fwd:.0f} pps (stream drops {100 * drop:.1f}%), probe loss "
                        f"{100 * res.loss_ratio:.1f}% of {res.transmitted}, RTT avg {res.avg_rtt_ms:.2f} ms "
                        f"p95 {res.rtt_percentile_ms(95):.2f} ms")
                return row

            ctx.say(f"-- without XTC: probe {ping_s:g} s")
            free = result["without_xtc"] = probe("without XTC", None, None)
            # The setpoints are fractions of what the VR forwarded unlimited over the whole probe
            # (a few seconds' sample on a shared host can be 30% off), at most the offered rate.
            base = min(free["forwarded_pps"], free["offered_pps"])
            result.update(free_pps=free["forwarded_pps"], offered_seen_pps=free["offered_pps"])
            setpoints = [round(f * base, -2) for f in fractions]
            ctx.say(f"-- XTC at {', '.join(f'{s / 1000:g}k' for s in setpoints)} pps: settle {settle_s:g} s, "
                    f"probe {ping_s:g} s each")
            rows = []
            with LabDaemon(workdir / "xtc", lab.uri, [vr.name], kind="xtc", model=model, cfs_period_us=ctx.cfs_period_us) as d:
                for i, (f, sp) in enumerate(zip(fractions, setpoints)):
                    rec.mark(f"setpoint {sp:.0f}")
                    if i == 0:
                        d.activate(vr.name, sp)
                    else:
                        d.setpoint(vr.name, sp)
                    wait_with_progress(settle_s, f"settling at {sp / 1000:g} kp/s", ctx.say)
                    rows.append(probe(f"{sp / 1000:g} kp/s", sp, f))
            result["setpoints"] = rows
        result["recording"] = rec.to_json()
        caps.close()
    return _outcome(result)


def _f(x: float | None, fmt: str, scale: float = 1.0) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(scale * x, fmt)


def _outcome(result: dict[str, Any]) -> Outcome:
    rows_all = [result["without_xtc"], *result["setpoints"]]
    table = []
    for r in rows_all:
        p = r["ping"]
        table.append((r["label"], _f(r["setpoint_pps"], ".0f"), _f(r["forwarded_pps"], ".0f"),
                      _f(r["setpoint_error"], "+.1f", 100) + ("%" if r["setpoint_error"] is not None else ""),
                      _f(r["cap_percent"], ".2f"),
                      _f(r["stream_drop_ratio"], ".1f", 100) + "%", _f(p["loss_ratio"], ".1f", 100) + "%",
                      f"{p['transmitted']} ({_f(p.get('request_rate_pps'), '.0f')}/s)", _f(p["avg_rtt_ms"], ".2f"),
                      _f(p["p50_rtt_ms"], ".2f"),
                      _f(p["p95_rtt_ms"], ".2f")))
    sps = result["setpoints"]
    ok_loss, worst_gap = loss_follows_stream(sps)
    rho_rtt = rank_correlation([r["setpoint_pps"] for r in sps], [_nan(r["ping"]["avg_rtt_ms"]) for r in sps])
    rho_loss = rank_correlation([r["setpoint_pps"] for r in sps], [_nan(r["ping"]["loss_ratio"]) for r in sps])
    lowest = min(sps, key=lambda r: r["setpoint_pps"])
    highest = max(sps, key=lambda r: r["setpoint_pps"])
    free = result["without_xtc"]
    warnings = result["warnings"] = cap_warnings(result)
    warn_md = "".join(f"\n**Warning:** {w}.\n" for w in warnings)
    md = f"""# Ping loss and RTT through a VR held by XTC ({PAPER})
{warn_md}
One LXC VR forwarding {result['offered_pps']:.0f} pps of 64-byte UDP offered ({result['offered_seen_pps']:.0f} pps
reached it; unlimited it forwarded {result['free_pps']:.0f} pps during the probe without XTC).  XTC holds it at each
setpoint (fractions of that unlimited rate, highest first); after {result['settle_s']:g} s to settle, a ping probe runs for {result['ping_s']:g} s
(`ping -i {result['ping_interval_s']:g}`, from the generator to the receiver, through the VR both ways; iputils sends
about 62 requests/s with `-i 0.01` on this host, not 100: the rate it reached is in the table).
"Stream drops" = 1 - forwarded / offered of the UDP stream over the same seconds.

{markdown_table(['run', 'setpoint (pps)', 'forwarded (pps)', 'error', 'cap (%)', 'stream drops', 'probe loss',
                 'probes sent (rate)', 'avg RTT (ms)', 'median RTT (ms)', 'p95 RTT (ms)'], table)}

Paper: {PAPER_OBSERVATION}.

Lab: probe loss vs the stream's drop ratio, worst gap {_f(worst_gap, '.1f', 100)} points; rank correlation of the
setpoint with the probe's loss {_f(rho_loss, '+.2f')} and with its average RTT {_f(rho_rtt, '+.2f')} (the paper's
observations give -1 for both).  At the lowest setpoint ({lowest['setpoint_pps'] / 1000:g} kp/s) the average RTT is
{_f(lowest['ping']['avg_rtt_ms'], '.1f')} ms (median {_f(lowest['ping']['p50_rtt_ms'], '.2f')} ms, p95
{_f(lowest['ping']['p95_rtt_ms'], '.1f')} ms), without XTC {_f(free['ping']['avg_rtt_ms'], '.2f')} ms.  The RTTs
are bimodal: a probe that arrives while the capped VR runs crosses it at once; one that arrives while the VR is
throttled waits for the rest of the 100 ms CFS period (or is dropped when the queue is full), so the average
grows with the share of time the VR is throttled.
"""
    lo_rtt, hi_rtt, free_rtt = (_nan(lowest["ping"]["avg_rtt_ms"]), _nan(highest["ping"]["avg_rtt_ms"]),
                                _nan(free["ping"]["avg_rtt_ms"]))
    goals = [
        Goal(f"probe loss follows the stream's drop ratio (within {100 * LOSS_MATCH:.0f} points at every setpoint; "
             "paper: proportional to the distance between setpoint and flow rate)",
             f"worst gap {_f(worst_gap, '.1f', 100)} points over {len(sps)} setpoints", ok_loss),
        Goal("average RTT grows as XTC limits harder (lowest setpoint above the highest and above without XTC)",
             f"{_f(lo_rtt, '.2f')} ms at {lowest['setpoint_pps'] / 1000:g} kp/s, {_f(hi_rtt, '.2f')} ms at "
             f"{highest['setpoint_pps'] / 1000:g} kp/s, {_f(free_rtt, '.2f')} ms without XTC",
             lo_rtt > hi_rtt and lo_rtt > free_rtt if len(sps) > 1 else lo_rtt > free_rtt),
    ]

    def plot(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        x = [r["setpoint_pps"] / 1000 for r in sps]
        a1.plot(x, [100 * _nan(r["ping"]["loss_ratio"]) for r in sps], "o-", label="probe loss")
        a1.plot(x, [100 * _nan(r["stream_drop_ratio"]) for r in sps], "s--", label="UDP stream drops")
        a1.axhline(100 * _nan(free["ping"]["loss_ratio"]), color="grey", ls=":", label="probe loss without XTC")
        a1.set_xlabel("setpoint (kp/s)")
        a1.set_ylabel("loss (%)")
        a1.set_title("(a) packet loss ratio", fontsize=10)
        a1.legend(fontsize=8)
        a2.plot(x, [_nan(r["ping"]["avg_rtt_ms"]) for r in sps], "o-", label="average")
        a2.plot(x, [_nan(r["ping"]["p50_rtt_ms"]) for r in sps], "^:", label="median")
        a2.plot(x, [_nan(r["ping"]["p95_rtt_ms"]) for r in sps], "v:", label="95th percentile")
        a2.axhline(free_rtt, color="grey", ls=":", label="average without XTC")
        a2.set_yscale("log")
        a2.set_xlabel("setpoint (kp/s)")
        a2.set_ylabel("RTT (ms)")
        a2.set_title("(b) probe RTT", fontsize=10)
        a2.legend(fontsize=8)
        save_figure(fig, path)

    return Outcome(result=result, report_md=md, plot=plot, goals=goals)


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)
