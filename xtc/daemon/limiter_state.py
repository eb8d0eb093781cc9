"""Early drop's state in the daemon: which VRs have it, the limit in place on their interfaces,
and the faults (issue 48; docs/design/early-drop.md, docs/guide/early-drop.md).

:class:`EarlyDrop` sits beside the control loop (:class:`xtc.daemon.loop.ControlLoop` calls it
each period between the controllers' decisions and the cap writes, so a limit is raised
*before* the cap it must let through is written).  Its decisions come from the pure
:func:`xtc.daemon.limiter_policy.decide`; its only outside system is a
:class:`xtc.host.limiter.Limiter` (the eBPF bucket :class:`xtc.host.bpflimiter.BpfLimiter` or the
TBF :class:`xtc.host.tclimiter.TcLimiter`, ``daemon.early_drop_limiter``); the setting it is given
carries the limit both in packets/s (with the credit in seconds) and in bytes/s.

What it guarantees:

- **Opt-in**: a VR has early drop when its activation asked for it (``early_drop`` in the
  manager API) or, when the activation did not say, when ``daemon.early_drop`` is on.  The
  choice is part of the daemon's state file (``"early_drop"``), so it survives restarts.
- **Nothing left behind**: deactivation and SIGTERM remove the VR's limiters (the interfaces get
  back exactly the queueing they had before).  A restart (after SIGKILL or a crash)
  *removes* every limiter it finds on the VRs' interfaces (:meth:`EarlyDrop.start`) rather than
  adopting it: the limit it had was derived from rates of a period that is gone; the next
  period derives a fresh one from the VR's measured rates.  A VR that reboots re-creates its
  interfaces without the qdisc: a counter reset or the VR coming back marks its limit as not in
  place, and the next period installs it again.
- **Parked, not removed, while early drop stays on**: when the VR no longer needs a limit, its
  limiters are parked (:meth:`xtc.host.limiter.Limiter.park`: the eBPF filter stays attached and
  idle, so a limit that comes back is map updates; the TBF is removed); deactivation, SIGTERM,
  switching early drop off or the VR going remove parked ones too.
- **The VR's own losses** (:func:`xtc.daemon.limiter_policy.loss_factor`): each VR's smoothed loss
  factor (handed / forwarded while it is limited, short of its setpoint and its cap does not bind)
  raises its limit, bounded; it is part of the state file (``"loss_factor"``), so a restart after
  SIGKILL installs the limit with it, as the other choices survive.
- **Never tighter than the setpoint**: a failed install or change is logged and counted
  (``failures``); a failed *raise* removes the limiter (no limit beats one that is too tight);
  a failed removal is retried every period until it succeeds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xtc.host.limiter import Limiter, LimiterError, LimiterSetting
from xtc.service.logs import event

from .limiter_policy import (
    DEFAULT_TUNING,
    Limit,
    LimiterTuning,
    LimitInputs,
    LossInputs,
    decide,
    loss_factor,
)

__all__ = ["STATE_KEY", "EarlyDrop", "VrLoad"]

log = logging.getLogger("xtc.daemon.early_drop")

#: The key of early drop's part of the daemon's state file.
STATE_KEY = "early_drop"


@dataclass(frozen=True)
class VrLoad:
    """One active VR's period, as the control loop hands it to :meth:`EarlyDrop.period`."""

    setpoint_pps: float
    forwarded_pps: float | None
    handed_pps: float | None  # host-side TX of its interfaces (what passed the limiter)
    model_forwarded_pps: float | None  # what the VR will forward at the next cap when it is a raise (measured + model's gain)
    counter_reset: bool = False
    #: The instance is paused: its cap stays where it is, and so does its limit (the policer's ladder
    #: pauses a misbehaving VR with its excess still dropped at the host); only its drops are counted.
    held: bool = False
    #: The VR's CPU use over the period, percent of one CPU (None: not read), and the cap in force
    #: over it (None: not known): whether the cap bound (:func:`~xtc.daemon.limiter_policy.loss_factor`).
    cpu_percent: float | None = None
    cap_percent: float | None = None


@dataclass
class _Vr:
    on: bool
    limit: Limit | None = None  # the limit in place (None: none)
    ifaces: tuple[str, ...] = ()  # the interfaces carrying it
    drops: dict[str, int] = field(default_factory=dict)  # limiter drop counter at the last period, per iface
    tx: dict[str, tuple[int, int]] = field(default_factory=dict)  # (tx bytes, tx packets) per iface
    mean_bytes: float = math.nan
    stale: bool = False  # the limit may not be in place (reboot, failed change): install again
    #: Interfaces whose limiter was parked (the VR no longer needed a limit, but has early drop on):
    #: the eBPF bucket's filter stays attached, idle, until the VR's early drop ends.
    parked: tuple[str, ...] = ()
    #: The VR's smoothed loss factor (handed / forwarded where its cap does not bind; 1: none).
    loss: float = 1.0


class EarlyDrop:
    """Early drop for the daemon's instances (see the module)."""

    def __init__(self, limiter: Limiter | None, default_on: bool = False, tuning: LimiterTuning = DEFAULT_TUNING,
                 on_failure: Callable[[str, str], None] | None = None) -> None:
        self.limiter = limiter
        self.default_on = default_on
        self.tuning = tuning
        #: Each VR's early drop (its entry is replaced, never changed in place, when it is switched on or off).
        self.vrs: dict[str, _Vr] = {}
        #: The VRs whose entry has early drop on: only they can hold a limiter (switched off, it goes).
        self._on: set[str] = set()
        #: Limiter operations that failed since start.
        self.failures = 0
        self._on_failure = on_failure
        #: Interfaces whose limiter could not be removed: retried every period.
        self.pending_removals: set[str] = set()
        #: Packets/s each limited VR's limiters dropped over the last period: part of what it was
        #: offered, which the daemon reports as handed + dropped (:meth:`ControlLoop._early_drop_period`).
        self.dropped_pps: dict[str, float] = {}
        #: The limiter counts bytes (the TBF): each period measures the VR's mean packet size for it.
        self._counts_bytes = getattr(limiter, "counts", "bytes") != "packets"

    # ------------------------------------------------------------------ choice and state
    def choose(self, vr: str, on: bool | None) -> None:
        """The VR's activation: early drop on, off, or (None) the configured default."""
        want = self.default_on if on is None else bool(on)
        cur = self.vrs.get(vr)
        if cur is not None and cur.on and not want:
            self._remove(vr, cur)
        if cur is None or cur.on != want:
            self._put(vr, _Vr(on=want))

    def _put(self, vr: str, v: _Vr) -> None:
        self.vrs[vr] = v
        if v.on:
            self._on.add(vr)
        else:
            self._on.discard(vr)

    def on_vrs(self) -> list[str]:
        """The VRs with early drop on, in the order of :attr:`vrs`."""
        on = self._on
        return [vr for vr in self.vrs if vr in on] if on else []

    def idle(self) -> bool:
        """Whether a period has nothing to do: no VR with early drop on (so no limiter in place or parked:
        one switched off or forgotten loses them at once), none left to remove.  Then :meth:`period`
        need not run, and a daemon with early drop available and off everywhere looks at no VR."""
        return not self.pending_removals and not self._on

    def is_on(self, vr: str) -> bool:
        v = self.vrs.get(vr)
        return v is not None and v.on

    def limit_of(self, vr: str) -> Limit | None:
        v = self.vrs.get(vr)
        return None if v is None else v.limit

    def describe(self, vr: str) -> dict[str, Any]:
        """The VR's early drop for a ``status`` reply: on or off, and the limit in place (null: none)."""
        v = self.vrs.get(vr)
        limit = None if v is None else v.limit
        return {"on": v is not None and v.on,
                "limit_pps": None if limit is None else round(limit.rate_pps, 1),
                # the TBF's rate in bytes/s; null for the eBPF bucket, which counts packets
                "limit_bytes_per_s": None if limit is None or not self._counts_bytes else limit.rate_bytes_per_s,
                "interfaces": [] if v is None or limit is None else list(v.ifaces)}

    def loss_of(self, vr: str) -> float:
        """The VR's smoothed loss factor (1: none, or no early drop)."""
        v = self.vrs.get(vr)
        return 1.0 if v is None else v.loss

    def to_state(self) -> dict[str, Any]:
        return {"vrs": {n: ({"on": v.on, "loss_factor": round(v.loss, 6)} if v.loss != 1.0 else {"on": v.on})
                        for n, v in sorted(self.vrs.items())}}

    def load_state(self, doc: Any, instances: set[str]) -> None:
        """Take over the choices saved by :meth:`to_state` (a missing part: none).  Raises ValueError
        naming the problem (and takes over nothing)."""
        if doc is None:
            return
        vrs = doc.get("vrs") if isinstance(doc, dict) else None
        if not isinstance(vrs, dict):
            raise ValueError(f"'{STATE_KEY}' must be an object with 'vrs'")
        got: dict[str, _Vr] = {}
        for n, d in vrs.items():
            if not isinstance(d, dict) or not isinstance(d.get("on"), bool):
                raise ValueError(f"'{STATE_KEY}.vrs.{n}' must be an object with a boolean 'on'")
            loss = d.get("loss_factor", 1.0)
            if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 1.0 <= loss <= 10.0:
                raise ValueError(f"'{STATE_KEY}.vrs.{n}.loss_factor' must be a number within 1..10, got {loss!r}")
            if n in instances:
                got[n] = _Vr(on=d["on"], loss=float(loss))
        for n, v in got.items():
            self._put(n, v)

    # ------------------------------------------------------------------------- faults
    def _fail(self, vr: str, what: str, e: LimiterError) -> None:
        self.failures += 1
        event(log, logging.WARNING, "early_drop_failed", vr=vr, op=what, error=str(e))
        if self._on_failure is not None:
            self._on_failure(vr, what)

    def _remove_iface(self, vr: str, iface: str) -> bool:
        assert self.limiter is not None
        try:
            self.limiter.remove(iface)
        except LimiterError as e:
            self._fail(vr, "remove", e)
            self.pending_removals.add(iface)
            return False
        self.pending_removals.discard(iface)
        return True

    def _remove(self, vr: str, v: _Vr) -> None:
        """The VR's limiters go, parked ones too: its interfaces end as they were."""
        if self.limiter is not None:
            for iface in dict.fromkeys(v.ifaces + v.parked):
                self._remove_iface(vr, iface)
        if v.limit is not None:
            event(log, logging.INFO, "early_drop_removed", vr=vr, interfaces=list(v.ifaces))
        v.limit, v.ifaces, v.drops, v.stale, v.parked = None, (), {}, False, ()

    def _park(self, vr: str, v: _Vr) -> None:
        """The VR no longer needs a limit but keeps early drop on: its limiters are parked (the
        eBPF filter stays attached, idle; the TBF is removed), so a limit that comes back is cheap."""
        assert self.limiter is not None
        park = getattr(self.limiter, "park", self.limiter.remove)
        kept = []
        for iface in v.ifaces:
            try:
                if park(iface):
                    kept.append(iface)
            except LimiterError as e:
                self._fail(vr, "remove", e)
                self.pending_removals.add(iface)
        event(log, logging.INFO, "early_drop_removed", vr=vr, interfaces=list(v.ifaces))
        v.parked = tuple(dict.fromkeys(v.parked + tuple(kept)))
        v.limit, v.ifaces, v.drops, v.stale = None, (), {}, False

    def forget(self, vr: str) -> None:
        """The VR's instance went (deactivated): its limiters go."""
        v = self.vrs.pop(vr, None)
        self._on.discard(vr)
        if v is not None:
            self._remove(vr, v)

    def remove_all(self) -> None:
        """The daemon stops (SIGTERM): every limiter goes; the choices stay in the state."""
        for name, v in self.vrs.items():
            self._remove(name, v)

    def close(self) -> None:
        """The daemon has stopped: the limiter adapter's socket is closed (after :meth:`remove_all`)."""
        if self.limiter is not None:
            self.limiter.close()

    def start(self, vr_ifaces: Mapping[str, tuple[str, ...]]) -> list[str]:
        """At start: remove every limiter found on the VRs' interfaces (left by a killed daemon).
        Returns the interfaces cleaned."""
        cleaned: list[str] = []
        if self.limiter is None:
            return cleaned
        for vr, ifaces in vr_ifaces.items():
            for iface in ifaces:
                try:
                    if self.limiter.remove(iface):
                        cleaned.append(iface)
                except LimiterError as e:
                    self._fail(vr, "remove leftover", e)
                    self.pending_removals.add(iface)
        if cleaned:
            event(log, logging.INFO, "early_drop_leftovers_removed", interfaces=cleaned)
        return cleaned

    def reappeared(self, vr: str) -> None:
        """The VR came back (rebooted, re-created interfaces): its limit must be installed again."""
        v = self.vrs.get(vr)
        if v is not None and v.limit is not None:
            v.stale = True

    # ------------------------------------------------------------------------- period
    def _mean_bytes(self, v: _Vr, ifaces: tuple[str, ...], counters: Mapping[str, Any]) -> None:
        db = dp = 0
        for iface in ifaces:
            c = counters.get(iface)
            if c is None:
                continue
            now = (int(c.tx_bytes), int(c.tx_packets))
            before = v.tx.get(iface)
            v.tx[iface] = now
            if before is not None and now[0] >= before[0] and now[1] >= before[1]:
                db += now[0] - before[0]
                dp += now[1] - before[1]
        if dp > 0:
            v.mean_bytes = db / dp

    def _read_drops(self, vrs: list[_Vr]) -> dict[str, int] | None:
        """The drop counter of every limiter of ``vrs``, in one read (None: the read failed, reported)."""
        assert self.limiter is not None
        ifaces = [i for v in vrs if v.limit is not None for i in v.ifaces]
        if not ifaces:
            return {}
        try:
            return self.limiter.dropped_by_interface(ifaces)
        except LimiterError as e:
            self._fail("*", "read drops", e)
            return None

    def _dropped_pps(self, v: _Vr, period_s: float, drops: Mapping[str, int] | None) -> float:
        """Packets/s the VR's limiters dropped over the period (0 without one), from this period's
        read of every limiter's counter (None: it failed; counted as nothing dropped)."""
        if v.limit is None or period_s <= 0 or drops is None:
            return 0.0
        total = 0
        for iface in v.ifaces:
            n = drops.get(iface)
            if n is None:  # gone (the VR rebooted): install again
                v.stale = True
                v.drops.pop(iface, None)
                continue
            before = v.drops.get(iface, 0)
            v.drops[iface] = n
            if n >= before:
                total += n - before
        return total / period_s

    def period(self, period_s: float, vr_ifaces: Mapping[str, tuple[str, ...]], loads: Mapping[str, VrLoad],
               counters: Mapping[str, Any]) -> None:
        """One control period, before the caps are written: follow each VR's limit."""
        if self.limiter is None:
            return
        for iface in sorted(self.pending_removals):
            self._remove_iface("?", iface)
        # Only the VRs with early drop on or a limiter in place or parked: nothing to do for the others.
        engaged = [(vr, v) for vr, v in self.vrs.items() if v.on or v.limit is not None or v.parked]
        drops = self._read_drops([v for _, v in engaged])
        self.dropped_pps = {}
        for vr, v in engaged:
            ifaces = vr_ifaces.get(vr, ())
            load = loads.get(vr)
            if not v.on or load is None or not ifaces:
                if (v.limit is not None or v.parked) and (not v.on or load is None):
                    self._remove(vr, v)  # gone, inactive or switched off: no limiter
                continue
            if load.held:  # paused: the limit stays as the cap does; what it drops is still counted
                if v.limit is not None:
                    self.dropped_pps[vr] = self._dropped_pps(v, period_s, drops)
                continue
            if self._counts_bytes:  # the TBF's rate is in bytes, from the mean packet size
                self._mean_bytes(v, ifaces, counters)
            dropped = self._dropped_pps(v, period_s, drops)
            if v.limit is not None:
                self.dropped_pps[vr] = dropped
            if load.counter_reset:
                v.stale = v.limit is not None
            handed = load.handed_pps
            offered = math.nan if handed is None else handed + dropped
            fwd = math.nan if load.forwarded_pps is None else load.forwarded_pps
            if not load.counter_reset:  # the VR's own losses under the limit in place over the period
                v.loss = loss_factor(v.loss, LossInputs(load.setpoint_pps, load.forwarded_pps, handed,
                                                        None if v.limit is None else v.limit.rate_pps,
                                                        load.cpu_percent, load.cap_percent), self.tuning)
            want = decide(LimitInputs(load.setpoint_pps, fwd, offered, load.model_forwarded_pps, v.mean_bytes),
                          v.limit, self.tuning, v.loss)
            self._apply(vr, v, ifaces, want)

    def _apply(self, vr: str, v: _Vr, ifaces: tuple[str, ...], want: Limit | None) -> None:
        assert self.limiter is not None
        if want is None:
            if v.limit is not None:
                self._park(vr, v)
            return
        if want is v.limit and not v.stale and ifaces == v.ifaces:
            return
        raising = v.limit is None or want.rate_pps > v.limit.rate_pps
        setting = LimiterSetting(want.rate_bytes_per_s, want.burst_bytes, rate_pps=want.rate_pps,
                                 burst_s=self.tuning.burst_s)
        for gone in (set(v.ifaces) | set(v.parked)) - set(ifaces):
            self._remove_iface(vr, gone)
        v.parked = ()
        ok = True
        created: dict[str, bool | None] = {}
        for iface in ifaces:
            try:
                created[iface] = self.limiter.install(iface, setting)
            except LimiterError as e:
                self._fail(vr, "install" if v.limit is None else ("raise" if raising else "lower"), e)
                ok = False
                break
        if not ok:
            # Never leave a limit tighter than wanted: take it off every interface (retried if that fails too).
            for iface in ifaces:
                self._remove_iface(vr, iface)
            v.limit, v.ifaces, v.drops, v.stale = None, (), {}, False
            return
        # Each limiter's drop counter from now on (a new qdisc counts from 0; a changed one goes on
        # from this period's read): the next period's offered load is what it hands the VR plus
        # what it drops.  Read again only when the adapter cannot tell which.
        for iface in ifaces:
            if created[iface] is True:
                v.drops[iface] = 0
                continue
            if created[iface] is False and iface in v.drops:
                continue
            try:
                n = self.limiter.dropped_packets(iface)
            except LimiterError:
                n = None
            if n is None:
                v.drops.pop(iface, None)
            else:
                v.drops[iface] = n
        event(log, logging.INFO, "early_drop_limit", vr=vr, rate_pps=round(want.rate_pps), loss_factor=round(v.loss, 3),
              rate_bytes_per_s=want.rate_bytes_per_s, burst_bytes=want.burst_bytes, interfaces=list(ifaces))
        v.limit, v.ifaces, v.stale = want, ifaces, False
