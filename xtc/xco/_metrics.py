"""Prometheus helpers shared by the XCo controller and agent services."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily

from xtc.service.metrics import add_standard_metrics


class ServiceMetrics:
    """A service's own Prometheus registry (:attr:`registry`, with ``process_*`` and
    ``xtc_build_info{service}``) and its HTTP endpoint."""

    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry()
        add_standard_metrics(self.registry, service)

    def serve(self, address: str, port: int) -> int:
        """Start the HTTP endpoint in a thread; returns the port bound (for port 0)."""
        from prometheus_client import start_http_server

        server, _ = start_http_server(port, addr=address, registry=self.registry)
        return int(server.server_address[1])


def labelled_counter(name: str, doc: str, label: str, counts: Mapping[str, int],
                     always: Iterable[str] = ()) -> CounterMetricFamily:
    """One counter family with a sample per key of ``counts``; the keys of ``always`` are
    exported (at 0) even before they are counted, so that a dashboard sees every reason at once."""
    c = CounterMetricFamily(name, doc, labels=[label])
    for k in dict.fromkeys((*always, *list(counts))):
        c.add_metric([k], counts.get(k, 0))
    return c
