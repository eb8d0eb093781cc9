"""What the daemon needs from the world it controls: one small interface, several backends.

A backend says which VRs exist and which host interfaces belong to each (the collector's job),
gives the meter its counter source (``/proc/net/dev`` or a synthetic one), and reads and writes
caps through an actuator.  Every method raises only
:class:`~xtc.host.errors.HostAdapterError` subclasses for failures of the outside system.

Caps are in percent of one CPU; ``None`` means *unlimited* (a Xen cap of 0, an LXC
``vcpu_quota`` of -1, a cgroup ``max``).  :meth:`Backend.write_cap` never takes ``None``: XTC writes
a finite cap >= 1; only :meth:`Backend.restore_cap` may hand a VR back an unlimited cap, because
that is what it had before XTC.

Exact originals: a percentage loses what the hypervisor really had (an LXC ``vcpu_period``
other than the default, libvirt's "no limit" spelling, a Xen cap of 0).  At activation the
daemon therefore also takes :meth:`Backend.read_original`, the backend's exact record of the
setting as a JSON object, persists it beside the percentage, and hands it back to
:meth:`Backend.restore_cap`, which writes exactly that record back.  The daemon never looks
inside a record.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from .actuators import CapActuator, OriginalCap
from .errors import HostAdapterError
from xtc.daemon.meter import CounterSource

__all__ = ["Backend", "ActuatorCaps"]


class Backend(Protocol):
    """The daemon's view of one host."""

    name: str

    def counter_source(self) -> CounterSource:
        """Where the meter reads the interface counters."""
        ...

    def discover(self) -> Mapping[str, tuple[str, ...]]:
        """The VRs present now and the host-side interfaces of each."""
        ...

    def read_cap(self, vr: str) -> float | None:
        """The VR's cap now (percent of one CPU; None = unlimited)."""
        ...

    def write_cap(self, vr: str, cap_percent: float) -> None:
        """Set the VR's cap (a finite cap >= 1 percent)."""
        ...

    def read_original(self, vr: str) -> dict[str, Any]:
        """The VR's cap setting now, exactly, as a non-empty JSON object (its *original* record).

        Taken when an instance is activated, before XTC writes a cap, and persisted.
        """
        ...

    def restore_cap(self, vr: str, cap_percent: float | None, original: Mapping[str, Any] | None = None) -> None:
        """Give the VR back the setting it had before XTC.

        ``original`` is a record from :meth:`read_original` (of this VR, maybe from an earlier
        daemon run): that exact setting is written back.  Without one (a state file from before
        records were kept) the cap ``cap_percent`` is restored (None = unlimited).
        """
        ...

    def tick(self, now_s: float) -> None:
        """Let time pass up to ``now_s`` (the simulated plant advances; real hosts do nothing)."""
        ...

    def close(self) -> None:
        ...


class ActuatorCaps:
    """The cap methods of a backend with one actuator per VR (``self._act(vr)`` builds or finds it).

    ``restore_prefers_own_original``: without a persisted record, restore the setting the actuator
    itself took before its first write, if it has one, rather than the percentage (the cgroup
    backend); otherwise the percentage is always used then (the libvirt backend).
    """

    restore_prefers_own_original = False

    def _act(self, vr: str) -> CapActuator:
        raise NotImplementedError

    def read_cap(self, vr: str) -> float | None:
        return self._act(vr).read_cap()

    def write_cap(self, vr: str, cap_percent: float) -> None:
        self._act(vr).set_cap(cap_percent)

    def read_original(self, vr: str) -> dict[str, Any]:
        a = self._act(vr)
        # An actuator that has written since its last restore knows the setting before that write.
        rec = a.original()
        if rec is None:
            try:
                rec = a.current_setting()
            except ValueError as e:
                raise HostAdapterError(f"the cap setting of {vr!r} cannot serve as an original: {e}") from None
        return rec.to_dict()

    def restore_cap(self, vr: str, cap_percent: float | None, original: Mapping[str, Any] | None = None) -> None:
        a = self._act(vr)
        try:
            if original is not None:
                a.adopt_original(OriginalCap.from_dict(original))
            elif not (self.restore_prefers_own_original and a.original() is not None):
                a.adopt_original(a.original_from_cap(cap_percent))
        except (ValueError, TypeError) as e:
            what = f"original {dict(original)!r}" if original is not None else f"cap {cap_percent!r}"
            raise HostAdapterError(f"cannot restore {what} of {vr!r}: {e}") from None
        a.restore()
