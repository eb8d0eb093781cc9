"""The metrics chassis of every XTC service: what each exports besides its own metrics
(``process_*`` and ``xtc_build_info``), its registry and its HTTP endpoint.

Used by the daemon (:mod:`xtc.daemon.metrics`), the policer and the XCo controller and agent, so
that the same quantity has the same name everywhere and one endpoint serves them all.  Only
prometheus_client is imported here (the XCo agent loads nothing heavier for its metrics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from importlib import metadata

from prometheus_client import (REGISTRY, CollectorRegistry, Histogram, Info, ProcessCollector, disable_created_metrics,
                               start_http_server)
from prometheus_client.core import CounterMetricFamily, Metric

__all__ = ["ServiceMetrics", "add_standard_metrics", "labelled_counter", "xtc_version"]


def xtc_version() -> str:
    """The installed distribution's version (``unknown`` when XTC runs from a source tree)."""
    try:
        return metadata.version("xtc")
    except metadata.PackageNotFoundError:
        return "unknown"


def add_standard_metrics(registry: CollectorRegistry, service: str) -> None:
    """Register ``process_*`` (CPU seconds, resident memory, open files, start time:
    :class:`prometheus_client.ProcessCollector`) and ``xtc_build_info{service,version}`` (always 1;
    join on it to label a series with the version or the service) in ``registry``.

    It also turns off prometheus_client's ``*_created`` series in this process (a gauge per counter
    and histogram that no dashboard or alert of XTC reads)."""
    disable_created_metrics()
    if registry is not REGISTRY:  # the global registry has its process collector already
        ProcessCollector(registry=registry)
    Info("xtc_build", "The XTC build this service runs (always 1)", registry=registry).info(
        {"service": service, "version": xtc_version()})


class _CollectFrom:
    """A collector whose families are a function's (:meth:`ServiceMetrics.collect_from`)."""

    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self.collect = collect


class ServiceMetrics:
    """A service's own Prometheus registry (:attr:`registry`, with ``process_*`` and
    ``xtc_build_info{service}``) and its HTTP endpoint (:meth:`serve`).

    A service's metrics class derives from it and registers its own metrics in ``registry``."""

    def __init__(self, service: str, registry: CollectorRegistry | None = None) -> None:
        #: The registry (a new one unless given: tests make several services in one process).
        self.registry = registry or CollectorRegistry()
        add_standard_metrics(self.registry, service)

    def histogram(self, name: str, doc: str, buckets: Iterable[float]) -> Histogram:
        """A histogram in this service's registry."""
        return Histogram(name, doc, buckets=tuple(buckets), registry=self.registry)

    def collect_from(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Register ``collect``: at each scrape, the metric families it yields (read from the
        service's own counters then, so that nothing is counted twice)."""
        self.registry.register(_CollectFrom(collect))

    def serve(self, address: str, port: int) -> int:
        """Start the HTTP endpoint in a thread; returns the port bound (for port 0)."""
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        return int(server.server_address[1])


def labelled_counter(name: str, doc: str, label: str, counts: Mapping[str, int],
                     always: Iterable[str] = ()) -> CounterMetricFamily:
    """One counter family with a sample per key of ``counts``; the keys of ``always`` are
    exported (at 0) even before they are counted, so that a dashboard sees every reason at once."""
    c = CounterMetricFamily(name, doc, labels=[label])
    for k in dict.fromkeys((*always, *list(counts))):
        c.add_metric([k], counts.get(k, 0))
    return c
