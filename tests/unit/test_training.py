"""Training tool: sweep CSV, fit, design analysis, cap_min, CLI and its refusals."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

import numpy as np
import pytest
from numpy.testing import assert_allclose

from xtc.models import PAPER_MODEL, load_model
from xtc.training.analysis import (
    PAPER_PI_POLES,
    choose_cap_min,
    design_deadbeat,
    design_pi,
    is_stable,
    mismatch_margins,
    parse_poles,
    stability_grid,
)
from xtc.training.cli import EXIT_ERROR, EXIT_POOR_FIT, main
from xtc.host.ifcounters import IfCounters
from xtc.training.collect import SweepPlan, parse_caps, run_sweep
from xtc.training.fit import CapLevel, find_cap_threshold, fit_sweep
from xtc.training.sweep import SweepSample, Sweep, SweepError, TrainingError, format_sweep_csv, parse_sweep_csv
from xtc.training.synth import model_sweep

PAPER = PAPER_MODEL.model
CAPS = [float(c) for c in range(5, 101, 5)]


def _sweep(**kw) -> Sweep:
    return Sweep(tuple(model_sweep(PAPER, kw.pop("caps", CAPS), **kw)))


# ------------------------------------------------------------------------------- the proof
@pytest.mark.parametrize("method", ["steps", "samples"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_the_papers_model_from_data_generated_by_it(method: str, seed: int) -> None:
    # Caps swept up then down (twice the steps), 30 settled samples per cap as in the paper, 0.5 kp/s
    # equation noise.  Tolerance: 4 standard errors of the estimate (computed by the fit from its
    # residuals; 4 sigma keeps a false failure below 1e-4), and the standard errors are themselves
    # checked to be small (a within +-0.06, b within +-6 %), so the tolerance cannot be loose.
    caps = CAPS + CAPS[::-1]
    fit = fit_sweep(_sweep(caps=caps, samples_per_cap=30, noise_kpps=0.5, seed=seed), method=method)
    assert fit.a_stderr < 0.015 and fit.b_stderr < 1.0
    assert_allclose(fit.model.a, 0.0915, atol=4 * fit.a_stderr)
    assert_allclose(fit.model.b_kpps_per_decade, 63.0051, atol=4 * fit.b_stderr)
    assert fit.r_squared > 0.99


def test_fit_without_noise_is_exact() -> None:
    fit = fit_sweep(_sweep(noise_kpps=0.0))
    assert_allclose(fit.model.a, 0.0915, atol=2e-3)
    assert_allclose(fit.model.b_kpps_per_decade, 63.0051, rtol=2e-3)


def test_paper_sweep_region_gives_the_papers_ubar() -> None:
    # The paper's caps 5..55 below a threshold of 60 have mean log10(cap) = 1.39 (its ubar).
    levels = [CapLevel(c, 99.8 if c >= 60 else 16 + 1.4 * c, 0.1, 10) for c in CAPS]
    assert find_cap_threshold(levels, 1.0) == 60.0
    region = [c for c in CAPS if c < 60]
    assert_allclose(np.mean(np.log10(region)), 1.39, atol=5e-3)


def test_threshold_rule() -> None:
    lv = lambda ms: [CapLevel(float(10 * (i + 1)), m, 0.0, 1) for i, m in enumerate(ms)]  # noqa: E731
    assert find_cap_threshold(lv([10, 20, 30, 99.2, 99.5, 99.9])) == 40.0
    assert find_cap_threshold(lv([10, 20, 30, 40])) is None  # no plateau
    assert find_cap_threshold(lv([50, 50.2, 50.1])) == 10.0  # flat: threshold at the lowest cap
    with pytest.raises(TrainingError):
        find_cap_threshold(lv([1, 2]), 0.0)


# ------------------------------------------------------------------------------- CSV schema
def test_csv_round_trip_keeps_samples_and_metadata() -> None:
    s = model_sweep(PAPER, [5, 10, 20], noise_kpps=0.3, seed=4)
    sw = parse_sweep_csv(format_sweep_csv(s, {"hardware": "test rig", "date": "2024-05-01"}))
    assert sw.metadata["hardware"] == "test rig" and sw.metadata["schema"] == "xtc-sweep/1"
    assert len(sw) == len(s)
    assert_allclose([x.forwarded_pps for x in sw.samples], [x.forwarded_pps for x in s], atol=1e-3)
    assert [x.settling for x in sw.samples] == [x.settling for x in s]


HEADER = "offered_pps,cap_percent,sample_index,forwarded_pps,duration_s\n"


@pytest.mark.parametrize(
    "text, words",
    [
        ("offered_pps,cap_percent,forwarded_pps,duration_s\n100000,5,16000,1\n", ["missing column", "sample_index"]),
        (HEADER + "100000,5,0,lots,1\n", ["line 2", "forwarded_pps", "not a number"]),
        (HEADER + "100000,0,0,16000,1\n", ["outside 1..100"]),
        (HEADER + "100000,150,0,16000,1\n", ["outside 1..100"]),
        (HEADER + "100000,5,0,-3,1\n", ["negative"]),
        (HEADER + "100000,5,0,16000,0\n", ["duration_s"]),
        (HEADER + "100000,5,0,nan,1\n", ["not finite"]),
        (HEADER, ["no samples"]),
        ("", ["no header"]),
    ],
)
def test_bad_csv_is_refused_with_a_clear_error(text: str, words: list[str]) -> None:
    with pytest.raises(SweepError) as e:
        parse_sweep_csv(text)
    for w in words:
        assert w in str(e.value)


# ------------------------------------------------------------------------ unusable sweeps
def test_flat_sweep_is_refused() -> None:
    flat = [SweepSample(100000, c, i, 50000 + 10 * i, 1.0) for c in CAPS for i in range(5)]
    with pytest.raises(TrainingError, match="does not change with the cap"):
        fit_sweep(Sweep(tuple(flat)))


def test_too_few_caps_below_threshold_is_refused() -> None:
    # Offered rate so low that the VR saturates at cap 10: only cap 5 below the threshold.
    with pytest.raises(TrainingError, match="cap\\(s\\) below the cap threshold"):
        fit_sweep(_sweep(offered_pps=40_000.0))


def test_no_plateau_uses_all_caps_with_a_warning() -> None:
    fit = fit_sweep(_sweep(caps=[5.0, 10, 15, 20, 25, 30], noise_kpps=0.2))
    assert fit.cap_threshold_percent is None
    assert any("no plateau" in w for w in fit.warnings)
    assert fit.region_caps_percent == (5.0, 10, 15, 20, 25, 30)


def test_noisy_sweep_is_poor() -> None:
    fit = fit_sweep(_sweep(noise_kpps=25.0, seed=3, caps=CAPS[:10]), plateau_tol_kpps=1.0)
    assert fit.r_squared < 0.9 and fit.poor


# --------------------------------------------------------------------------------- design
def test_pi_with_paper_poles_on_paper_model_gives_paper_gains() -> None:
    d = design_pi(PAPER, PAPER_PI_POLES)
    assert_allclose([d.gains.kp, d.gains.ki], [-1.747e-3, 11.311e-3], rtol=1e-6)
    db = design_deadbeat(PAPER)
    assert_allclose([db.gains.kp, db.gains.ki], [1.452e-3, 14.419e-3], rtol=2e-3)
    assert db.settling_time_s == 1.0 and db.overshoot_percent < 1e-6


def test_margins_match_the_jury_conditions() -> None:
    # For gains (Kp, Ki) and a as fitted, z^2 + c1 z + c0 is stable iff 1 + c1 + c0 > 0,
    # 1 - c1 + c0 > 0 and |c0| < 1; linear in b, so the largest b is the first bound crossed.
    g = PAPER_MODEL.pi
    a, b = PAPER.a, PAPER.b_kpps_per_decade
    bounds = [(2 + 2 * a) / (2 * g.kp + g.ki), (1 - a) / -g.kp]  # 1-c1+c0 = 0 and c0 = 1 (kp < 0)
    m = mismatch_margins(PAPER, g)
    assert_allclose(m.b_factor_max, min(bounds) / b, rtol=1e-6)
    assert m.b_factor_min == 0.0
    assert is_stable(PAPER, g, 1.0, 0.999 * m.b_factor_max)
    assert not is_stable(PAPER, g, 1.0, 1.001 * m.b_factor_max)
    grid = stability_grid(PAPER, g, [1.0], [0.5 * m.b_factor_max, 2 * m.b_factor_max])
    assert grid[:, 0].tolist() == [True, False]


@pytest.mark.parametrize("text, ok", [("0.5,0.6", True), ("0.24+0.38j", True), ("1.2,0.1", False),
                                      ("0.3+0.2j,0.3+0.2j", False), ("x", False), ("0.1", False)])
def test_parse_poles(text: str, ok: bool) -> None:
    if ok:
        assert len(parse_poles(text)) == 2
    else:
        with pytest.raises(TrainingError):
            parse_poles(text)


def test_cap_min_on_paper_table1() -> None:
    caps = [5, 10, 15, 20, 25, 30, 35, 40, 45, 50]
    kpps = [16, 32, 50, 65, 77, 85, 91, 94, 96, 98]
    lv = [CapLevel(float(c), float(k), 0.0, 1) for c, k in zip(caps, kpps)]
    ch = choose_cap_min(lv, 100_000, PAPER)
    assert ch.method == "extrapolated" and ch.cap_min_percent == 4.0  # 10 kp/s at about 3.4 %
    ch = choose_cap_min(lv, 100_000, PAPER, useful_fraction=0.4)  # 40 kp/s between caps 10 and 15
    assert ch.method == "interpolated" and 10 < ch.raw_cap_percent < 15 and ch.cap_min_percent == 12.0


# ------------------------------------------------------------------------ collect (sim) + CLI
def test_sim_sweep_through_the_simulated_host() -> None:
    from xtc_lab.sim.train import sweep_target

    target = sweep_target(seed=2)
    host = target.host
    before, original = host.read_cap("vr1"), host.snapshot("vr1")
    plan = SweepPlan(parse_caps("5:100:5"), (100_000.0,), samples_per_cap=5, settle_samples=2)
    samples = run_sweep(plan, host, "vr1", target.offered, clock=target.clock, sleep=target.sleep)
    assert len(samples) == plan.total_samples
    assert host.read_cap("vr1") == before and host.snapshot("vr1") == original  # the original is given back
    assert target.clock() == pytest.approx(plan.total_samples * plan.period_s)  # the sweep ran on the host's clock
    fit = fit_sweep(Sweep(tuple(samples)))
    assert 45 <= (fit.cap_threshold_percent or 0) <= 70
    assert 0 < fit.model.a < 0.6 and fit.r_squared > 0.95


def test_cli_all_on_sim_writes_model_report_and_plots(tmp_path: Path) -> None:
    rc = main(["all", "--backend", "sim", "--offered-pps", "50000,100000", "--samples", "5", "--quiet",
               "--out-dir", str(tmp_path), "--date", "2024-05-01", "--name", "sim-test"])
    assert rc == 0
    mf = load_model(tmp_path / "model.toml")
    assert mf.name == "sim-test" and mf.fitted_on["date"] == "2024-05-01" and mf.fitted_on["samples"] == 2 * 20 * (5 + 2)
    assert len(mf.fitted_on["sha256"]) == 64
    assert set(mf.extra["operating_points"]) == {"offered_50000_pps", "offered_100000_pps"}
    assert mf.pi is not None and mf.deadbeat is not None and 1 <= mf.caps.cap_min_percent <= 10
    for f in ("report.md", "throughput-vs-cap.png", "residuals.png", "step-response.png", "stability-region.png"):
        assert (tmp_path / f).stat().st_size > 0
    assert "R^2" in (tmp_path / "report.md").read_text()


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "sweep.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text", [
    "offered_pps,cap_percent,forwarded_pps,duration_s\n1,5,1,1\n",
    HEADER + "100000,5,0,abc,1\n",
    HEADER + "100000,101,0,5000,1\n",
])
def test_cli_design_refuses_bad_csv_and_writes_nothing(tmp_path: Path, text: str, capsys) -> None:
    out = tmp_path / "model.toml"
    assert main(["design", str(_write(tmp_path, text)), "--out", str(out)]) == EXIT_ERROR
    assert not out.exists()
    assert "error:" in capsys.readouterr().err


def test_cli_design_refuses_flat_and_short_sweeps(tmp_path: Path) -> None:
    out = tmp_path / "model.toml"
    flat = [SweepSample(100000, c, i, 50000.0, 1.0) for c in CAPS for i in range(5)]
    assert main(["design", str(_write(tmp_path, format_sweep_csv(flat))), "--out", str(out)]) == EXIT_ERROR
    short = model_sweep(PAPER, CAPS, offered_pps=40_000.0)
    assert main(["design", str(_write(tmp_path, format_sweep_csv(short))), "--out", str(out)]) == EXIT_ERROR
    assert not out.exists()


def test_cli_poor_fit_needs_the_flag(tmp_path: Path) -> None:
    out = tmp_path / "model.toml"
    csv = _write(tmp_path, format_sweep_csv(model_sweep(PAPER, CAPS[:10], noise_kpps=25.0, seed=3)))
    assert main(["design", str(csv), "--out", str(out)]) == EXIT_POOR_FIT
    assert not out.exists()
    assert main(["design", str(csv), "--out", str(out), "--accept-poor-fit"]) == 0
    assert load_model(out).r_squared < 0.9


def test_cli_redesign_of_a_model_file(tmp_path: Path) -> None:
    out = tmp_path / "re.toml"
    from xtc.models import PAPER_MODEL_PATH

    assert main(["design", str(PAPER_MODEL_PATH), "--out", str(out), "--poles", "0.5,0.5"]) == 0
    mf = load_model(out)
    from xtc.control.design import closed_loop_poles

    assert_allclose(closed_loop_poles(mf.model, mf.pi), [0.5, 0.5], atol=1e-6)


# ------------------------------------------------- real-host sweep logic (fake host, its own clock)
class _FakeQuotaHost:
    """A quota host as the real one behaves: caps rounded to whole microseconds of a 50 ms period
    (at least 1000 us), a fixed packet rate per percent of CPU, the original restored exactly from
    its snapshot.  Its counters follow its own clock, as the simulated host's do."""

    name = "fake-quota"
    counter_bits = 64

    def __init__(self, offered_pps: float, pps_per_percent: float = 1900.0, period_us: int = 50_000) -> None:
        from xtc_lab.sim.host import SimClock

        self.offered_pps, self.k, self.period_us = offered_pps, pps_per_percent, period_us
        self.quota_us = 40_000  # the original
        self.rx = self.tx = 0
        self.cpu_ns = 0
        self.clock = SimClock()
        self.t = 0.0
        self.restored_to: float | None = None

    def cap(self) -> float:
        return 100.0 * self.quota_us / self.period_us

    def _advance(self) -> None:
        dt, self.t = self.clock() - self.t, self.clock()
        self.tx += int(self.offered_pps * dt)
        self.rx += int(min(self.offered_pps, self.k * self.cap()) * dt)
        # CPU: what the forwarded packets need, at most the cap (percent of one CPU -> ns).
        self.cpu_ns += int(min(self.cap(), self.offered_pps / self.k) / 100.0 * dt * 1e9)

    def list_vrs(self) -> dict[str, tuple[str, ...]]:
        return {"vr": ("vif1.0", "vif1.1"), "other": ("vif2.0",)}

    def read_counters(self) -> dict[str, IfCounters]:
        self._advance()
        return {"vif1.0": IfCounters(self.rx, self.tx), "vif1.1": IfCounters(0, 0), "vif2.0": IfCounters(7, 7),
                "lo": IfCounters(5, 5)}

    def read_cpu_ns(self, vrs: Iterable[str]) -> dict[str, int]:
        self._advance()
        return {vr: self.cpu_ns for vr in vrs if vr == "vr"}

    def read_cap(self, vr: str) -> float:
        return self.cap()

    def apply_cap(self, vr: str, cap_percent: float) -> float:
        self._advance()
        self.quota_us = max(1000, round(cap_percent / 100 * self.period_us))
        return self.cap()

    def snapshot(self, vr: str) -> dict:
        return {"backend": self.name, "target": vr, "params": {"period_us": self.period_us, "quota_us": self.quota_us}}

    def restore_cap(self, vr: str, cap_percent: float | None, original: dict | None = None) -> None:
        assert original is not None and original["target"] == vr  # the sweep hands back its snapshot
        self.quota_us = original["params"]["quota_us"]
        self.restored_to = self.cap()

    def close(self) -> None:
        pass


def test_real_host_sweep_records_the_cap_read_back_and_the_offered_rate() -> None:
    host = _FakeQuotaHost(100_000.0)
    plan = SweepPlan((1.0, 1.5, 10.0), (100_000.0,), samples_per_cap=2, settle_samples=1)
    samples = run_sweep(plan, host, "vr", min_offered_fraction=0.1, clock=host.clock, sleep=host.clock.advance)
    # 1 % of a 50 ms period is 500 us, raised to the 1000 us minimum: 2 % is in force, and so for 1.5 %.
    assert [s.cap_percent for s in samples] == [2.0] * 6 + [10.0] * 3
    assert_allclose([s.forwarded_pps for s in samples], [3800.0] * 6 + [19000.0] * 3)
    assert_allclose([s.measured_offered_pps for s in samples], 100_000.0)
    assert host.restored_to == 80.0
    text = format_sweep_csv(samples)
    assert "measured_offered_pps" in text.splitlines()[1]
    back = parse_sweep_csv(text)
    assert_allclose(back.arrays()["measured_offered_pps"], 100_000.0)


def test_sweep_without_traffic_stops_after_the_first_sample_and_restores() -> None:
    host = _FakeQuotaHost(0.0)
    plan = SweepPlan((5.0, 10.0), (100_000.0,), samples_per_cap=5, settle_samples=1)
    with pytest.raises(TrainingError, match="is the traffic running"):
        run_sweep(plan, host, "vr", min_offered_fraction=0.1, clock=host.clock, sleep=host.clock.advance)
    assert host.clock() == 1.0 and host.restored_to == 80.0
    other = _FakeQuotaHost(0.0)
    assert len(run_sweep(plan, other, "vr", clock=other.clock, sleep=other.clock.advance)) == 12  # no check asked for


def test_csv_without_measured_offered_rate_omits_the_column() -> None:
    s = model_sweep(PAPER, [5.0, 10.0], samples_per_cap=2)
    text = format_sweep_csv(s)
    assert "measured_offered_pps" not in text
    assert all(math.isnan(x) for x in parse_sweep_csv(text).arrays()["measured_offered_pps"])
    with pytest.raises(SweepError, match="negative"):
        parse_sweep_csv("offered_pps,cap_percent,sample_index,forwarded_pps,duration_s,measured_offered_pps\n"
                        "100000,5,0,3,1,-2\n")


def test_describe_hardware_is_pure() -> None:
    from xtc.training.hosts import describe_hardware

    cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
    assert describe_hardware(cpuinfo, 2, "6.1.0-18") == "2 CPUs (AMD EPYC 7B13), Linux 6.1.0-18"
    assert describe_hardware("", None, "6.1") == "unknown number of CPUs (unknown CPU model), Linux 6.1"


def _overshooting_sweep(overshoot: float) -> Sweep:
    """A static plant (a = 0) whose first sample after each cap step goes ``overshoot`` of the step past it."""
    out, t, prev = [], 0.0, None
    for cap in CAPS[:10]:
        level = PAPER.steady_state_kpps(cap) * 1e3
        for i in range(6):
            y = level + (overshoot * (level - prev) if i == 0 and prev is not None else 0.0)
            y += 50.0 * ((i * 7 + int(cap)) % 3 - 1)  # a little deterministic noise
            t += 1.0
            out.append(SweepSample(100_000.0, cap, i, y, 1.0, i < 1, t))
        prev = level
    return Sweep(tuple(out))


def test_steps_fit_takes_a_fast_plant_that_overshoots_as_a_equal_0() -> None:
    fit = fit_sweep(_overshooting_sweep(0.25))
    assert fit.model.a == 0.0 and any("past the new level" in w for w in fit.warnings)
    assert_allclose(fit.model.b_kpps_per_decade, PAPER.static_gain_kpps_per_decade, rtol=0.02)
    with pytest.raises(TrainingError, match="negative"):
        fit_sweep(_overshooting_sweep(0.8))  # far past it: not a first-order plant


def test_caps_min_sets_the_model_floor_and_keeps_cap_min_recorded(tmp_path: Path) -> None:
    from xtc.training.pipeline import train_from_sweep

    sw = _sweep(noise_kpps=0.3, seed=4)
    t = train_from_sweep(sw, {}, cap_min_percent=1.0)
    assert t.model_file.caps.cap_min_percent == 1.0
    assert t.model_file.extra["cap_min"]["chosen_percent"] == t.cap_min.cap_min_percent > 1.0
    assert train_from_sweep(sw, {}).model_file.caps.cap_min_percent == t.cap_min.cap_min_percent
    with pytest.raises(TrainingError):
        train_from_sweep(sw, {}, cap_min_percent=0.5)
    csv = _write(tmp_path, format_sweep_csv(sw.samples))
    out = tmp_path / "m.toml"
    assert main(["design", str(csv), "--out", str(out), "--cap-min-percent", "1"]) == 0
    assert load_model(out).caps.cap_min_percent == 1.0
    assert main(["design", str(csv), "--out", str(tmp_path / "m2.toml"), "--caps-min", "2"]) == 0  # the older name
    assert load_model(tmp_path / "m2.toml").caps.cap_min_percent == 2.0


def test_cli_collect_refuses_an_unwritable_output_before_sweeping(tmp_path: Path, capsys) -> None:
    rc = main(["collect", "--backend", "sim", "--quiet", "--out", str(tmp_path / "no" / "such" / "dir.csv")])
    assert rc == EXIT_ERROR and "does not exist" in capsys.readouterr().err
    rc = main(["collect", "--backend", "libvirt", "--quiet", "--out", str(tmp_path / "s.csv")])
    assert rc == EXIT_ERROR and "--domain is required" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_cgroup_target_says_what_it_sweeps(tmp_path: Path) -> None:
    from xtc.training.hosts import cgroup_target

    (tmp_path / "cpu.max").write_text("max 100000\n")
    target = cgroup_target(str(tmp_path), ["vif9.0", "vif9.1"], "vr9")
    host = target.host
    md = target.metadata
    assert md == {"cgroup": str(tmp_path), "interfaces": "vif9.0,vif9.1", "setting_before": "cpu.max=max 100000"}
    assert host.list_vrs() == {"vr9": ("vif9.0", "vif9.1")}
    original = host.snapshot("vr9")
    assert host.apply_cap("vr9", 25.0) == 25.0 and (tmp_path / "cpu.max").read_text().split() == ["25000", "100000"]
    host.restore_cap("vr9", None, original)
    assert (tmp_path / "cpu.max").read_text().split() == ["max", "100000"]
    target.close()


def test_the_training_tool_does_not_import_the_testbed() -> None:
    import subprocess
    import sys

    code = ("import sys, xtc.training, xtc.training.cli, xtc.training.collect, xtc.training.hosts; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'xtc_lab'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_cli_sim_backend_without_the_testbed_says_how_to_get_it(tmp_path: Path, capsys, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "xtc_lab.sim.train", None)  # as if xtc-lab were not installed
    rc = main(["collect", "--backend", "sim", "--quiet", "--out", str(tmp_path / "s.csv")])
    assert rc == EXIT_ERROR and "part of the testbed (pip install xtc-lab)" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_cli_collect_on_libvirt_uses_the_daemons_backend_and_restores_exactly(tmp_path: Path, capsys,
                                                                              monkeypatch) -> None:
    """The libvirt path end to end on the fake libvirt: metadata from the backend and its snapshot,
    caps read back on the domain's own 50 ms period, the exact setting given back, also on a stop."""
    from fakes.libvirt import FakeHypervisor
    from xtc.host import libvirt_conn
    from xtc.training.sweep import read_sweep_csv
    from xtc_lab.sim.host import render_proc_net_dev

    hv = FakeHypervisor("lxc")
    hv.define("vr1", interfaces=["vif1.0", "vif1.1"], vcpu_period=50_000, vcpu_quota=40_000)
    hv.define("vr2", interfaces=["vif2.0", "vif2.1"])
    monkeypatch.setattr(libvirt_conn, "_default_open", hv.open)
    net_dev = tmp_path / "net-dev"  # counters that do not move: no traffic
    net_dev.write_text(render_proc_net_dev({"vif1.0": (0, 0), "vif1.1": (0, 0), "vif2.0": (0, 0), "vif2.1": (0, 0)}))
    args = ["collect", "--backend", "libvirt", "--domain", "vr1", "--caps", "5,10", "--samples", "1", "--settle", "0",
            "--period", "0.01", "--proc-net-dev", str(net_dev), "--quiet"]

    out = tmp_path / "stopped.csv"
    assert main([*args, "--out", str(out)]) == EXIT_ERROR
    assert "is the traffic running" in capsys.readouterr().err and not out.exists()
    assert hv.params("vr1")["vcpu_quota"] == 40_000 and hv.params("vr1")["vcpu_period"] == 50_000
    assert [w.params for w in hv.writes] == [{"vcpu_quota": 2_500}, {"vcpu_quota": 40_000}]  # 5 %, then back

    out = tmp_path / "sweep.csv"
    assert main([*args, "--no-traffic-check", "--out", str(out)]) == 0
    md = read_sweep_csv(out).metadata
    assert (md["domain"], md["cap_kind"], md["interfaces"]) == ("vr1", "lxc", "vif1.0,vif1.1")
    assert md["setting_before"] == "vcpu_period=50000 vcpu_quota=40000"
    assert [s.cap_percent for s in read_sweep_csv(out).samples] == [5.0, 10.0]
    assert hv.params("vr1")["vcpu_quota"] == 40_000 and hv.params("vr1")["vcpu_period"] == 50_000
    assert hv.params("vr2") == hv.domains["vr2"].defined_params  # only the one domain is touched
