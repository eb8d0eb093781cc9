"""The policer's Prometheus metrics (``/metrics``): :class:`PolicerCollector`."""

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from ..engine import CYCLE_BUCKETS_S
from ..store import Store

__all__ = ["LINK_METRICS", "PolicerCollector"]

#: The engine's link counters as metrics: (the metric's name, gauge or counter, its help, the counters of
#: :meth:`~xtc.policer.link.LinkPool.stats` it sums).
LINK_METRICS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("xtc_policer_link_connections", "gauge", "Kept connections to the daemons' endpoints", ("connections",)),
    ("xtc_policer_link_subscriptions", "gauge", "Daemons whose samples come over their kept connection",
     ("subscriptions",)),
    ("xtc_policer_link_connects", "counter", "Kept connections opened (again after one was closed idle or reset)",
     ("connects",)),
    ("xtc_policer_link_resets", "counter", "Kept connections dropped and opened again because the daemon "
     "answered no request for the stall time", ("resets",)),
    ("xtc_policer_link_replies_dropped", "counter", "Replies dropped by the links: after their request's "
     "deadline, or invalid", ("late_replies", "bad_replies")),
    ("xtc_policer_link_socket_errors", "counter", "Connections that could not be opened (open-files limit)",
     ("socket_errors",)),
    ("xtc_policer_link_samples", "counter", "Samples messages taken, over the connections and as datagrams",
     ("samples_received", "udp_received")),
    ("xtc_policer_link_samples_dropped", "counter", "Samples messages dropped by the links: for no "
     "subscription, or datagrams refused", ("stray_samples", "udp_dropped")),
)


class PolicerCollector:
    """The policer's Prometheus metrics, read from the store and the engine at each scrape.

    Gauges: ``xtc_policer_routers{status}``, per router ``xtc_policer_router_unreachable``,
    ``xtc_policer_router_control_on`` (XTC on for its VRs) and ``xtc_policer_router_demand_pps``;
    ``xtc_policer_vr_punishment_level{router,vr}`` (punished VRs only); ``xtc_policer_leader``;
    ``xtc_policer_cycle_seconds`` (a histogram of the policy cycles).  Counters:
    ``xtc_policer_punishments_total{level}`` (from the audit log), ``xtc_policer_engine_cycles_total``,
    ``xtc_policer_bad_replies_total``, ``xtc_policer_measurements_shed_total`` (measurements put off while the
    engine was behind).  The engine's links to the daemons (:data:`LINK_METRICS`, from its
    link pool's counters, summed over the shards): gauges ``xtc_policer_link_connections`` and
    ``xtc_policer_link_subscriptions``, and counters of connections made and reset, replies and samples
    taken or dropped.
    """

    def __init__(self, store: Store, engine: Any):
        self.store, self.engine = store, engine
        self._lock = threading.Lock()
        self._punish_after_id = 0
        self._punishments: dict[str, int] = {"1": 0, "2": 0, "3": 0}

    def _count_punishments(self) -> dict[str, int]:
        with self._lock:  # the audit log is read on from where the last scrape stopped
            while True:
                page = self.store.list_actions(kind="punish", after_id=self._punish_after_id, limit=1000)
                for a in page:
                    level = str(a["detail"].get("level"))
                    self._punishments[level] = self._punishments.get(level, 0) + 1
                    self._punish_after_id = a["id"]
                if len(page) < 1000:
                    return dict(self._punishments)

    def collect(self) -> Iterator[Any]:
        routers = self.store.list_routers(include_removed=False)
        by_status = GaugeMetricFamily("xtc_policer_routers", "Routers by status (removed ones left out)",
                                      labels=["status"])
        for st in ("unknown", "reachable", "unreachable"):
            by_status.add_metric([st], sum(r["status"] == st for r in routers))
        unreachable = GaugeMetricFamily("xtc_policer_router_unreachable", "1 while the router's daemon does not "
                                        "answer", labels=["router"])
        control = GaugeMetricFamily("xtc_policer_router_control_on", "1 while XTC is on for the router's VRs "
                                    "(activation policy or control_mode)", labels=["router"])
        demand = GaugeMetricFamily("xtc_policer_router_demand_pps", "Router's aggregate demand at the last cycle, "
                                   "packets/s", labels=["router"])
        for r in routers:
            unreachable.add_metric([r["name"]], float(r["status"] == "unreachable"))
            control.add_metric([r["name"]], float(bool(r["control_on"])))
            if r["demand_pps"] is not None:
                demand.add_metric([r["name"]], float(r["demand_pps"]))
        yield from (by_status, unreachable, control, demand)
        level = GaugeMetricFamily("xtc_policer_vr_punishment_level", "Punishment level of a punished VR (1, 2: "
                                  "setpoint reduced; 3: paused and flagged)", labels=["router", "vr"])
        # Only the punished VRs (a handful), not the fleet's tens of thousands.
        for router, vr, lv in self.store.punished_vrs():
            level.add_metric([router, vr], float(lv))
        yield level
        pun = CounterMetricFamily("xtc_policer_punishments", "Punishment steps taken (audit log), by level reached",
                                  labels=["level"])
        for lv, n in sorted(self._count_punishments().items()):
            pun.add_metric([lv], n)
        yield pun
        e = self.engine
        leads = e is not None and e.error is None and (e.is_leader is None or bool(e.is_leader()))
        yield GaugeMetricFamily("xtc_policer_leader", "1 while this process runs the policy engine", value=float(leads))
        yield CounterMetricFamily("xtc_policer_engine_cycles", "Policy cycles run by this process",
                                  value=e.cycles if e is not None else 0)
        yield CounterMetricFamily("xtc_policer_bad_replies", "Daemon replies dropped as invalid",
                                  value=sum(e.bad_replies.values()) if e is not None else 0)
        yield CounterMetricFamily("xtc_policer_measurements_shed", "Router measurements put off while the engine was "
                                  "behind: the router waited for its next sample instead of being sent 'list'",
                                  value=getattr(e, "shed", 0) if e is not None else 0)
        links = getattr(e, "link_stats", None) or {}
        for name, kind, help_text, counters in LINK_METRICS:
            family = GaugeMetricFamily if kind == "gauge" else CounterMetricFamily
            yield family(name, help_text, value=sum(links.get(c, 0) for c in counters))
        h = getattr(e, "cycle_hist", None) or {"counts": [], "sum": 0.0}
        counts = h["counts"] or [0] * (len(CYCLE_BUCKETS_S) + 1)
        cum, buckets = 0, []
        for le, n in zip((*(repr(float(b)) for b in CYCLE_BUCKETS_S), "+Inf"), counts):
            cum += n
            buckets.append((le, cum))
        yield HistogramMetricFamily("xtc_policer_cycle_seconds", "Policy cycle time (a cycle's start to its last "
                                    "answering router handled), seconds", buckets=buckets, sum_value=h["sum"])
