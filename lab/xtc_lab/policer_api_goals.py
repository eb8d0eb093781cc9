"""Issue 50's API goals beside what ``xtc policer bench --fleet`` measured (:func:`api_figures`,
:func:`api_goals`): pure arithmetic over the counters the bench reads around its API load."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["API_GOALS", "api_figures", "api_goals", "latency_by_kind", "latency_by_phase", "latency_p99_by_second"]


#: Issue 50's goals for the API, while the engine polices its fleet: policer CPU per request (ms), p99 (ms), at this rate.
API_GOALS = {"cpu_ms_per_request": 0.2, "p99_ms": 20.0, "rate_per_s": 2000.0}


def api_figures(requests: int, window: dict[str, float], database: bool = False) -> dict[str, Any]:
    """The API load's CPU figures from its timed window's counters (the bench's ``window``: the API
    process's and the engine processes' CPU seconds, the engine's router measurements, the seconds):
    CPU per request of the API's process alone and of all the policer's processes (the API's and the
    engine's: the engine polices meanwhile, and its CPU is not the API's), the engine's CPU per second
    and per measurement, its measurements per second, and (when counted) how long a second the API's event
    loop was runnable but waited for a CPU; with ``database`` (a PostgreSQL server on this
    machine), the server's CPU per request and per second as well."""
    if requests <= 0 or window["window_s"] <= 0:
        raise ValueError("api_figures: no requests or no window")
    api_s, engine_s, measured, w = window["api_cpu_s"], window["engine_cpu_s"], window["measured"], window["window_s"]
    out: dict[str, Any] = {
        "policer_api_cpu_ms_per_request": round(1000 * api_s / requests, 3),
        "policer_cpu_ms_per_request": round(1000 * (api_s + engine_s) / requests, 3),
        "engine_cpu_s_per_s": round(engine_s / w, 3),
        "engine_measured_per_s": round(measured / w, 1),
        "engine_cpu_ms_per_measurement": round(1000 * engine_s / measured, 3) if measured > 0 else None,
    }
    if "api_loop_runqueue_wait_s" in window:  # the API's event loop runnable, waiting for a CPU
        out["api_loop_runqueue_wait_ms_per_s"] = round(1000 * window["api_loop_runqueue_wait_s"] / w, 1)
    if database:
        out["database_cpu_ms_per_request"] = round(1000 * window["database_cpu_s"] / requests, 3)
        out["database_cpu_s_per_s"] = round(window["database_cpu_s"] / w, 3)
    return out


def api_goals(api: dict[str, Any], healthy_routers: int, period_s: float) -> dict[str, Any]:
    """Issue 50's two API goals (:data:`API_GOALS`) beside what the load measured (``api``: the bench's load's
    result with :func:`api_figures`'), and the engine's measurements per second beside its healthy
    routers' (each measured once a period): whether both goals were met while the engine policed."""
    served = sum(n for code, n in api["statuses"].items() if code.startswith("2"))
    return {
        "offered_per_s": api["offered_rate_per_s"],
        "served_2xx_per_s": round(served / api["duration_s"], 1),
        "errors": api["errors"],
        "p50_ms": api["latency_ms"]["p50"],
        "p99_ms": api["latency_ms"]["p99"],
        "p99_goal_ms": API_GOALS["p99_ms"],
        "policer_api_cpu_ms_per_request": api["policer_api_cpu_ms_per_request"],
        "policer_cpu_ms_per_request": api["policer_cpu_ms_per_request"],
        "cpu_goal_ms_per_request": API_GOALS["cpu_ms_per_request"],
        "engine_measured_per_s": api["engine_measured_per_s"],
        "engine_healthy_routers_per_s": round(healthy_routers / period_s, 1),
        "p99_met": api["latency_ms"]["p99"] <= API_GOALS["p99_ms"] and api["errors"] == 0
        and api["offered_rate_per_s"] >= API_GOALS["rate_per_s"],
        "api_cpu_met": api["policer_api_cpu_ms_per_request"] <= API_GOALS["cpu_ms_per_request"],
        "policer_cpu_met": api["policer_cpu_ms_per_request"] <= API_GOALS["cpu_ms_per_request"],
    }


def latency_by_phase(sent_s: Sequence[float], latency_ms: Sequence[float], period_s: float,
                     bins: int = 10) -> list[dict[str, Any]]:
    """The requests' latency by where in the engine's period each was sent: ``sent_s`` on
    ``CLOCK_MONOTONIC`` (``time.monotonic()``), on which one engine starts its cycles at phase 0 modulo
    ``period_s`` (:meth:`xtc.policer.engine.Engine.cycle_phase_s`).  Per bin of ``period_s / bins``: its
    phase (ms), its requests, their p50 and p99, and of the requests at or above the overall p99 the share
    sent in it (1/``bins`` each if the tail did not depend on the phase)."""
    if period_s <= 0 or bins < 1:
        raise ValueError("latency_by_phase: the period and the bins must be positive")
    if len(sent_s) == 0:
        return []
    lat = np.asarray(latency_ms, float)
    k = np.minimum((np.asarray(sent_s, float) % period_s / period_s * bins).astype(int), bins - 1)
    slow = lat >= np.percentile(lat, 99)
    step_ms = 1000 * period_s / bins
    out = []
    for b in range(bins):
        m = k == b
        out.append({"phase_ms": [round(b * step_ms), round((b + 1) * step_ms)], "n": int(m.sum()),
                    "p50_ms": round(float(np.percentile(lat[m], 50)), 2) if m.any() else None,
                    "p99_ms": round(float(np.percentile(lat[m], 99)), 2) if m.any() else None,
                    "share_of_slowest_1pct": round(float((m & slow).sum() / slow.sum()), 3)})
    return out


def latency_p99_by_second(sent_s: Sequence[float], latency_ms: Sequence[float]) -> list[dict[str, Any]]:
    """Each second of the load's (from its first request): its requests and their p99 latency (ms)."""
    if len(sent_s) == 0:
        return []
    t = np.asarray(sent_s, float)
    lat = np.asarray(latency_ms, float)
    sec = ((t - t.min()) // 1.0).astype(int)
    return [{"second": int(s), "n": int((sec == s).sum()), "p99_ms": round(float(np.percentile(lat[sec == s], 99)), 2)}
            for s in np.unique(sec)]


def latency_by_kind(methods: Sequence[str], latency_ms: Sequence[float]) -> dict[str, dict[str, Any]]:
    """The latency of the reads (``GET``) and of the writes (every other method) apart: their requests, p50,
    p99, longest, and of the requests at or above the overall p99 the share that are of the kind."""
    if len(methods) == 0:
        return {}
    lat = np.asarray(latency_ms, float)
    read = np.asarray([m == "GET" for m in methods])
    slow = lat >= np.percentile(lat, 99)
    out = {}
    for kind, m in (("read", read), ("write", ~read)):
        if m.any():
            out[kind] = {"n": int(m.sum()), "p50_ms": round(float(np.percentile(lat[m], 50)), 2),
                         "p99_ms": round(float(np.percentile(lat[m], 99)), 2), "max_ms": round(float(lat[m].max()), 2),
                         "share_of_slowest_1pct": round(float((m & slow).sum() / slow.sum()), 3)}
    return out
