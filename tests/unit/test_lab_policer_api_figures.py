"""The API bench's arithmetic under a fleet (xtc_lab.policer_api_goals.api_figures, api_goals): CPU per
request of the API's process and of all the policer's processes kept apart, the engine's rate."""

from __future__ import annotations

import pytest

from xtc_lab.policer_api_goals import API_GOALS, api_figures, api_goals

WINDOW = {"window_s": 10.0, "api_cpu_s": 3.0, "engine_cpu_s": 1.5, "measured": 9000, "database_cpu_s": 0.0}


def test_cpu_per_request_of_the_api_and_of_all_the_policers_processes_are_apart() -> None:
    f = api_figures(20000, WINDOW)
    assert f["policer_api_cpu_ms_per_request"] == 0.15  # 3 s / 20,000
    assert f["policer_cpu_ms_per_request"] == 0.225  # (3 + 1.5) s / 20,000: the engine's CPU counted too
    assert f["engine_cpu_s_per_s"] == 0.15 and f["engine_measured_per_s"] == 900.0
    assert f["engine_cpu_ms_per_measurement"] == pytest.approx(0.167)
    assert "database_cpu_ms_per_request" not in f
    assert "api_loop_runqueue_wait_ms_per_s" not in f
    assert api_figures(20000, {**WINDOW, "api_loop_runqueue_wait_s": 0.25})["api_loop_runqueue_wait_ms_per_s"] == 25.0


def test_a_database_server_is_counted_apart_and_an_idle_engine_has_no_cost_per_measurement() -> None:
    f = api_figures(1000, {**WINDOW, "measured": 0, "database_cpu_s": 0.5}, database=True)
    assert f["database_cpu_ms_per_request"] == 0.5 and f["database_cpu_s_per_s"] == 0.05
    assert f["engine_cpu_ms_per_measurement"] is None and f["policer_cpu_ms_per_request"] == 4.5


def test_no_requests_or_no_window_is_refused() -> None:
    with pytest.raises(ValueError, match="no requests"):
        api_figures(0, WINDOW)
    with pytest.raises(ValueError, match="no window"):
        api_figures(10, {**WINDOW, "window_s": 0.0})


def _api(p99_ms: float, errors: int = 0, rate: float = 2000.0, **cpu: float) -> dict:
    return {"offered_rate_per_s": rate, "duration_s": 10.0, "errors": errors,
            "statuses": {"200": 16000, "201": 2000, "404": errors}, "latency_ms": {"p50": 1.5, "p99": p99_ms},
            "policer_api_cpu_ms_per_request": cpu.get("api", 0.15), "policer_cpu_ms_per_request": cpu.get("all", 0.25),
            "engine_measured_per_s": 899.0}


def test_the_goals_are_met_only_at_the_goals_rate_without_errors() -> None:
    g = api_goals(_api(12.0), healthy_routers=900, period_s=1.0)
    assert g["served_2xx_per_s"] == 1800.0 and g["engine_healthy_routers_per_s"] == 900.0
    assert g["p99_met"] and g["api_cpu_met"] and not g["policer_cpu_met"]  # 0.15 <= 0.2 < 0.25
    assert g["p99_goal_ms"] == API_GOALS["p99_ms"] == 20.0 and g["cpu_goal_ms_per_request"] == 0.2
    assert not api_goals(_api(25.0), 900, 1.0)["p99_met"]
    assert not api_goals(_api(12.0, errors=3), 900, 1.0)["p99_met"]  # an error is not served
    assert not api_goals(_api(12.0, rate=1000.0), 900, 1.0)["p99_met"]  # below the goal's rate proves nothing
    assert api_goals(_api(12.0, api=0.2, all=0.2), 900, 2.0)["policer_cpu_met"]  # at the bound: met
    assert api_goals(_api(12.0), 900, 2.0)["engine_healthy_routers_per_s"] == 450.0


def test_the_mix_weighs_each_kind_by_its_share_of_the_bench() -> None:
    from xtc_lab.policer_api_cpu import MIX, mix_ms_per_request

    assert sum(MIX.values()) == pytest.approx(1.0)
    assert mix_ms_per_request({k: 0.1 for k in MIX}) == 0.1
    reads_double = {k: (0.2 if k.startswith("GET") else 0.1) for k in MIX}
    assert mix_ms_per_request(reads_double) == 0.18  # reads are 80 % of the mix
    with pytest.raises(ValueError, match="not measured: GET /vrs"):
        mix_ms_per_request({k: 0.1 for k in MIX if k != "GET /vrs?limit=100"})


def test_the_latency_by_phase_of_the_engines_period_and_by_second() -> None:
    """Requests sent 0-0.1 s into each period (the engine's cycle starts at phase 0 of CLOCK_MONOTONIC) are
    slow, the others fast: the phase's bins say where, each second's p99 when."""
    from xtc_lab.policer_api_goals import latency_by_phase, latency_p99_by_second

    sent = [100.005 + i / 100 for i in range(300)]  # 3 s, 100 a second, from phase 0 (off the bins' edges)
    lat = [50.0 if (s % 1.0) < 0.1 else 2.0 for s in sent]
    bins = latency_by_phase(sent, lat, period_s=1.0, bins=10)
    assert [b["phase_ms"] for b in bins[:2]] == [[0, 100], [100, 200]] and len(bins) == 10
    assert bins[0]["n"] == 30 and bins[0]["p99_ms"] == 50.0 and bins[0]["share_of_slowest_1pct"] == 1.0
    assert all(b["p99_ms"] == 2.0 and b["share_of_slowest_1pct"] == 0.0 for b in bins[1:])
    assert sum(b["n"] for b in bins) == 300
    by_s = latency_p99_by_second(sent, lat)
    assert [s["second"] for s in by_s] == [0, 1, 2] and all(s["n"] == 100 and s["p99_ms"] == 50.0 for s in by_s)
    with pytest.raises(ValueError, match="period"):
        latency_by_phase(sent, lat, period_s=0.0)
    assert latency_by_phase([], [], 1.0) == [] and latency_p99_by_second([], []) == []


def test_the_latency_of_reads_and_writes_apart() -> None:
    from xtc_lab.policer_api_goals import latency_by_kind

    kinds = ["GET"] * 98 + ["PUT", "POST"]
    lat = [1.0] * 98 + [40.0, 60.0]
    got = latency_by_kind(kinds, lat)
    assert got["read"] == {"n": 98, "p50_ms": 1.0, "p99_ms": 1.0, "max_ms": 1.0, "share_of_slowest_1pct": 0.0}
    assert got["write"]["n"] == 2 and got["write"]["max_ms"] == 60.0 and got["write"]["share_of_slowest_1pct"] == 1.0
    assert latency_by_kind([], []) == {}
