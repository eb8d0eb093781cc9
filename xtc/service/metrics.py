"""What every XTC service exports besides its own metrics: ``process_*`` and ``xtc_build_info``.

Used by the daemon (:mod:`xtc.daemon.metrics`), the policer and the XCo controller and agent, so
that the same quantity has the same name everywhere.  Only prometheus_client is imported here (the
XCo agent loads nothing heavier for its metrics).
"""

from __future__ import annotations

from importlib import metadata

from prometheus_client import REGISTRY, CollectorRegistry, Info, ProcessCollector, disable_created_metrics

__all__ = ["add_standard_metrics", "xtc_version"]


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
