"""Prometheus metrics of the daemon (prometheus_client, its own registry, HTTP port configurable).

Per VR (label ``vr``): ``xtc_vr_setpoint_pps``, ``xtc_vr_measured_pps``, ``xtc_vr_offered_pps``,
``xtc_vr_cap_percent``, ``xtc_vr_active`` (1 active, 0.5 paused, 0 inactive), ``xtc_vr_saturated``
(1: cap at its maximum below the setpoint, -1: at its minimum above it, 0: neither); NaN where the
value is unknown (e.g. no cap).
Daemon: ``xtc_requests_total{cmd,outcome}``, ``xtc_actuations_total{outcome}``,
``xtc_periods_total``, ``xtc_period_work_seconds`` (CPU-side work of one period),
``xtc_meter_errors_total``, ``xtc_reloads_total{outcome}``.

The per-VR gauges are not set every period: a collector turns sample rows into metrics when
Prometheus scrapes (typically every 15-60 s, against one period a second).  With
:attr:`DaemonMetrics.scrape_wait_s` above 0 (the daemon sets it while it serves the metrics) a
scrape asks for rows (:meth:`DaemonMetrics.rows_wanted`) and waits for the daemon to hand over the
next period's (:meth:`DaemonMetrics.update`, a reference, no copy), at most that long, then takes
the last rows it has; so the daemon builds rows only in periods that someone reads.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .api import SAMPLE_FIELDS

__all__ = ["DaemonMetrics"]

_STATE_VALUE = {"active": 1.0, "paused": 0.5, "inactive": 0.0}
_SATURATED_VALUE = {"cap_max": 1.0, "cap_min": -1.0, "cap_slack": 0.5}
_NAN = math.nan

#: (metric name, help, index of the row member it reads); then the two derived gauges.
_PER_VR: tuple[tuple[str, str, int], ...] = (
    ("xtc_vr_setpoint_pps", "Setpoint of the VR's instance, packets/s", SAMPLE_FIELDS.index("setpoint_pps")),
    ("xtc_vr_measured_pps", "Packets/s the VR forwarded over the last period", SAMPLE_FIELDS.index("measured_pps")),
    ("xtc_vr_offered_pps", "Packets/s offered to the VR over the last period", SAMPLE_FIELDS.index("offered_pps")),
    ("xtc_vr_cap_percent", "CPU cap XTC holds for the VR, percent of one CPU", SAMPLE_FIELDS.index("cap_percent")),
)
_VR = SAMPLE_FIELDS.index("vr")
_STATE = SAMPLE_FIELDS.index("state")
_SATURATED = SAMPLE_FIELDS.index("saturated")


class _VrCollector(Collector):
    """The per-VR gauges, read from the last period's rows at scrape time."""

    def __init__(self) -> None:
        self.rows: Sequence[Sequence[Any]] = ()
        self.lock = threading.Lock()
        self.fresh = threading.Condition(self.lock)
        self.generation = 0  # rows handed over so far
        self.wanted = False  # a scrape waits for the next rows
        self.wait_s = 0.0

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            if self.wait_s > 0:
                gen = self.generation
                self.wanted = True
                self.fresh.wait_for(lambda: self.generation != gen, timeout=self.wait_s)
            rows = self.rows
        families = [GaugeMetricFamily(name, doc, labels=["vr"]) for name, doc, _ in _PER_VR]
        active = GaugeMetricFamily("xtc_vr_active", "1 active, 0.5 paused, 0 inactive", labels=["vr"])
        saturated = GaugeMetricFamily(
            "xtc_vr_saturated", "1: cap at its maximum below the setpoint, -1: at its minimum above it, "
            "0.5: below the setpoint with a cap the VR does not use up (cap_slack), 0: none of these",
            labels=["vr"])
        for row in rows:
            labels = [row[_VR]]
            for fam, (_, _, i) in zip(families, _PER_VR):
                v = row[i]
                fam.add_metric(labels, _NAN if v is None else float(v))
            active.add_metric(labels, _STATE_VALUE.get(row[_STATE], 0.0))
            saturated.add_metric(labels, _SATURATED_VALUE.get(row[_SATURATED] or "", 0.0))
        yield from families
        yield active
        yield saturated

    def describe(self) -> Iterator[Metric]:
        # Names only (so the registry can check for duplicates without collecting).
        for name, doc, _ in _PER_VR:
            yield GaugeMetricFamily(name, doc, labels=["vr"])
        yield GaugeMetricFamily("xtc_vr_active", "", labels=["vr"])
        yield GaugeMetricFamily("xtc_vr_saturated", "", labels=["vr"])


class DaemonMetrics:
    """All metrics of one daemon, in a registry of their own (so tests can make several)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._vr = _VrCollector()
        r.register(self._vr)
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

    def serve(self, address: str, port: int) -> int:
        """Start the HTTP endpoint in a thread; returns the port bound (for port 0)."""
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        return int(server.server_address[1])

    @property
    def scrape_wait_s(self) -> float:
        """How long a scrape waits for fresh rows, seconds (0: it takes the last rows at once)."""
        return self._vr.wait_s

    @scrape_wait_s.setter
    def scrape_wait_s(self, seconds: float) -> None:
        with self._vr.lock:
            self._vr.wait_s = max(0.0, float(seconds))

    def rows_wanted(self) -> bool:
        """True while a scrape waits for rows (:meth:`update` answers it)."""
        return self._vr.wanted

    def update(self, rows: Sequence[Sequence[Any]]) -> None:
        """The per-VR gauges are now the VRs of ``rows`` (sample rows, :data:`~xtc.daemon.api.SAMPLE_FIELDS`).

        The rows are kept, not copied: the caller must not change them afterwards (the daemon
        builds new rows every time).  VRs not in ``rows`` have no gauges any more.  A scrape
        waiting for rows takes these.
        """
        vr = self._vr
        with vr.lock:
            vr.rows = rows
            vr.generation += 1
            vr.wanted = False
            vr.fresh.notify_all()
