"""Prometheus metrics of the daemon (prometheus_client, its own registry, HTTP port configurable).

Per VR (label ``vr``): ``xtc_vr_setpoint_pps``, ``xtc_vr_measured_pps``, ``xtc_vr_offered_pps``,
``xtc_vr_cap_percent``, ``xtc_vr_active`` (1 active, 0.5 paused, 0 inactive), ``xtc_vr_saturated``
(1: cap at its maximum below the setpoint, -1: at its minimum above it, 0: neither).
Daemon: ``xtc_requests_total{cmd,outcome}``, ``xtc_actuations_total{outcome}``,
``xtc_periods_total``, ``xtc_period_work_seconds`` (CPU-side work of one period),
``xtc_meter_errors_total``, ``xtc_reloads_total{outcome}``.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["DaemonMetrics"]

_STATE_VALUE = {"active": 1.0, "paused": 0.5, "inactive": 0.0}
_SATURATED_VALUE = {"cap_max": 1.0, "cap_min": -1.0}
_KEYS = ("setpoint_pps", "measured_pps", "offered_pps", "cap_percent")


class DaemonMetrics:
    """All metrics of one daemon, in a registry of their own (so tests can make several)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.setpoint = Gauge("xtc_vr_setpoint_pps", "Setpoint of the VR's instance, packets/s", ["vr"], registry=r)
        self.measured = Gauge("xtc_vr_measured_pps", "Packets/s the VR forwarded over the last period", ["vr"], registry=r)
        self.offered = Gauge("xtc_vr_offered_pps", "Packets/s offered to the VR over the last period", ["vr"], registry=r)
        self.cap = Gauge("xtc_vr_cap_percent", "CPU cap XTC holds for the VR, percent of one CPU", ["vr"], registry=r)
        self.active = Gauge("xtc_vr_active", "1 active, 0.5 paused, 0 inactive", ["vr"], registry=r)
        self.saturated = Gauge(
            "xtc_vr_saturated", "1: cap at its maximum below the setpoint, -1: at its minimum above it, 0: neither", ["vr"], registry=r
        )
        self.requests = Counter("xtc_requests", "Manager requests", ["cmd", "outcome"], registry=r)
        self.actuations = Counter("xtc_actuations", "Cap writes", ["outcome"], registry=r)
        self.periods = Counter("xtc_periods", "Control periods run", registry=r)
        self.meter_errors = Counter("xtc_meter_errors", "Failed meter reads", registry=r)
        self.reloads = Counter("xtc_reloads", "Configuration reloads", ["outcome"], registry=r)
        self.work = Histogram(
            "xtc_period_work_seconds",
            "Wall time of one control period's work (controllers, actuation, publishing), seconds",
            buckets=(1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0),
            registry=r,
        )
        self._vrs: set[str] = set()
        # Each VR's labelled gauges (setpoint, measured, offered, cap, active), looked up once.
        self._children: dict[str, tuple[Any, ...]] = {}
        # Each VR's gauge values as last set (NaN for None), so that unchanged ones are not set again.
        self._values: dict[str, list[float]] = {}

    def serve(self, address: str, port: int) -> int:
        """Start the HTTP endpoint in a thread; returns the port bound (for port 0)."""
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        return int(server.server_address[1])

    def update(self, samples: Iterable[Mapping[str, Any]]) -> None:
        """Set the per-VR gauges from the period's samples; drop VRs no longer listed."""
        seen = set()
        gauges = (self.setpoint, self.measured, self.offered, self.cap, self.active, self.saturated)
        for s in samples:
            vr = s["vr"]
            seen.add(vr)
            children = self._children.get(vr)
            if children is None:
                children = self._children[vr] = tuple(g.labels(vr) for g in gauges)
                last = self._values[vr] = [math.nan] * 6
                fresh = True
            else:
                last = self._values[vr]
                fresh = False
            for i, key in enumerate(_KEYS):
                v = s.get(key)
                x = float(v) if v is not None else math.nan
                # NaN != NaN: a NaN is set again every period (cheap, and rare).
                if fresh or x != last[i]:
                    children[i].set(x)
                    last[i] = x
            x = _STATE_VALUE.get(s["state"], 0.0)
            if fresh or x != last[4]:
                children[4].set(x)
                last[4] = x
            x = _SATURATED_VALUE.get(s.get("saturated") or "", 0.0)
            if fresh or x != last[5]:
                children[5].set(x)
                last[5] = x
        for vr in self._vrs - seen:
            self._children.pop(vr, None)
            self._values.pop(vr, None)
            for g in gauges:
                try:
                    g.remove(vr)
                except KeyError:
                    pass
        self._vrs = seen
