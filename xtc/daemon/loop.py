"""The closed loop: one control period of every XTC instance on one host.

:class:`ControlLoop` steps the pure core (:class:`~xtc.daemon.core.DaemonCore`) with a host
(:class:`~xtc.host.base.Host`) and the time it is given::

    counters = host.read_counters()                 # once per period (netlink or /proc/net/dev)
    readings = meter.update(now, counters, vrs)     # forwarded / offered pps per VR
    cpu = cpu_meter.update(now, host.read_cpu_ns(core.cpu_wanted))  # only VRs short of their setpoints
    actions = core.period(now, readings, cpu)       # controllers step; caps to write
    in_force = host.apply_cap(vr, cap)              # for each cap that changed
    core.cap_written(vr, in_force, now)             # the controller learns the cap in force

The daemon (:mod:`xtc.daemon.service`, real time, ZeroMQ, metrics, state), the simulator's
experiments, the demo and the benchmarks (:mod:`xtc_lab`, on the simulated plant or on real
interfaces and cgroups) all run this loop, so what is benchmarked is what runs.  It reads no
clock: the caller passes ``now_s`` (monotonic seconds), from the wall or from a simulated plant.

CPU time is read only for the VRs short of their setpoints, whose caps the controllers would raise
(:attr:`DaemonCore.cpu_wanted`): from the period after one first falls short (its first reading
starts the interval), its CPU use tells the controller whether its cap binds, and a cap that binds
is raised even where the packets say the VR is not cap-limited.  VRs at their setpoints are not
read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from collections.abc import Callable, Mapping
from typing import Any

from xtc.host.base import Host
from xtc.host.errors import HostAdapterError, VRNotRunning

from .api import ApiError, Request
from .core import Action, DaemonCore, SetCap
from xtc.service.logs import event
from .meter import CpuMeter, PeriodMeter, VrReading
from .limiter_state import EarlyDrop, VrLoad
from .power_state import PowerState, VrOff

__all__ = ["ControlLoop", "PeriodReport", "ActionOutcomes", "DISCOVERY_PERIOD_S", "PUNISHMENT_COMMANDS"]

#: The manager commands of the policer's punishments (issue 48), handled by the loop, not the core.
PUNISHMENT_COMMANDS = ("early_drop", "vr_off", "vr_on")

log = logging.getLogger("xtc.daemon")

#: VR discovery (libvirt domain list, interfaces) is refreshed this often, seconds.
DISCOVERY_PERIOD_S = 5.0


@dataclass
class ActionOutcomes:
    """What became of the cap writes and restores of one batch of actions."""

    writes_ok: int = 0
    writes_failed: int = 0
    restores_ok: int = 0
    restores_failed: int = 0
    #: The VRs whose cap was written or restored, one entry per change (for the per-VR metric).
    changed: list[str] = field(default_factory=list)


@dataclass
class PeriodReport:
    """One control period: the readings, what was written, and what failed."""

    now_s: float
    #: The meter's readings (a :class:`~xtc.daemon.meter.Readings`; an empty dict when the counters could not be read).
    readings: Mapping[str, VrReading] = field(default_factory=dict)
    outcomes: ActionOutcomes = field(default_factory=ActionOutcomes)
    #: The counters could not be read (the message); the controllers did not step.
    meter_error: str | None = None
    #: CPU use over the period of the VRs short of their setpoints, percent of one CPU.
    cpu_percent: Mapping[str, float] = field(default_factory=dict)


class ControlLoop:
    """Every XTC instance of one host, stepped once per control period.

    Parameters
    ----------
    core : DaemonCore
        The instances and their controllers.
    host : Host
        The VRs, their counters and their caps.
    meter : PeriodMeter, optional
        Rates from consecutive counter readings.
    discovery_period_s : float
        How often :meth:`period` refreshes the VR list, seconds.
    clock : callable, optional
        Monotonic seconds, read when the counters have been read: the period is stamped then, not
        when it was called, so that a slow VR listing before the read (a libvirtd that stalls for
        seconds) does not put that time into the counters' interval and not into the meter's.
        Without it (a simulated host on its own clock) the period's ``now_s`` is the stamp.
    """

    def __init__(self, core: DaemonCore, host: Host, meter: PeriodMeter | None = None,
                 discovery_period_s: float = DISCOVERY_PERIOD_S,
                 clock: Callable[[], float] | None = None) -> None:
        self.core = core
        self.host = host
        self.clock = clock
        self.meter = meter or PeriodMeter()
        #: The CPU use of the VRs short of their setpoints (:attr:`DaemonCore.cpu_wanted`).
        self.cpu_meter = CpuMeter()
        self.discovery_period_s = discovery_period_s
        self.vrs: dict[str, tuple[str, ...]] = {}
        self._last_discovery_s: float | None = None
        #: VRs whose saved original record could not be checked against the host at start (the VR
        #: could not be looked at then): checked before their first cap write (:meth:`apply`).
        self.unchecked_records: set[str] = set()
        self._misfits_logged: set[str] = set()
        # --- early drop (issue 48): the limiters on the VRs' interfaces, None = off (xtc/daemon/limiter_state.py)
        self.early_drop: EarlyDrop | None = None
        self._early_drop_last_s: float | None = None
        # --- the VRs turned off by ``vr_off`` (issue 48: the policer's last punishment; xtc/daemon/power_state.py)
        self.power = PowerState()
        #: Unix seconds for the records of ``vr_off`` (the service gives its wall clock).
        self.wall_clock: Callable[[], float] = lambda: 0.0

    # ------------------------------------------------------------------------ VR inventory
    def discover(self, now_s: float, force: bool = False) -> bool:
        """Refresh the VR list from the host (every ``discovery_period_s``).  False if it failed."""
        if not force and self._last_discovery_s is not None and now_s - self._last_discovery_s < self.discovery_period_s:
            return True
        self._last_discovery_s = now_s
        try:
            vrs = {name: tuple(ifs) for name, ifs in self.host.list_vrs().items()}
        except HostAdapterError as e:
            event(log, logging.WARNING, "discovery_failed", error=str(e))
            return False
        if vrs != self.vrs:
            event(log, logging.INFO, "vrs_changed", vrs=sorted(vrs))
            if self.early_drop is not None:  # early drop: a VR back (or with new interfaces) gets its limit again
                for name, ifs in vrs.items():
                    if self.vrs.get(name) != ifs:
                        self.early_drop.reappeared(name)
        self.vrs = vrs
        self.core.set_present(frozenset(vrs))
        return True

    # ----------------------------------------------------------------------------- period
    def period(self, now_s: float) -> PeriodReport:
        """One control period ending at ``now_s``: counters, controllers, caps.

        With a ``clock``, the period ends when the counters have been read (``report.now_s``).
        """
        self.discover(now_s)
        try:
            counters = self.host.read_counters()
        except HostAdapterError as e:
            if self.clock is not None:
                now_s = self.clock()
            report = PeriodReport(now_s)
            # No rates this period; the next reading starts a new one.  Caps still get rewritten.
            self.meter.reset()
            report.meter_error = str(e)
            event(log, logging.WARNING, "meter_failed", error=str(e))
            readings: Mapping[str, VrReading] = {}
            counters = {}
        else:
            if self.clock is not None:
                now_s = self.clock()
            report = PeriodReport(now_s)
            readings = self.meter.update(now_s, counters, self.vrs, getattr(self.host, "counter_bits", 64))
        report.readings = readings
        cpu = self._cpu_over_period(now_s) if readings else {}
        report.cpu_percent = cpu
        actions = self.core.period(now_s, readings, cpu)
        self._start_cpu(now_s)
        if self.early_drop is not None:  # early drop: limits follow *before* the caps are written
            self._early_drop_period(now_s, readings, counters if readings else {}, actions, cpu)
        report.outcomes = self.apply(actions, now_s)
        return report

    # --------------------------------------------------------------- early drop (issue 48)
    def _early_drop_period(self, now_s: float, readings: Mapping[str, VrReading], counters: Mapping[str, Any],
                           actions: list[Action], cpu_percent: Mapping[str, float] | None = None) -> None:
        """Hand :class:`EarlyDrop` each active instance's period (with the model's prediction when
        the cap about to be written is a raise, and the VR's CPU use over the period with the cap in
        force over it where the daemon read it: whether the cap bound)."""
        assert self.early_drop is not None
        last, self._early_drop_last_s = self._early_drop_last_s, now_s
        if self.early_drop.idle():
            return  # nobody has early drop or a limiter: nothing to look at
        period_s = 0.0 if last is None else now_s - last
        next_cap = {a.vr: a.cap_percent for a in actions if isinstance(a, SetCap)}
        loads: dict[str, VrLoad] = {}
        for name in self.early_drop.on_vrs():  # only the VRs that have it: nothing else is touched
            inst, r = self.core.instances.get(name), readings.get(name)
            if inst is None or r is None:
                continue
            if inst.state != "active":  # paused: its limit is held (the policer's ladder pauses with it on)
                loads[name] = VrLoad(inst.setpoint_pps, r.forwarded_pps, r.offered_pps, None, r.counter_reset, held=True)
                continue
            # What the VR will forward at the cap about to be written, when that is a raise: the
            # measured rate plus the model's gain between the two caps (the model's slope, not its
            # absolute level, which an uncalibrated model gets wrong on another host).
            cur = inst.cap_in_force_percent if inst.cap_in_force_percent is not None else inst.applied_cap_percent
            nxt = next_cap.get(name)
            model = getattr(inst.controller, "model", None)
            predicted = None
            if (cur is not None and nxt is not None and nxt > cur and r.forwarded_pps is not None
                    and hasattr(model, "steady_state_kpps")):
                gain_pps = 1000.0 * (model.steady_state_kpps(nxt) - model.steady_state_kpps(cur))
                predicted = r.forwarded_pps + max(0.0, gain_pps)
            loads[name] = VrLoad(inst.setpoint_pps, r.forwarded_pps, r.offered_pps, predicted, r.counter_reset,
                                 cpu_percent=(cpu_percent or {}).get(name), cap_percent=cur)
        self.early_drop.period(period_s, self.vrs, loads, counters)
        # What a limited VR was offered is what its interfaces handed it plus what its limiters
        # dropped: reported so (status, list, samples), so that a policer does not take a VR whose
        # excess the host drops for one that backed off.
        views = self.core.vrs
        for name, dropped in self.early_drop.dropped_pps.items():
            view = views.get(name)
            if dropped > 0 and view is not None and view.offered_pps is not None:
                view.offered_pps += dropped

    # ---------------------------------------------------------------------------- CPU use
    def _read_cpu(self, vrs: frozenset[str], now_s: float) -> tuple[float, Mapping[str, int]] | None:
        """The host's CPU times of ``vrs`` (ns) and when they were read; None if it cannot tell."""
        read = getattr(self.host, "read_cpu_ns", None)
        if read is None:
            return None
        try:
            got = read(sorted(vrs))
        except HostAdapterError as e:
            event(log, logging.WARNING, "cpu_read_failed", error=str(e))
            return None
        return (self.clock() if self.clock is not None else now_s), got

    def _cpu_over_period(self, now_s: float) -> dict[str, float]:
        """CPU use over the period just ended of the VRs short of their setpoints in the last one."""
        want = self.core.cpu_wanted
        if not want:
            self.cpu_meter.reset()
            return {}
        got = self._read_cpu(want, now_s)
        if got is None:
            self.cpu_meter.reset()
            return {}
        return self.cpu_meter.update(*got)

    def _start_cpu(self, now_s: float) -> None:
        """The first reading of the VRs short of their setpoints from this period on."""
        want = self.core.cpu_wanted
        self.cpu_meter.keep(want)
        fresh = want - self.cpu_meter.known()
        if fresh:
            got = self._read_cpu(fresh, now_s)
            if got is not None:
                self.cpu_meter.start(*got)

    def apply(self, actions: list[Action], now_s: float) -> ActionOutcomes:
        """Carry out the core's actions on the host and report each outcome back to the core."""
        out = ActionOutcomes()
        # The caps in force go back to the core together, after the writes (each VR at most once).
        written: list[tuple[str, float, float]] = []
        debug = log.isEnabledFor(logging.DEBUG)
        for act in actions:
            if isinstance(act, SetCap):
                if self.unchecked_records and act.vr in self.unchecked_records and not self._record_fits(act.vr):
                    out.writes_failed += 1
                    continue
                try:
                    in_force = self.host.apply_cap(act.vr, act.cap_percent)
                except HostAdapterError as e:
                    self.core.cap_failed(act.vr, str(e))
                    out.writes_failed += 1
                    event(log, logging.WARNING, "cap_write_failed", vr=act.vr, cap_percent=act.cap_percent, error=str(e))
                else:
                    written.append((act.vr, in_force, act.cap_percent))
                    out.writes_ok += 1
                    out.changed.append(act.vr)
                    if debug:
                        event(log, logging.DEBUG, "cap_written", vr=act.vr, cap_percent=act.cap_percent,
                              cap_in_force_percent=in_force)
            else:
                try:
                    self.host.restore_cap(act.vr, act.cap_percent, act.original_record)
                except HostAdapterError as e:
                    out.restores_failed += 1
                    event(log, logging.WARNING, "restore_failed", vr=act.vr, cap_percent=act.cap_percent, error=str(e))
                else:
                    self.core.restored(act.vr)
                    out.restores_ok += 1
                    out.changed.append(act.vr)
                    event(log, logging.INFO, "cap_restored", vr=act.vr, cap_percent=act.cap_percent)
        if written:
            self.core.caps_written(written, now_s)
        return out

    def _record_fits(self, vr: str) -> bool:
        """Check ``vr``'s saved original record before XTC first writes its cap (see :attr:`unchecked_records`).

        False (and no cap is written, the instance says why) if the record is not one of this VR on
        this backend: its restore could not give the VR its original back.
        """
        inst = self.core.instances.get(vr)
        record = inst.original_record if inst is not None else self.core.pending_records.get(vr)
        check = getattr(self.host, "check_original", None)
        if record is None or check is None:
            self.unchecked_records.discard(vr)
            return True
        try:
            check(vr, record)
        except HostAdapterError:
            return True  # still cannot be looked at: the write fails on its own
        except ValueError as e:
            self.core.cap_failed(vr, f"its saved original_record does not fit: {e}; no cap is written "
                                     f"(docs/guide/daemon-reload-and-state.md)")
            if vr not in self._misfits_logged:
                self._misfits_logged.add(vr)
                event(log, logging.ERROR, "state_record_misfit", vr=vr, error=str(e))
            return False
        self.unchecked_records.discard(vr)
        return True

    # --------------------------------------------------------------------------- requests
    def current_setting(self, req: Request) -> tuple[float | None, dict[str, Any] | None]:
        """What :meth:`DaemonCore.handle` needs from the host for ``req`` (the cap and its record).

        Raises
        ------
        ApiError
            The VR is not running, or the host cannot tell its cap.
        """
        if not self.core.needs_current_cap(req):
            return None, None
        v = self.core.vrs.get(req.vr or "")
        if v is None or not v.present or req.vr in self.core.instances:
            return None, None
        assert req.vr is not None
        try:
            record = self.host.snapshot(req.vr)
            cap = self.host.read_cap(req.vr)
        except VRNotRunning as e:
            raise ApiError("unknown_vr", str(e)) from None
        except HostAdapterError as e:
            raise ApiError("backend", f"cannot read the cap of {req.vr!r}: {e}") from None
        return cap, record

    def decide(self, req: Request, now_s: float) -> tuple[dict[str, Any], list[Action]]:
        """Validate ``req`` against the state and the host; nothing is written to the host yet.

        The caller persists the core's state (when it must survive a crash) and then calls
        :meth:`apply` with the actions.  Raises :class:`ApiError` and changes nothing when the
        request does not apply.
        """
        if req.cmd in PUNISHMENT_COMMANDS:
            return self._punishment(req), []
        cap, record = self.current_setting(req)
        out = self.core.handle(req, now_s, cap, record)
        if self.early_drop is not None and req.vr is not None:  # early drop: the activation's choice; deactivation removes it
            if req.cmd == "activate":
                self.early_drop.choose(req.vr, req.early_drop)
            elif req.cmd == "deactivate":
                self.early_drop.forget(req.vr)
        return out

    # ------------------------------------------------- the policer's punishments (issue 48)
    def _instance(self, vr: str) -> Any:
        inst = self.core.instances.get(vr)
        if inst is None:
            if vr not in self.core.vrs:
                raise ApiError("unknown_vr", f"no VR named {vr!r}")
            raise ApiError("bad_state", f"VR {vr!r} has no XTC instance (state inactive); activate it first")
        return inst

    def _punishment(self, req: Request) -> dict[str, Any]:
        """``early_drop``, ``vr_off`` and ``vr_on``: checked, done on the host, then recorded
        (the caller saves the state).  Raises :class:`ApiError` and changes nothing when refused."""
        vr = req.vr
        assert vr is not None
        if req.cmd == "early_drop":
            self._instance(vr)
            ed = self.early_drop
            want_on = bool(req.early_drop) if ed is None else (ed.default_on if req.early_drop is None else req.early_drop)
            if want_on and (ed is None or ed.limiter is None):
                raise ApiError("unsupported", "early drop has no limiter on this host (see the daemon's "
                                              "early_drop_unavailable log); nothing was changed")
            if ed is not None and ed.is_on(vr) != want_on:
                ed.choose(vr, req.early_drop)
                self.core.dirty = True
                event(log, logging.INFO, "early_drop_switched", vr=vr, on=want_on)
            return self.core.describe(vr)
        if req.cmd == "vr_off":
            inst = self._instance(vr)
            if vr in self.power.off:
                return self.core.describe(vr)  # off already: nothing to do
            power_off = getattr(self.host, "power_off", None)
            if power_off is None:
                raise ApiError("unsupported", f"the {getattr(self.host, 'name', '?')} backend cannot turn a VR off; "
                                              "nothing was changed")
            try:
                record = power_off(vr)
            except HostAdapterError as e:
                raise ApiError("backend", f"turning VR {vr!r} off failed: {e}; nothing was changed") from None
            reason = req.reason or "not given"
            self.power.off[vr] = VrOff(reason, self.wall_clock(), dict(record))
            if inst.state == "active":
                inst.state = "paused"
            self.core.dirty = True
            self._last_discovery_s = None  # the next period sees it gone
            event(log, logging.WARNING, "vr_off", vr=vr, reason=reason)
            return self.core.describe(vr)
        # vr_on
        off = self.power.off.get(vr)
        if off is None:
            if vr not in self.core.vrs and vr not in self.core.instances:
                raise ApiError("unknown_vr", f"no VR named {vr!r}")
            raise ApiError("bad_state", f"VR {vr!r} was not turned off by this daemon (vr_off); nothing to turn on")
        power_on = getattr(self.host, "power_on", None)
        if power_on is None:
            raise ApiError("unsupported", f"the {getattr(self.host, 'name', '?')} backend cannot turn a VR on")
        try:
            power_on(vr, off.record)
        except (HostAdapterError, ValueError) as e:
            raise ApiError("backend", f"turning VR {vr!r} on failed: {e}; it is still off") from None
        del self.power.off[vr]
        self.core.dirty = True
        self._last_discovery_s = None
        event(log, logging.WARNING, "vr_on", vr=vr, was_off_for=off.reason)
        return self.core.describe(vr)

    def undo_punishment(self, req: Request, before: Any) -> None:
        """The state file could not be written after :meth:`_punishment`: put back what it did
        (``before``: the VR's :class:`VrOff` or early-drop choice before the request)."""
        vr = req.vr
        assert vr is not None
        try:
            if req.cmd == "early_drop" and self.early_drop is not None:
                self.early_drop.choose(vr, before)
            elif req.cmd == "vr_off" and before is None and vr in self.power.off:
                off = self.power.off.pop(vr)
                self.host.power_on(vr, off.record)  # type: ignore[attr-defined]
            elif req.cmd == "vr_on" and before is not None and vr not in self.power.off:
                self.power.off[vr] = VrOff(before.reason, before.since_unix_s, self.host.power_off(vr))  # type: ignore[attr-defined]
        except (HostAdapterError, ValueError) as e:
            event(log, logging.ERROR, "punishment_undo_failed", vr=vr, cmd=req.cmd, error=str(e))
        self._last_discovery_s = None

    def handle(self, req: Request, now_s: float) -> dict[str, Any]:
        """:meth:`decide` and :meth:`apply` in one (for callers with no state file)."""
        result, actions = self.decide(req, now_s)
        self.apply(actions, now_s)
        return result

    # ---------------------------------------------------------------------------- stopping
    def restore_all(self) -> ActionOutcomes:
        """Give every controlled VR its original cap back (instances stay in the core's state)."""
        out = ActionOutcomes()
        for act in self.core.shutdown_actions():
            try:
                self.host.restore_cap(act.vr, act.cap_percent, act.original_record)
                out.restores_ok += 1
                out.changed.append(act.vr)
                event(log, logging.INFO, "cap_restored", vr=act.vr, cap_percent=act.cap_percent)
            except HostAdapterError as e:
                out.restores_failed += 1
                event(log, logging.ERROR, "restore_failed", vr=act.vr, cap_percent=act.cap_percent, error=str(e))
        return out
