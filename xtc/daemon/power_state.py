"""The VRs this daemon turned off (the policer's last punishment, issue 48) and how to start them.

``vr_off`` pauses the VR's instance and turns the VR off through the backend
(:meth:`LibvirtBackend.power_off <xtc.host.libvirt.LibvirtBackend.power_off>`); the backend's
record of how to start it again, the reason and the time are kept here and saved in the daemon's
state file (key ``"vr_off"``), so a restarted daemon can still turn it on.  ``vr_on`` starts it
from that record and forgets it; the instance stays paused (the policer resumes it and its ladder
starts from the bottom; an operator without a policer sends ``resume``).  A backend without
``power_off`` (netns, sim, cgroup) refuses ``vr_off`` with the code ``unsupported``.

Pure bookkeeping: the backend calls are :class:`xtc.daemon.loop.ControlLoop`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["STATE_KEY", "PowerState", "VrOff"]

#: The key of this part of the daemon's state file.
STATE_KEY = "vr_off"


@dataclass(frozen=True)
class VrOff:
    """A VR turned off: why, when (Unix seconds) and the backend's record to start it again."""

    reason: str
    since_unix_s: float
    record: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        """For ``status`` and ``list`` replies."""
        return {"reason": self.reason, "since_unix_s": round(self.since_unix_s, 3)}


class PowerState:
    """The VRs turned off by this daemon, by name."""

    def __init__(self) -> None:
        self.off: dict[str, VrOff] = {}

    def to_state(self) -> dict[str, Any]:
        return {n: {"reason": v.reason, "since_unix_s": v.since_unix_s, "record": v.record}
                for n, v in sorted(self.off.items())}

    def load_state(self, doc: Any) -> None:
        """Take over what :meth:`to_state` saved (None: nothing).  Raises ValueError naming the problem."""
        if doc is None:
            return
        if not isinstance(doc, dict):
            raise ValueError(f"'{STATE_KEY}' must be an object of VR name -> record")
        for n, d in doc.items():
            if not (isinstance(d, dict) and isinstance(d.get("reason"), str)
                    and isinstance(d.get("since_unix_s"), (int, float)) and not isinstance(d.get("since_unix_s"), bool)
                    and isinstance(d.get("record"), dict)):
                raise ValueError(f"'{STATE_KEY}.{n}' must be an object with a string 'reason', a number "
                                 "'since_unix_s' and an object 'record'")
            self.off[n] = VrOff(d["reason"], float(d["since_unix_s"]), d["record"])
