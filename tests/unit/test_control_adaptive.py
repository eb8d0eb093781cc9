"""A wrong elasticity, the dithered mean on integer caps and the saturated flag (issue 12)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import xtc.models
from xtc.control import XtcTuning, make_controller
from xtc.daemon.core import SATURATED_AFTER_PERIODS
from xtc.daemon.ctl import format_table
from xtc_lab.sim.plant import VRConfig, udp
from xtc_lab.bench.control_bench import BENCH_PLANTS, OFFERED_PPS, _plant, _reachable
from xtc_lab.sim.run import run_loop


@pytest.mark.parametrize("ratio", [0.5, 0.6, 0.8, 1.0, 2.0, 4.0])
def test_degradation_with_a_wrong_elasticity(ratio: float) -> None:
    """How the loop degrades when the elasticity used is wrong (estimate / true = ``ratio``).

    On a plant ``y = k cap^e`` with no lag, the step divides by ``e_hat = ratio * e``: an
    over-estimate only slows the loop, an under-estimate down to half speeds it up and overshoots,
    but it converges while ``1 / ratio < 2``.
    """
    model = xtc.models.PAPER_MODEL
    e = 0.4
    ctl = make_controller(model, tuning=XtcTuning(design_lag=0.0, dead_zone_fraction=0.0, fine_band_fraction=0.0, noise_band_sigmas=0.0))
    ctl.start(100.0)
    r = 60_000.0
    errs = []
    cap = 100.0
    for _ in range(40):
        y = 3267.0 * 30 * (cap / 30) ** e
        # Feed the controller as if its elasticity were e_hat: scale the error it sees.
        y_seen = r * (y / r) ** (1.0 / (ratio * e))
        cap = ctl.step(y_seen, r)
        ctl.applied(cap)
        errs.append(abs(math.log10(y / r)))
    if ratio <= 0.5:
        # Loop gain 2: the error alternates and does not decay.
        assert errs[-1] > 0.5 * errs[1]
        return
    assert errs[-1] < 1e-3
    if ratio < 1.0:
        assert max(errs[1:]) > 0  # overshoots (the error changes sign), yet converges
    if ratio >= 1.0:
        # Monotone: no overshoot, slower the larger the over-estimate.
        assert all(b <= a + 1e-12 for a, b in zip(errs, errs[1:]))


def _integer_hold(bp_name: str, sp_kpps: list[float], adaptive: bool = False) -> np.ndarray:
    bp = BENCH_PLANTS[bp_name]
    sps = np.asarray(sp_kpps) * 1000.0
    tr = run_loop(_plant(bp, sps.size, seed=3), lambda: make_controller(xtc.models.PAPER_MODEL), sps, 120.0,
                  cap_step_percent=1.0, warmup_s=5.0)
    return tr.forwarded_pps[40:].mean(axis=0) / sps - 1.0


def test_integer_caps_mean_within_3_percent_at_every_reachable_setpoint() -> None:
    """Whole-percent caps, the daemon's loop: every reachable setpoint's mean within 3%.

    Fails (4-13% low at 3.5-5 kp/s) when a period whose command is not written does not tell the
    controller the cap in force: its carry freezes while the command sits at cap 1."""
    grid = np.array([3.5, 4, 4.5, 5, 6, 7, 8, 10, 12, 15, 20, 30, 50, 70, 85, 95])
    for name in ("xen-int", "xen-grad"):
        reach = _reachable(BENCH_PLANTS[name], grid * 1000.0)
        err = _integer_hold(name, list(grid[reach]))
        assert np.all(np.abs(err) <= 0.03), (name, dict(zip(grid[reach], np.round(err, 4))))


def test_saturated_flag_in_describe_and_ctl_status() -> None:
    from xtc_lab.sim.host import SimClock, SimHost
    from xtc_lab.sim.plant import Dom0Config, PlantConfig
    from xtc.daemon.api import Instance, Request
    from xtc.daemon.core import DaemonCore
    from xtc.daemon.loop import ControlLoop

    vr = VRConfig(traffic=udp(OFFERED_PPS), initial_cap_percent=100.0, speed_factor=0.2, noise_rel=0.0, noise_drop_rel=0.0)
    plant = PlantConfig(vrs=(vr, VRConfig(traffic=udp(OFFERED_PPS), speed_factor=4.0, noise_rel=0.0, noise_drop_rel=0.0)),
                        dom0s=(Dom0Config(capacity_pps=1e9),) * 2)
    plant = PlantConfig(vrs=(vr, plant.vrs[1].__class__(**{**plant.vrs[1].__dict__, "dom0": 1})), dom0s=plant.dom0s)
    clock = SimClock()
    host = SimHost.for_plant(plant, clock=clock)
    core = DaemonCore(lambda: make_controller(xtc.models.PAPER_MODEL), max_setpoint_pps=1e9)
    loop = ControlLoop(core, host)
    host.advance()
    loop.period(clock())
    loop.handle(Request("activate", "vr1", 90_000.0), clock())  # slow hardware: cap 100 gives ~65 kp/s
    loop.handle(Request("activate", "vr2", 5_000.0), clock())  # fast hardware: cap 1 gives ~13 kp/s
    seen = []
    for _ in range(SATURATED_AFTER_PERIODS + 8):
        loop.period(clock.advance(1.0))
        seen.append((core.describe("vr1")["saturated"], core.describe("vr2")["saturated"]))
    assert seen[0] == (None, None)
    assert seen[-1] == ("cap_max", "cap_min")
    d = core.describe("vr1")
    Instance.model_validate({k: v for k, v in d.items()})
    assert "saturated at cap 100%" in format_table([d])
    loop.handle(Request("setpoint", "vr1", 30_000.0), clock())
    for _ in range(6):
        loop.period(clock.advance(1.0))
    assert core.describe("vr1")["saturated"] is None


def test_saturated_metric() -> None:
    from xtc.daemon.metrics import DaemonMetrics

    from xtc.daemon.api import SAMPLE_FIELDS

    m = DaemonMetrics()
    base = {"setpoint_pps": 1.0, "forwarded_pps": 1.0, "offered_pps": 1.0, "cap_percent": 100.0, "state": "active",
            "present": True, "original_cap_percent": None, "actuation_error": None}
    m.update([[{**base, "vr": vr, "saturated": sat}[k] for k in SAMPLE_FIELDS]
              for vr, sat in (("a", "cap_max"), ("b", "cap_min"), ("c", None))])
    got = {k: [s for s in ("cap_max", "cap_min", "cap_slack", "none")
               if m.registry.get_sample_value("xtc_vr_saturation", {"vr": k, "saturation": s}) == 1.0] for k in "abc"}
    assert got == {"a": ["cap_max"], "b": ["cap_min"], "c": ["none"]}
