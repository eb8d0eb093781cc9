"""Analysis and reports of the lab experiments hog (Figure 6), rtt (Figure 7) and sixvr (Figure 15, Table 2).

Driven with synthetic recordings shaped like the real ones (1 s samples, several percent of
noise), so the numbers each report states are checked against known answers; the reports and
plots are rendered to a temporary directory and must be strict JSON.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from xtc_lab.lab.experiments import hog, rtt, sixvr
from xtc_lab.lab.harness import RunContext, write_outputs


# ------------------------------------------------------------------ hog
def test_recovery_counts_periods_until_the_rate_is_back_in_the_band() -> None:
    sp = 20_000.0
    t = [float(i) for i in range(1, 31)]
    # hog at 10.4 s: the rate drops to 16k, then the controller brings it back at the 14 s sample
    rate = [sp] * 10 + [16_000, 16_500, 17_500, 19_800, 20_100] + [sp] * 15
    assert hog.recovery_periods(t, rate, 10.4, 30, sp) == 3  # first in-band sample covers 13..14 s: 2.6 s -> 3
    assert hog.recovery_periods(t, [sp] * 30, 10.4, 30, sp) == 0  # never left the band
    assert hog.recovery_periods(t, [sp] * 10 + [16_000] * 20, 10.4, 30, sp) is None  # never back (Fixed Cap)
    assert hog.recovery_periods(t, rate, 29.5, 30, sp) is None  # too few samples


def test_recovery_ignores_a_lone_sample_in_the_band() -> None:
    sp = 20_000.0
    t = [float(i) for i in range(1, 21)]
    rate = [16_000, 20_000, 16_000, 16_000, 16_500] + [sp] * 15  # one lucky sample at 2 s
    assert hog.recovery_periods(t, rate, 0.0, 20, sp) == 5


def _hog_series(setpoint: float, cap: float, on: float, off: float, end: float, controlled: bool,
                rng: random.Random) -> dict[str, list[Any]]:
    t, r, c = [], [], []
    for i in range(1, int(end) + 1):
        ts = float(i)
        hog_on = on < ts <= off
        if controlled:
            lag = ts - on if hog_on else ts - off
            level = setpoint * (0.8 if hog_on and lag <= 2 else 1.25 if not hog_on and ts > off and lag <= 2 else 1.0)
            cap_now = cap * (1.25 if hog_on and lag > 2 else 1.0)
        else:
            level = setpoint * (0.8 if hog_on else 1.0)
            cap_now = cap
        t.append(ts)
        r.append(level * (1 + rng.gauss(0, 0.01)))
        c.append(cap_now)
    return {"t_s": t, "forwarded_pps": r, "offered_pps": [100_000.0] * len(t), "cap_percent": c}


def _hog_result() -> dict[str, Any]:
    rng = random.Random(1)
    sp, cap = 30_000.0, 16.0
    times = {"start": 0.0, "steady": 5.0, "hog_on": 20.4, "hog_off": 45.4, "end": 65.0}
    runs = {}
    for key, controlled in (("xtc", True), ("fixed", False)):
        s = _hog_series(sp, cap, times["hog_on"], times["hog_off"], times["end"], controlled, rng)
        runs[key] = {**hog.summarise_run(s, times, sp), "hog": {"cpu_percent": 3.9, "cpu_s": 97.0, "wall_s": 25.0},
                     "times_s": times, "recording": {"dt_s": 1.0, "marks": [], "series": {"vr1": s}}}
    return {"title": hog.TITLE, "paper": hog.PAPER, "offered_pps": 100_000.0, "offered_seen_pps": 99_000.0,
            "free_pps": 80_000.0, "setpoint_pps": sp, "setpoint_fraction": 0.4, "fixed_cap_percent": cap,
            "hog_share": 0.25, "hog_demand_percent": 4.0, "phases_s": {"hog": 25.0, "after": 20.0}, "runs": runs}


def test_hog_summary_drop_errors_and_recovery_on_a_synthetic_recording() -> None:
    res = _hog_result()
    x, f = res["runs"]["xtc"], res["runs"]["fixed"]
    assert f["drop_under_hog"] == pytest.approx(0.2, abs=0.01) and f["error_under_hog"] == pytest.approx(-0.2, abs=0.01)
    assert abs(x["error_under_hog"]) < 0.01 and abs(x["drop_under_hog"]) < 0.01
    assert x["recovery_periods_hog_on"] == 2 and f["recovery_periods_hog_on"] is None
    assert x["recovery_periods_hog_off"] == 2 and f["recovery_periods_hog_off"] == 0
    assert x["cap_under_hog_percent"] == pytest.approx(20.0) and x["cap_before_percent"] == pytest.approx(16.0)


def test_hog_report_goals_and_plot(tmp_path: Path) -> None:
    out = hog._outcome(_hog_result())
    assert [g.met for g in out.goals] == [True, True, True]
    assert "Fixed Cap" in out.report_md and "-20." in out.report_md and "16.00%" in out.report_md
    _write_and_check(tmp_path, "hog", out)


def test_hog_warns_when_caps_are_missing_or_moved() -> None:
    res = _hog_result()
    assert hog.cap_warnings(res) == []
    s = next(iter(res["runs"]["xtc"]["recording"]["series"].values()))
    s["cap_percent"] = [None] * len(s["cap_percent"])
    f = next(iter(res["runs"]["fixed"]["recording"]["series"].values()))
    f["cap_percent"][-1] = 30.0
    w = hog.cap_warnings(res)
    assert len(w) == 2 and w[0].startswith("XTC: the VR's cap could not be read") and "16.00..30.00%" in w[1]


def test_fixed_cap_is_the_median_of_the_steady_caps() -> None:
    assert hog.fixed_cap_from([10.0, None, 12.0, 50.0]) == 12.0
    with pytest.raises(Exception, match="no cap"):
        hog.fixed_cap_from([None, None])


# ------------------------------------------------------------------ rtt
def test_rtt_setpoint_list_and_window_rates() -> None:
    assert rtt.parse_fractions(None, quick=True) == rtt.QUICK_FRACTIONS
    assert rtt.parse_fractions("0.2,0.9, 0.5", quick=False) == (0.9, 0.5, 0.2)
    for bad in ("", "x", "0.2,2", "0"):
        with pytest.raises(ValueError):
            rtt.parse_fractions(bad, quick=False)
    fwd, off, drop = rtt.window_rates([1, 2, 3, 4], [10, 20, 30, 40], [100, 100, 100, 100], 1.5, 3)
    assert (fwd, off) == (25, 100) and drop == pytest.approx(0.75)


def test_rank_correlation() -> None:
    assert rtt.rank_correlation([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1)
    assert rtt.rank_correlation([1, 2, 2, 4], [1, 5, 5, 9]) == pytest.approx(1)  # ties share a rank
    assert math.isnan(rtt.rank_correlation([1, 2], [2, 1]))


def _rtt_row(label: str, sp: float | None, fwd: float, loss: float, avg: float) -> dict[str, Any]:
    return {"label": label, "fraction": None if sp is None else sp / 100_000, "setpoint_pps": sp, "forwarded_pps": fwd,
            "offered_pps": 100_000.0, "stream_drop_ratio": 1 - fwd / 100_000, "cap_percent": None if sp is None else sp / 2000,
            "setpoint_error": None if sp is None else (fwd - sp) / sp,
            "ping": {"transmitted": 1200, "received": round(1200 * (1 - loss)), "loss_ratio": loss, "avg_rtt_ms": avg,
                     "p50_rtt_ms": avg / 3, "p95_rtt_ms": avg * 3, "min_rtt_ms": 0.05, "max_rtt_ms": avg * 4,
                     "duplicates": 0, "errors": 0, "elapsed_s": 12.0, "summary_found": True}}


def test_rtt_report_loss_follows_the_stream_and_rtt_grows(tmp_path: Path) -> None:
    rows = [_rtt_row(f"{sp / 1000:g}", sp, sp * 1.01, 1 - sp / 100_000 + 0.02, 2000 / sp)
            for sp in (80_000.0, 50_000.0, 20_000.0)]
    res = {"title": rtt.TITLE, "paper": rtt.PAPER, "offered_pps": 100_000.0, "offered_seen_pps": 99_500.0,
           "free_pps": 90_000.0, "settle_s": 8.0, "ping_s": 12.0, "ping_interval_s": 0.01,
           "without_xtc": _rtt_row("without XTC", None, 90_000.0, 0.08, 0.02), "setpoints": rows}
    ok, gap = rtt.loss_follows_stream(rows)
    assert ok and gap == pytest.approx(0.028)  # 2 points + 1% of 80 kp/s
    out = rtt._outcome(res)
    assert [g.met for g in out.goals] == [True, True]
    _write_and_check(tmp_path, "rtt", out)
    # A probe that loses nothing while the stream drops 80% does not follow it; flat RTTs do not grow.
    rows[2]["ping"]["loss_ratio"] = 0.0
    for r in rows:
        r["ping"]["avg_rtt_ms"] = 0.1
    out = rtt._outcome(res)
    assert [g.met for g in out.goals] == [False, False]
    assert out.result["warnings"] == []
    rows[1]["cap_percent"] = None
    assert "at 50: the VR's cap could not be read" in rtt._outcome(res).report_md


# ------------------------------------------------------------------ sixvr
def test_sixvr_setpoints_are_the_papers_shares_of_the_lab_aggregate() -> None:
    a = sixvr.scaled_setpoints("A", 66_000)
    assert a[:5] == [8460.0] * 5 and a[5] == pytest.approx(23_690, abs=10)
    assert sum(sixvr.scaled_setpoints("B", 78_000)) == pytest.approx(78_000, abs=30)
    with pytest.raises(ValueError):
        sixvr.scaled_setpoints("C", 1000)
    with pytest.raises(ValueError):
        sixvr.scaled_setpoints("A", 0)


def _sixvr_result(per_vr: dict[str, list[float]], after_factor: float = 1.0) -> dict[str, Any]:
    ping = {"transmitted": 2000, "received": 1900, "loss_ratio": 0.05, "avg_rtt_ms": 12.0, "p50_rtt_ms": 1.0,
            "p95_rtt_ms": 80.0, "min_rtt_ms": 0.1, "max_rtt_ms": 90.0, "duplicates": 0, "errors": 0,
            "elapsed_s": 20.0, "summary_found": True}
    w = sum(per_vr["without"])
    after = [r * after_factor for r in per_vr["without"]]
    ref = (w + sum(after)) / 2
    phases: dict[str, Any] = {
        "without": {"per_vr_pps": per_vr["without"], "cap_percent": [None] * 6, "ping": [ping] * 6,
                    **sixvr.summarise_phase(per_vr["without"], None, None)},
        "without_after": {"per_vr_pps": after, "cap_percent": [None] * 6, "ping": [ping] * 6,
                          **sixvr.summarise_phase(after, None, w)}}
    for cfg in sixvr.CONFIGS:
        sps = sixvr.scaled_setpoints(cfg, w)
        phases[cfg] = {"per_vr_pps": per_vr[cfg], "cap_percent": [10.0] * 6, "ping": [ping] * 6,
                       **sixvr.summarise_phase(per_vr[cfg], sps, ref),
                       "aggregate_loss_vs_before": 1 - sum(per_vr[cfg]) / w}
    for i, ph in enumerate(phases.values()):
        ph.update(t0_s=100.0 * i, t1_s=100.0 * i + 20)
    vrs = [f"vr{i + 1}" for i in range(6)]
    recording = {"dt_s": 1.0, "marks": [], "series": {
        v: {"t_s": [100.0 * i + 10 for i in range(4)], "forwarded_pps": [1.0] * 4, "offered_pps": [1.0] * 4,
            "cap_percent": [None if i in (0, 1) else 10.0 for i in range(4)]} for v in vrs}}
    return {"offered_pps_per_vr": 30_000.0, "work_iters": 6000, "measure_s": 20.0, "settle_s": 25.0, "phases": phases,
            "reference_aggregate_pps": ref, "vrs": vrs, "recording": recording}


def test_sixvr_report_goals_and_plot(tmp_path: Path) -> None:
    w = [11_000.0] * 6
    held = {cfg: [s * 1.01 for s in sixvr.scaled_setpoints(cfg, sum(w))] for cfg in sixvr.CONFIGS}
    out = sixvr._outcome(_sixvr_result({"without": w, **held}))
    assert all(g.met for g in out.goals) and len(out.goals) == 4
    assert "66.0 kp/s" in out.report_md and "77.97" in out.report_md
    _write_and_check(tmp_path, "sixvr", out)
    # The big VR of configuration A reaches only 80% of its setpoint: that VR misses, and so does the aggregate.
    short = dict(held)
    short["A"] = held["A"][:5] + [held["A"][5] * 0.8]
    out = sixvr._outcome(_sixvr_result({"without": w, **short}))
    met = {g.goal: g.met for g in out.goals}
    assert not met["configuration A: every VR within 5% of its setpoint"]
    assert not met["configuration A: aggregate loss against no XTC under 3%"]
    assert met["configuration B: every VR within 5% of its setpoint"]
    assert "configuration A, VR6: -19.2% (mean cap 10%); its cap stayed below the largest" in out.report_md
    caps = [[10.0, 12.0]] * 5 + [[60.0, 99.5, 100.0]]
    assert [(sf["vr"], sf["at_cap_max"]) for sf in sixvr.shortfalls(out.result["phases"]["A"], caps)] == [(6, True)]
    # The host forwarding 6% less without XTC after the run than before: the reference is the mean of the two.
    out = sixvr._outcome(_sixvr_result({"without": w, **held}, after_factor=0.94))
    assert out.result["reference_aggregate_pps"] == pytest.approx(0.97 * sum(w))
    assert "-6.0% against before" in out.report_md
    tcp = _sixvr_result({"without": w, **held})
    tcp.update(traffic="tcp", offered_pps_per_vr=None, work_iters=0)
    assert "one TCP flow (iperf3" in sixvr._outcome(tcp).report_md
    assert "Warning" not in out.report_md and out.result["warnings"] == []


def test_sixvr_warns_when_caps_are_missing_or_left_behind() -> None:
    w = [11_000.0] * 6
    held = {cfg: [s * 1.01 for s in sixvr.scaled_setpoints(cfg, sum(w))] for cfg in sixvr.CONFIGS}
    res = _sixvr_result({"without": w, **held})
    for s in res["recording"]["series"].values():
        s["cap_percent"] = [None, 8.0, 10.0, None]  # a cap left after "before"; none readable in B
    out = sixvr._outcome(res)
    assert len(out.result["warnings"]) == 2
    assert "configuration B: no cap could be read for VR1" in out.report_md
    assert "without XTC (after): VR1 (8%)" in out.report_md


# ------------------------------------------------------------------ helpers
def _write_and_check(tmp_path: Path, name: str, out: Any) -> None:
    paths = write_outputs(RunContext(out_dir=tmp_path), name, out.result, out.report_md, out.plot)
    json.loads(paths["json"].read_text())  # strict JSON (no NaN)
    assert paths["png"].stat().st_size > 10_000
    assert f"![{name}]({name}.png)" in paths["md"].read_text()


def test_sixvr_a_vr_outside_5_percent_passes_only_when_the_daemon_flagged_it() -> None:
    w = [11_000.0] * 6
    held = {cfg: [s * 1.01 for s in sixvr.scaled_setpoints(cfg, sum(w))] for cfg in sixvr.CONFIGS}
    held["A"] = held["A"][:5] + [held["A"][5] * 0.8]
    res = _sixvr_result({"without": w, **held})
    goal = "configuration A: every VR within 5% of its setpoint or flagged by the daemon"
    for cfg in sixvr.CONFIGS:
        res["phases"][cfg]["saturated"] = [None] * 6
        res["phases"][cfg]["flag_shares"] = [{}] * 6
    met = {g.goal: (g.met, g.measured) for g in sixvr._outcome(res).goals}
    assert met[goal] == (False, "outside 5%: VR6; of those not flagged: VR6")
    res["phases"]["A"]["flag_shares"] = [{}] * 5 + [{"cap_slack": 0.4}]  # flagged in 40% of readings: not enough
    assert not {g.goal: g.met for g in sixvr._outcome(res).goals}[goal]
    res["phases"]["A"]["flag_shares"] = [{}] * 5 + [{"cap_slack": 0.3, "cap_max": 0.3}]
    out = sixvr._outcome(res)
    assert {g.goal: g.met for g in out.goals}[goal]
    assert "**cap_slack** (30%), **cap_max** (30%)" in out.report_md
    # a record from before flag_shares: its cap_max share
    del res["phases"]["A"]["flag_shares"]
    res["phases"]["A"]["saturated_share"] = [0.0] * 5 + [0.6]
    out = sixvr._outcome(res)
    assert {g.goal: g.met for g in out.goals}[goal] and "**cap_max** (60%)" in out.report_md
