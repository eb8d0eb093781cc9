"""The tracking experiment's pure analysis: setpoint fractions, the steady state of one step, the goals."""

from __future__ import annotations

import math

import pytest

from xtc_lab.lab.experiments import tracking as T


def test_fractions_default_and_parse() -> None:
    assert T.parse_fractions(None, T.FRACTIONS) == T.FRACTIONS
    assert T.parse_fractions("0.05, 0.5,0.95", T.FRACTIONS) == (0.05, 0.5, 0.95)


@pytest.mark.parametrize("text", ["", "0", "1", "0.5,1.2", "a,b", "-0.1"])
def test_bad_fractions_are_refused_naming_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="--fractions"):
        T.parse_fractions(text, T.FRACTIONS)


def test_step_summary_counts_steady_rates_within_10_percent_and_the_gain() -> None:
    t = [float(i) for i in range(11)]  # one sample per second over [0, 10]; steady half: t = 5..10
    rate = [0, 0, 0, 0, 0, 1000, 1000, 1000, 1000, 1000, 1200]
    cap = [None, 50, 50, 50, 50, 10, 10, 10, 10, 10, 12]
    s = T.summarise_step(t, rate, 0.0, 10.0, 1000.0, cap)
    assert s["mean_pps"] == pytest.approx(1200 / 6 + 5000 / 6)
    assert s["rates_within_10pct"] == pytest.approx(5 / 6)  # 1200 is 20% off
    assert s["pps_per_cap_percent"] == pytest.approx(s["mean_pps"] / (62 / 6))
    assert math.isnan(T.summarise_step(t, rate, 0.0, 10.0, 1000.0)["pps_per_cap_percent"])


def _result(steps: list[dict]) -> dict:
    return {"offered_pps": 10_000.0, "offered_seen_pps": 10_000.0, "free_pps": 10_000.0, "hold_s": 10.0,
            "model": "m", "fractions": [0.05, 0.95], "work_iters": 24000, "work_factor": 2.0,
            "controllers": {"xtc": {"steps": steps, "lowest_held_pps": None, "recording": {}}}}


def _step(sp: float, err: float, share: float) -> dict:
    return {"setpoint_pps": sp, "mean_pps": sp * (1 + err), "rel_error": err, "rel_scatter": 0.01,
            "within_tolerance": abs(err) <= T.TOLERANCE, "rates_within_10pct": share, "pps_per_cap_percent": 300.0,
            "settling_periods": 2}


def test_other_hardware_goal_needs_every_mean_within_3_and_every_rate_within_10_percent() -> None:
    ok = T._outcome(_result([_step(500, 0.02, 1.0), _step(9500, -0.029, 1.0)]), None)
    assert [g.met for g in ok.goals] == [True, True]
    assert "x factor 2" in ok.report_md and "5% to 95%" in ok.report_md
    mean_off = T._outcome(_result([_step(500, 0.04, 1.0), _step(9500, 0.0, 1.0)]), None)
    assert [g.met for g in mean_off.goals] == [True, False]
    one_rate_off = T._outcome(_result([_step(500, 0.0, 1.0), _step(9500, 0.0, 0.875)]), None)
    assert [g.met for g in one_rate_off.goals] == [True, False]
    assert "worst setpoint 88%" in one_rate_off.goals[1].measured


def test_factor_summary_compares_gains_and_judges_each_factor(tmp_path) -> None:
    runs = []
    for factor, gain, share in ((0.5, 600.0, 1.0), (1.0, 300.0, 1.0), (2.0, 150.0, 0.9)):
        r = _result([_step(500, 0.01, 1.0), _step(9500, 0.0, share)])
        r["work_factor"] = factor
        for s in r["controllers"]["xtc"]["steps"]:
            s["pps_per_cap_percent"] = gain
        runs.append(r)
    o = T.factor_summary(runs[::-1])
    assert [x["work_factor"] for x in o.result["factors"]] == [0.5, 1.0, 2.0]
    assert [x["gain_vs_factor_1"] for x in o.result["factors"]] == [2.0, 1.0, 0.5]
    assert [g.met for g in o.goals] == [True, True, False]
    assert [ln.split(" | ")[0] for ln in o.report_md.splitlines()[2:]] == ["| 0.5", "| 1", "| 2"]
    o.plot(tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000


# ------------------------------------------------------------------------- netns VRs (--vr-mode netns)
def _vr(tmp_path, kind: str, cgroup: bool = True):
    from xtc_lab.lab.netlab import VR

    d = None
    if cgroup:
        d = tmp_path / "cg-vr1"
        d.mkdir()
        (d / "cpu.cfs_quota_us").write_text("25000\n")
        (d / "cpu.cfs_period_us").write_text("100000\n")
    return VR(k=1, name="xt-vr1", kind=kind, tg_ns="xt-tg1", tr_ns="xt-tr1", bridges=("xt-a1", "xt-b1"),
              vifs=("vif1.0", "vif1.1"), tg_addr="198.18.1.1", tr_addr="198.18.2.1",
              cgroup=None if d is None else str(d))


def test_a_netns_vr_gets_the_cgroup_backend_an_lxc_vr_the_libvirt_one(tmp_path):
    from xtc.daemon.config import loads_config
    from xtc_lab.lab.harness import daemon_config_text

    vr = _vr(tmp_path, "netns")
    cfg = loads_config(daemon_config_text(tmp_path, "lxc:///", [vr], kind="xtc"))
    assert cfg.daemon.backend == "cgroup"
    (entry,) = cfg.cgroup.vr
    assert (entry.name, entry.path, tuple(entry.interfaces)) == ("xt-vr1", vr.cgroup, ("vif1.0", "vif1.1"))
    lxc = loads_config(daemon_config_text(tmp_path, "lxc:///", ["xt-vr1"], kind="xtc"))
    assert lxc.daemon.backend == "libvirt" and list(lxc.libvirt.domains) == ["xt-vr1"]


def test_one_daemon_config_takes_one_kind_of_vr_and_a_netns_vr_needs_its_cgroup(tmp_path):
    from xtc_lab.lab.harness import daemon_config_text
    from xtc_lab.lab.netlab import LabError

    with pytest.raises(LabError, match="not both"):
        daemon_config_text(tmp_path, "lxc:///", [_vr(tmp_path, "netns"), "other"])
    with pytest.raises(LabError, match="without a cgroup"):
        daemon_config_text(tmp_path / "x", "lxc:///", [_vr(tmp_path / "x", "netns", cgroup=False)])


def test_the_cap_of_a_netns_vr_is_read_from_its_cgroup(tmp_path):
    from xtc_lab.lab.harness import CapReader

    vr = _vr(tmp_path, "netns")
    caps = CapReader("lxc:///")
    try:
        assert caps(vr) == pytest.approx(25.0)
        (tmp_path / "cg-vr1" / "cpu.cfs_quota_us").write_text("-1\n")
        assert caps(vr) is None  # unlimited
    finally:
        caps.close()


def test_first_entry_is_the_end_of_the_first_3_sample_mean_inside_the_band() -> None:
    assert T.first_entry([500, 900, 1000, 1040, 1300], 1000.0) == 4  # (900 + 1000 + 1040) / 3 is within 5%
    assert T.first_entry([500, 600, 700], 1000.0) is None


def test_step_noise_stats_bound_the_steady_mean_by_its_noise() -> None:
    """One 10 s hold at 1,000 pps: its steady half (t = 5..10) scatters by 100 pps around 1,000."""
    t = [float(i) for i in range(1, 11)]
    rate = [400.0, 800.0, 950.0, 1000.0, 900.0, 1100.0, 900.0, 1100.0, 900.0, 1100.0]
    caps = [20.0] * 4 + [10.0, 10.0, 12.0, 10.0, None, 10.0]
    series = {"vr1": {"t_s": t, "forwarded_pps": rate, "cap_percent": caps}}
    doc = {"hold_s": 10.0, "controllers": {"xtc": {
        "recording": {"series": series, "marks": [{"t_s": 0.0}]},
        "steps": [{"setpoint_pps": 1000.0, "rel_error": 0.0, "settling_periods": 6}]}}}
    (s,) = T.step_noise_stats(doc)
    assert s["n_steady"] == 6 and s["rate_sd_percent"] == 10.0
    assert s["mean_se_percent"] == round(10.0 / math.sqrt(6), 2)
    assert s["first_entry_periods"] == 5 and s["settle_periods"] == 6  # (950 + 1000 + 900) / 3: 5% under
    assert s["cap_median_percent"] == 10.0  # the caps of the steady half: 10, 10, 12, 10, (none), 10
    table = T.step_noise_table([s]).splitlines()
    assert len(table) == 3 and table[2] == f"| 1.0 | +0.0 | 10.0 | {s['mean_se_percent']} | 6 | 5 | 10.0 |"
