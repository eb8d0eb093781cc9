"""The control benchmark: its metric functions on hand-made series, and a tiny run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from xtc_lab.bench.control_bench import ScenarioTimes, bench_table, run_control_bench
from xtc_lab.sim.metrics import (
    confidence_half_width,
    lowest_held_setpoint,
    periods_to_stay_within,
    recovery_periods,
    relative_error,
    relative_rmse,
    settling_periods,
)


# ----- metric functions on hand-made series -----------------------------------------------------
def test_relative_rmse_is_std_over_mean() -> None:
    assert relative_rmse([10.0, 10.0, 10.0]) == 0.0
    # Mean 10, deviations +-2 -> RMSE 2 -> 0.2.
    assert relative_rmse([8.0, 12.0, 8.0, 12.0]) == pytest.approx(0.2)
    assert math.isnan(relative_rmse([0.0, 0.0]))
    with pytest.raises(ValueError):
        relative_rmse([])
    with pytest.raises(ValueError):
        relative_rmse([1.0, float("nan")])


def test_relative_error() -> None:
    assert relative_error([9.0, 11.0], 10.0) == 0.0
    assert relative_error([12.0, 12.0], 10.0) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        relative_error([1.0], 0.0)


def test_settling_counts_periods_until_it_stays_in_band() -> None:
    r = 100.0
    # In the band from the first period: 1.
    assert settling_periods([95.0, 101.0, 99.0], r) == 1
    # Out for two periods, then in for good: 3.
    assert settling_periods([50.0, 80.0, 91.0, 105.0, 100.0], r) == 3
    # Enters, leaves again, then stays: counts from the last entry.
    assert settling_periods([95.0, 80.0, 95.0, 99.0], r) == 3
    # Ends outside: never.
    assert settling_periods([95.0, 99.0, 120.0], r) is None
    # Band edges are inside.
    assert settling_periods([110.0, 90.0], r, band=0.10) == 1


def test_recovery_is_zero_when_never_disturbed() -> None:
    r = 50.0
    assert recovery_periods([50.0, 49.0, 51.0], r) == 0
    assert recovery_periods([45.0, 46.0, 48.0, 50.0], r) == 2
    assert recovery_periods([45.0, 46.0, 45.0], r) is None
    assert periods_to_stay_within([1.0, 1.0], 1.0, 0.01) == 0


def test_lowest_held_setpoint() -> None:
    sps = [5.0, 10.0, 20.0, 40.0, 80.0]
    # 10 fails, everything from 20 on holds.
    assert lowest_held_setpoint(sps, [5.0, 14.0, 20.5, 39.0, 80.0], 0.05) == 20.0
    # All hold.
    assert lowest_held_setpoint(sps, sps, 0.05) == 5.0
    # A failure at the top: nothing is held "from there on".
    assert lowest_held_setpoint(sps, [5.0, 10.0, 20.0, 40.0, 70.0], 0.05) is None
    # Order of the grid does not matter.
    assert lowest_held_setpoint(sps[::-1], [80.0, 39.0, 20.5, 14.0, 5.0], 0.05) == 20.0
    with pytest.raises(ValueError):
        lowest_held_setpoint([1.0, 2.0], [1.0])


def test_confidence_half_width() -> None:
    assert confidence_half_width([3.0]) == 0.0
    # Two samples 0 and 2: std 1.414, t(0.975, 1) = 12.706 -> 12.706 * 1.414 / 1.414.
    assert confidence_half_width([0.0, 2.0]) == pytest.approx(12.706, rel=1e-3)


# ----- a tiny benchmark run ----------------------------------------------------------------------
TINY = ScenarioTimes(steady_from_s=20, disturb_at_s=40, end_s=60)


@pytest.fixture(scope="module")
def tiny() -> dict:
    return run_control_bench(
        seed=5, grid_kpps=(10.0, 30.0, 60.0), controllers=("deadbeat", "fixed", "xtc"), plants=("nominal", "hog15"), times=TINY
    )


def test_tiny_bench_has_every_metric(tiny: dict) -> None:
    assert tiny["controllers"] == ["deadbeat", "fixed", "xtc"]
    for ctl in tiny["controllers"]:
        for plant in ("nominal", "hog15"):
            r = tiny["results"][ctl][plant]
            for key in (
                "lowest_held_kpps",
                "worst_settling_periods",
                "worst_steady_error",
                "rel_rmse",
                "rel_rmse_fixed",
                "rel_rmse_vs_fixed",
                "rel_rmse_exact_cap",
                "worst_hog_recovery_periods",
            ):
                assert key in r
            assert len(r["per_setpoint"]["mean_kpps"]) == 3
    assert tiny["results"]["fixed"]["nominal"]["rel_rmse_vs_fixed"] == pytest.approx(1.0)
    table = bench_table(tiny)
    assert len([ln for ln in table.splitlines() if ln.startswith(("deadbeat", "fixed", "xtc"))]) == 6
    json.dumps(tiny)  # JSON-able as is (NaN allowed by json)


def test_tiny_bench_separates_feedback_from_open_loop(tiny: dict) -> None:
    # Fixed Cap cannot reject the hog; the feedback controller holds the rate on the hog plant.
    fixed = tiny["results"]["fixed"]["hog15"]
    xtc = tiny["results"]["xtc"]["hog15"]
    assert fixed["worst_steady_error"] > 0.10
    assert xtc["worst_steady_error"] < 0.05
    assert fixed["lowest_held_kpps"] is None or fixed["lowest_held_kpps"] > 30.0
    # On the nominal plant Fixed Cap is (by construction) close to the setpoint.
    assert tiny["results"]["fixed"]["nominal"]["worst_steady_error"] < 0.06


def test_bench_is_deterministic() -> None:
    kw = dict(seed=9, grid_kpps=(20.0, 50.0), controllers=("pi",), plants=("nominal",), times=TINY)
    a = run_control_bench(**kw)  # type: ignore[arg-type]
    b = run_control_bench(**kw)  # type: ignore[arg-type]
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    c = run_control_bench(**{**kw, "seed": 10})  # type: ignore[arg-type]
    assert json.dumps(a, sort_keys=True) != json.dumps(c, sort_keys=True)


def test_bench_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="grid"):
        run_control_bench(grid_kpps=(0.0, 50.0), times=TINY)
    with pytest.raises(ValueError, match="plant"):
        run_control_bench(grid_kpps=(50.0,), plants=("mars",), times=TINY)
    with pytest.raises(ValueError, match="controller"):
        run_control_bench(grid_kpps=(50.0,), controllers=("magic",), times=TINY)


def test_cli_json(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    from xtc.cli import main

    rc = main(
        ["bench", "control", "--json", "--quiet", "--no-plot", "--grid-kpps", "40", "--controllers", "fixed", "--plants", "nominal", "--out", str(tmp_path)]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["grid_kpps"] == [40.0]
    assert np.isfinite(data["results"]["fixed"]["nominal"]["rel_rmse"])
    rc = main(["bench", "control", "--quiet", "--plants", "mars", "--out", str(tmp_path)])
    assert rc == 2


def test_exact_cap_is_the_noise_floor_fixed_cap_goes_under_only_off_its_setpoint() -> None:
    """On 2x faster hardware Fixed Cap forwards about twice the setpoint, where the plant's drop
    noise is smaller: its relative RMSE is under the open loop's at the exact cap, which the
    controller that holds the setpoint is not (seeds 1-3 of the full bench: exact cap 0.042-0.045,
    XTC 0.047-0.051, Fixed Cap 0.021-0.023)."""
    r = run_control_bench(seed=1, grid_kpps=(20.0, 40.0, 60.0, 80.0), controllers=("fixed", "xtc"), plants=("fast2x",),
                          times=TINY)["results"]
    exact = r["xtc"]["fast2x"]["rel_rmse_exact_cap"]
    assert r["fixed"]["fast2x"]["rel_rmse_exact_cap"] == exact
    assert r["fixed"]["fast2x"]["worst_steady_error"] > 0.5  # the wrong rate
    assert r["fixed"]["fast2x"]["rel_rmse"] < 0.7 * exact
    assert r["xtc"]["fast2x"]["worst_steady_error"] < 0.05
    assert r["xtc"]["fast2x"]["rel_rmse"] > 0.9 * exact
