"""The one interface through which XTC sees and caps a host's VRs.

Every consumer of a host talks to it through :class:`Host`: the daemon's control loop
(:mod:`xtc.daemon.loop`), the training sweep (:mod:`xtc.training.collect`), the lab's recorder and
the simulator's experiments (:mod:`xtc_lab`).  Backends: libvirt (:mod:`xtc.host.libvirt`: Xen
``cap``, LXC ``vcpu_quota``, QEMU ``vcpu_quota`` of a one-vCPU guest), plain cgroups (:mod:`xtc.host.cgroup`: v1 ``cpu.cfs_quota_us``,
v2 ``cpu.max``) and, beside the product, the simulated plant (:mod:`xtc_lab.sim.host`), which keeps
its own clock: real hosts have no notion of time to be advanced.

Every method raises only :class:`~xtc.host.errors.HostAdapterError` subclasses for failures of the
outside system.

Caps are in percent of one CPU; ``None`` means *unlimited* (a Xen cap of 0, an LXC ``vcpu_quota``
of -1, a cgroup ``max``).  :meth:`Host.apply_cap` never takes ``None``: XTC writes a finite cap
>= 1 and gets back the cap *actually in force* (a Xen cap is a whole percent; a quota is a whole
number of microseconds), which the control loop hands back to the controller every period.  Only
:meth:`Host.restore_cap` may hand a VR back an unlimited cap, because that is what it had before
XTC.

Exact originals: a percentage loses what the hypervisor really had (an LXC ``vcpu_period`` other
than the default, libvirt's "no limit" spelling, a Xen cap of 0).  At activation the daemon
therefore also takes :meth:`Host.snapshot`, the backend's exact record of the setting as a JSON
object, persists it beside the percentage, and hands it back to :meth:`Host.restore_cap`, which
writes exactly that record back.  The daemon never looks inside a record.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol

from .actuators import CapActuator, OriginalCap
from .errors import HostAdapterError
from .ifcounters import IfCounters

__all__ = ["Host", "ActuatorCaps", "HOST_ENTRY_POINT_GROUP", "HostPluginError", "host_plugin"]

#: Entry points of host backends beside the product's (the testbed's ``sim``).
HOST_ENTRY_POINT_GROUP = "xtc.hosts"


class HostPluginError(LookupError):
    """No installed host backend of that name."""


def host_plugin(name: str) -> Any:
    """The host backend ``name`` that an installed distribution registers (group ``xtc.hosts``).

    The object has ``from_config(cfg) -> Host`` and optionally ``CONFIG_TABLE``, the pydantic type
    of its own table in the daemon's configuration (``[<name>]``).

    Raises
    ------
    HostPluginError
        No such backend is installed.
    """
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=HOST_ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        hint = " (the simulated plant is part of the testbed: pip install xtc-lab)" if name == "sim" else ""
        raise HostPluginError(f"backend {name!r} is not installed{hint}")
    return found[0].load()


class Host(Protocol):
    """One host's VRs, their interface counters and their caps."""

    #: The backend's name (``libvirt``, ``cgroup``, ``sim``), for logs and records.
    name: str
    #: Width of the counters :meth:`read_counters` returns (64, or 32 on a 32-bit kernel).
    counter_bits: int

    def list_vrs(self) -> Mapping[str, tuple[str, ...]]:
        """The VRs running now and the host-side interfaces of each."""
        ...

    def read_counters(self) -> Mapping[str, IfCounters]:
        """The cumulative counters of the host's interfaces now (at least those of the VRs)."""
        ...

    def read_cpu_ns(self, vrs: Iterable[str]) -> Mapping[str, int]:
        """Cumulative CPU time (nanoseconds) that each of ``vrs`` has used, from the hypervisor's or
        the kernel's own accounting (all of the VR's vCPUs / tasks together).  A VR whose time cannot
        be read now (gone, not running) is left out of the result; the call raises HostAdapterError only
        when the backend as a whole fails.

        The time counts from when the VR (domain, cgroup) was started: a VR restarted between two
        reads shows a smaller value, which the consumer treats as a restart, not as negative use.
        The CPU share a VR used over a period is the difference of two reads divided by the
        period's length in nanoseconds (1.0 = one whole CPU, comparable to ``cap_percent / 100``).
        """
        ...

    def read_cap(self, vr: str) -> float | None:
        """The VR's cap now (percent of one CPU; None = unlimited)."""
        ...

    def apply_cap(self, vr: str, cap_percent: float) -> float:
        """Set the VR's cap (a finite cap >= 1 percent); return the cap now in force, percent.

        A cap that resolves to the setting already in force (the same whole Xen percent, the same
        quota in microseconds) is not written again.
        """
        ...

    def snapshot(self, vr: str) -> dict[str, Any]:
        """The VR's cap setting now, exactly, as a non-empty JSON object (its *original* record).

        Taken when an instance is activated, before XTC writes a cap, and persisted.
        """
        ...

    def restore_cap(self, vr: str, cap_percent: float | None, original: Mapping[str, Any] | None = None) -> None:
        """Give the VR back the setting it had before XTC.

        ``original`` is a record from :meth:`snapshot` (of this VR, maybe from an earlier daemon
        run): that exact setting is written back.  Without one (a state file from before records
        were kept) the cap ``cap_percent`` is restored (None = unlimited).
        """
        ...

    def close(self) -> None:
        ...

    # Optional (the daemon checks a state file's records with them at start, when a backend has them):
    #
    # def check_original(self, vr: str, original: Mapping[str, Any]) -> None:
    #     """Raise ValueError naming why ``original`` is not a record of ``vr``'s setting on this
    #     backend (another backend or VR, a value it cannot hold); HostAdapterError if the VR cannot
    #     be looked at now.  Nothing is written."""
    #
    # def configured_vrs(self) -> frozenset[str] | None:
    #     """The VRs the configuration gives this backend; None: any VR it finds (all of libvirt's)."""
    #
    # real_interfaces: bool = True
    #     """False for a backend whose interface names are not the host's (the simulated plant):
    #     early drop's limiter is then not opened (it would act on whatever interface has the name)."""
    #
    # def power_off(self, vr: str) -> dict[str, Any]:
    #     """Turn the VR off (the policer's last punishment, issue 48); returns the JSON record
    #     :meth:`power_on` needs to start it again.  HostAdapterError if it cannot; a backend
    #     without these two refuses ``vr_off`` as unsupported."""
    #
    # def power_on(self, vr: str, record: Mapping[str, Any]) -> None:
    #     """Start the VR again from :meth:`power_off`'s record.  HostAdapterError if it cannot."""


class ActuatorCaps:
    """The cap methods of a host with one actuator per VR (``self._act(vr)`` builds or finds it).

    ``restore_prefers_own_original``: without a persisted record, restore the setting the actuator
    itself took before its first write, if it has one, rather than the percentage (the cgroup
    backend); otherwise the percentage is always used then (the libvirt backend).
    """

    restore_prefers_own_original = False

    def _act(self, vr: str) -> CapActuator:
        raise NotImplementedError

    def read_cap(self, vr: str) -> float | None:
        return self._act(vr).read_cap()

    def apply_cap(self, vr: str, cap_percent: float) -> float:
        return self._act(vr).set_cap(cap_percent)

    def cap_writes(self) -> int:
        """Writes made by this host's actuators so far (a cap that resolved to the one in force is not one)."""
        acts: dict[str, CapActuator] = getattr(self, "_acts", {})
        return sum(getattr(a, "write_count", 0) for a in acts.values())

    def snapshot(self, vr: str) -> dict[str, Any]:
        a = self._act(vr)
        # An actuator that has written since its last restore knows the setting before that write.
        rec = a.original()
        if rec is None:
            try:
                rec = a.current_setting()
            except ValueError as e:
                raise HostAdapterError(f"the cap setting of {vr!r} cannot serve as an original: {e}") from None
        return rec.to_dict()

    def check_original(self, vr: str, original: Mapping[str, Any]) -> None:
        a = self._act(vr)
        try:
            a.check_original(OriginalCap.from_dict(original))
        except TypeError as e:
            raise ValueError(str(e)) from None

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
