"""Prometheus metrics of the daemon (prometheus_client, its own registry, HTTP port configurable).

Names, types and units follow Prometheus' conventions (docs/guide/monitoring.md lists them all):

Per VR (label ``vr``): counters ``xtc_vr_forwarded_packets_total`` and
``xtc_vr_offered_packets_total`` (``rate()`` of them is the VR's packet rate; counted every
period, from the meter's readings) and ``xtc_vr_cap_changes_total`` (caps written or restored); gauges ``xtc_vr_setpoint_pps`` and ``xtc_vr_cap_ratio`` (the
cap as a fraction of one CPU; no sample where there is none); state sets ``xtc_vr_state{state}``
(``active``, ``paused``, ``inactive``: 1 for the VR's state, 0 for the others) and
``xtc_vr_saturation{saturation}`` (``cap_max``, ``cap_min``, ``cap_slack``, ``none``).
Daemon: ``xtc_requests_total{cmd,outcome}``, ``xtc_cap_changes_total{outcome}`` (cap writes and
restores), ``xtc_periods_total``, ``xtc_period_work_seconds`` (histogram),
``xtc_meter_errors_total``, ``xtc_reloads_total{outcome}``; and in every XTC service,
:func:`xtc.service.metrics.add_standard_metrics`: ``process_*`` and ``xtc_build_info{service,version}``.

The per-VR gauges are not set every period: a collector turns sample rows into metrics when
Prometheus scrapes (typically every 15-60 s, against one period a second).  With
:attr:`DaemonMetrics.scrape_wait_s` above 0 (the daemon sets it while it serves the metrics) a
scrape asks for rows (:meth:`DaemonMetrics.rows_wanted`) and waits for the daemon to hand over the
next period's (:meth:`DaemonMetrics.update`, a reference, no copy), at most that long, then takes
the last rows it has; so the daemon builds rows only in periods that someone reads.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from xtc.service.metrics import ServiceMetrics, labelled_counter

from .api import SAMPLE_FIELDS

__all__ = ["DaemonMetrics", "PacketCounters", "CapChangeCounters", "VR_STATES", "SATURATIONS"]

#: The states of ``xtc_vr_state`` and of ``xtc_vr_saturation`` (every VR has one sample per state).
VR_STATES = ("active", "paused", "inactive")
SATURATIONS = ("cap_max", "cap_min", "cap_slack", "none")

_VR = SAMPLE_FIELDS.index("vr")
_STATE = SAMPLE_FIELDS.index("state")
_SATURATED = SAMPLE_FIELDS.index("saturated")
_SETPOINT = SAMPLE_FIELDS.index("setpoint_pps")
_CAP = SAMPLE_FIELDS.index("cap_percent")


class PacketCounters(Collector):
    """``xtc_vr_forwarded_packets_total`` and ``xtc_vr_offered_packets_total``: each VR's packets,
    summed over the periods from the meter's rates times the period's length.

    :meth:`add` runs every period.  On the netlink meter's :class:`~xtc.daemon.meter.Readings`
    (arrays, the same ``names`` list while the VR list stays the same) a period is two numpy
    additions; on other readings (a mapping) a loop over the VRs.  A VR that goes away keeps its
    totals (a VR that comes back continues them); periods with a counter reset add nothing (the meter
    reports no rate for them).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.totals: dict[str, list[float]] = {}  # vr -> [forwarded, offered], besides the arrays
        self._names: list[str] | None = None
        self._fwd = np.zeros(0)
        self._off = np.zeros(0)

    def _fold(self) -> None:
        """Move the arrays' totals into :attr:`totals` (the VR list changed)."""
        if self._names is not None:
            for n, f, o in zip(self._names, self._fwd.tolist(), self._off.tolist()):
                t = self.totals.setdefault(n, [0.0, 0.0])
                t[0] += f
                t[1] += o
        self._names = None
        self._fwd = self._off = np.zeros(0)

    def add(self, readings: Mapping[str, Any], period_s: float) -> None:
        """Count one period: ``readings`` (VR -> ``VrReading``, or ``Readings``) over ``period_s`` seconds."""
        if not period_s > 0 or not readings:
            return
        with self.lock:
            names = getattr(readings, "names", None)
            if names is not None:
                if names is not self._names:
                    self._fold()
                    self._names = names
                    self._fwd = np.zeros(len(names))
                    self._off = np.zeros(len(names))
                # (the rates are 0.0 where unknown: Readings' contract)
                self._fwd += readings.forwarded * period_s  # type: ignore[attr-defined]
                self._off += readings.offered * period_s  # type: ignore[attr-defined]
                return
            totals = self.totals
            get = totals.get
            for vr, (f, o, _reset) in readings.items():
                t = get(vr)
                if t is None:
                    t = totals[vr] = [0.0, 0.0]
                if f is not None:
                    t[0] += f * period_s
                if o is not None:
                    t[1] += o * period_s

    def snapshot(self) -> dict[str, tuple[float, float]]:
        """VR -> (forwarded packets, offered packets) so far."""
        with self.lock:
            out = {k: (v[0], v[1]) for k, v in self.totals.items()}
            if self._names is not None:
                for n, f, o in zip(self._names, self._fwd.tolist(), self._off.tolist()):
                    a, b = out.get(n, (0.0, 0.0))
                    out[n] = (a + f, b + o)
            return out

    def collect(self) -> Iterator[Metric]:
        fwd = CounterMetricFamily("xtc_vr_forwarded_packets", "Packets the VR forwarded (host-side RX of its "
                                  "interfaces); rate() of it is the VR's forwarded packets/s", labels=["vr"])
        off = CounterMetricFamily("xtc_vr_offered_packets", "Packets offered to the VR (host-side TX of its "
                                  "interfaces); rate() of it is the VR's offered packets/s", labels=["vr"])
        for vr, (f, o) in sorted(self.snapshot().items()):
            fwd.add_metric([vr], round(f))
            off.add_metric([vr], round(o))
        yield fwd
        yield off

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily("xtc_vr_forwarded_packets", "", labels=["vr"])
        yield CounterMetricFamily("xtc_vr_offered_packets", "", labels=["vr"])


class _VrCollector(Collector):
    """The per-VR gauges and state sets, read from the last period's rows at scrape time."""

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
        setpoint = GaugeMetricFamily("xtc_vr_setpoint_pps", "Setpoint of the VR's instance, packets/s "
                                     "(no sample for a VR without an instance)", labels=["vr"])
        cap = GaugeMetricFamily("xtc_vr_cap_ratio", "CPU cap XTC holds for the VR, as a fraction of one CPU "
                                "(no sample where XTC holds none)", labels=["vr"])
        state = GaugeMetricFamily("xtc_vr_state", "The VR's state: 1 for the one it is in, 0 for the others",
                                  labels=["vr", "state"])
        saturation = GaugeMetricFamily(
            "xtc_vr_saturation", "1 for the VR's saturation, 0 for the others: cap_max (cap at its maximum, "
            "rate below the setpoint), cap_min (cap at its minimum, rate above it), cap_slack (below the setpoint "
            "with a cap the VR does not use up), none", labels=["vr", "saturation"])
        for row in rows:
            vr = row[_VR]
            if row[_SETPOINT] is not None:
                setpoint.add_metric([vr], float(row[_SETPOINT]))
            if row[_CAP] is not None:
                cap.add_metric([vr], float(row[_CAP]) / 100.0)
            st = row[_STATE]
            for s in VR_STATES:
                state.add_metric([vr, s], 1.0 if s == st else 0.0)
            sat = row[_SATURATED] or "none"
            for s in SATURATIONS:
                saturation.add_metric([vr, s], 1.0 if s == sat else 0.0)
        yield setpoint
        yield cap
        yield state
        yield saturation

    def describe(self) -> Iterator[Metric]:
        # Names only (so the registry can check for duplicates without collecting).
        yield GaugeMetricFamily("xtc_vr_setpoint_pps", "", labels=["vr"])
        yield GaugeMetricFamily("xtc_vr_cap_ratio", "", labels=["vr"])
        yield GaugeMetricFamily("xtc_vr_state", "", labels=["vr", "state"])
        yield GaugeMetricFamily("xtc_vr_saturation", "", labels=["vr", "saturation"])


class CapChangeCounters(Collector):
    """``xtc_vr_cap_changes_total{vr}``: the caps the daemon wrote or restored, per VR (kept for VRs
    that went away, like the packet counters)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()

    def add(self, vrs: Sequence[str]) -> None:
        """One change per entry of ``vrs``."""
        with self.lock:
            counts = self.counts
            for vr in vrs:
                counts[vr] = counts.get(vr, 0) + 1

    def collect(self) -> Iterator[Metric]:
        fam = CounterMetricFamily("xtc_vr_cap_changes", "Cap changes of the VR: writes and restores of its CPU "
                                  "cap that succeeded", labels=["vr"])
        with self.lock:
            items = sorted(self.counts.items())
        for vr, n in items:
            fam.add_metric([vr], n)
        yield fam

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily("xtc_vr_cap_changes", "", labels=["vr"])


class DaemonMetrics(ServiceMetrics):
    """All metrics of one daemon, in a registry of their own (so tests can make several)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__("daemon", registry)
        r = self.registry
        self._vr = _VrCollector()
        r.register(self._vr)
        self.packets = PacketCounters()
        r.register(self.packets)
        self.cap_changes = CapChangeCounters()
        r.register(self.cap_changes)
        self.requests = Counter("xtc_requests", "Manager requests", ["cmd", "outcome"], registry=r)
        self.actuations = Counter("xtc_cap_changes", "Cap changes: writes and restores of a VR's CPU cap, by "
                                  "outcome (ok, failed)", ["outcome"], registry=r)
        self.periods = Counter("xtc_periods", "Control periods run", registry=r)
        self.meter_errors = Counter("xtc_meter_errors", "Failed meter reads", registry=r)
        # early drop (issue 48): failed limiter operations on a VR's host-side interfaces
        self.early_drop_failures = Counter("xtc_early_drop_failures", "Failed early-drop limiter operations "
                                           "(install, raise, lower, remove), by operation", ["op"], registry=r)
        self.reloads = Counter("xtc_reloads", "Configuration reloads", ["outcome"], registry=r)
        self.sends_dropped = Counter("xtc_manager_sends_dropped", "Messages of the manager socket not sent: a reply "
                                     "or a samples message to a peer whose queue is full (a slow client) or that is "
                                     "gone, by kind (reply, samples)", ["kind"], registry=r)
        #: The samples' datagrams by outcome (``sent``, ``failed``), read at each scrape: the service points it
        #: at its :meth:`~xtc.daemon.sample_udp.UdpSamples.counts`.
        self.sample_datagrams: Callable[[], Mapping[str, int]] = dict
        self.collect_from(lambda: [labelled_counter(
            "xtc_manager_sample_datagrams", "Samples messages to peers subscribed with udp: sent as datagrams, or sent "
            "on the connection because the datagram could not be (refused by the kernel, too big), by outcome "
            "(sent, failed)", "outcome", self.sample_datagrams(), always=("sent", "failed"))])
        self.work = Histogram(
            "xtc_period_work_seconds",
            "Wall time of one control period's work (controllers, actuation, publishing), seconds",
            buckets=(1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0),
            registry=r,
        )

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
