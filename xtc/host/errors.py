"""Errors raised by the daemon's host adapters (meter, collector, libvirt, actuators).

Every outside system the daemon touches (``/proc/net/dev``, libvirt, cgroup files)
sits behind one adapter that turns that system's failures into one of these, with
a message that names the VR, the file or the operation.  The daemon catches
:class:`HostAdapterError` around one VR's work so that one broken VR never takes
the others down.

Public API
----------
HostAdapterError
    Base class of everything below.
MeterError
    ``/proc/net/dev`` (or the injected path) cannot be read, or is not in that
    format at all.
VRNotRunning
    The VR is not there to be measured or capped: libvirt domain not found or
    not active, cgroup directory gone.  A normal condition, not a bug.
HypervisorUnavailable
    libvirtd cannot be reached, even after one reconnect attempt.
LibvirtOperationError
    libvirt refused an operation (bad parameter, unsupported call); ``code``
    is libvirt's error number.
ActuatorError
    The hypervisor or kernel refused a cap, or read back something that makes
    no sense.
CounterError, CounterReadError, StatsUnsupportedError, ProcNetDevFormatError
    The interface counter readers' (:mod:`xtc.host.counters`,
    :mod:`xtc.host.procnetdev`): a :class:`MeterError` naming the source, the
    namespace and the operation.
"""

from __future__ import annotations

__all__ = [
    "HostAdapterError",
    "MeterError",
    "VRNotRunning",
    "HypervisorUnavailable",
    "LibvirtOperationError",
    "ActuatorError",
    "CounterError",
    "CounterReadError",
    "StatsUnsupportedError",
    "ProcNetDevFormatError",
]


class HostAdapterError(Exception):
    """Base class of the errors of the daemon's host adapters."""


class MeterError(HostAdapterError):
    """The interface counters cannot be read or are not in ``/proc/net/dev`` format."""


class VRNotRunning(HostAdapterError):
    """The VR (domain, cgroup) does not exist or is not running."""

    def __init__(self, vr: str, reason: str) -> None:
        super().__init__(f"VR {vr!r} not running: {reason}")
        self.vr = vr
        self.reason = reason


class HypervisorUnavailable(HostAdapterError):
    """libvirtd cannot be reached (connect failed, or the connection died and reconnect failed)."""


class LibvirtOperationError(HostAdapterError):
    """libvirt refused an operation for a reason other than the connection or a missing domain.

    ``code`` is libvirt's error code (``virErrorNumber``) or None.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class ActuatorError(HostAdapterError):
    """A CPU cap could not be read or written, or the read-back value is invalid."""


class CounterError(MeterError):
    """Base class of the counter readers' errors (a :class:`MeterError`)."""


class CounterReadError(CounterError):
    """The counters could not be read.

    Attributes
    ----------
    source : str
        What was being read ("netlink RTM_GETSTATS dump", a file path ...).
    netns : str or None
        The namespace, None for the caller's own.
    errno : int or None
        The error number when the failure had one.
    """

    def __init__(self, source: str, netns: str | None, reason: str, errno: int | None = None) -> None:
        where = f" in netns {netns!r}" if netns is not None else ""
        super().__init__(f"{source}{where}: {reason}")
        self.source = source
        self.netns = netns
        self.errno = errno


class StatsUnsupportedError(CounterReadError):
    """This kernel (or sandbox) offers no netlink ``RTM_GETSTATS``; use ``/proc/net/dev``."""


class ProcNetDevFormatError(CounterError, ValueError):
    """The text is not in ``/proc/net/dev`` format (no header, missing columns)."""
