"""The daemon's decision logic: the control period over its instances, on arrays.  Pure.

Nothing here reads a clock, a file or a socket.  The service layer (:mod:`xtc.daemon.service`)
hands :class:`DaemonCore` the time, the measured rates (:class:`~xtc.daemon.meter.Readings`) and the
VRs' current caps, and applies the actions it returns (:class:`SetCap`, :class:`RestoreCap`); it then
reports back whether each action worked (:meth:`DaemonCore.cap_written`,
:meth:`DaemonCore.cap_failed`, ...), so that a failed write is retried next period and never forgotten.

:class:`DaemonCore` is an :class:`~xtc.daemon.instances.InstanceTable` (the instances' state
machine, the manager's requests and persistence: :mod:`xtc.daemon.instances`) with the period: the
active instances' controllers step together on arrays (the bank, :class:`~xtc.control.bank.ControllerBank`,
and one by one the controllers it does not take), and the caps to write follow.

Caps are written only when they change, and again when a VR reappears, when its counters reset
(a reboot may have reset its cap) and every ``reassert_period_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_
from typing import Any, Callable, Mapping

import numpy as np

from xtc.control import Controller
from xtc.control.bank import ALL_ROWS, ControllerBank, Rows

from .instances import (ACTIVE, SATURATED_AFTER_PERIODS, SATURATED_TOLERANCE, SLACK_COUNT_MAX, STATE_SCHEMA, Action,
                        Checkpoint, InstanceMachine, InstanceTable, RestoreCap, SetCap, StateError, VrView,
                        saturation_step)
from .meter import Readings, VrReading

__all__ = [
    "STATE_SCHEMA",
    "SATURATED_AFTER_PERIODS",
    "SLACK_COUNT_MAX",
    "VrReading",
    "Action",
    "SetCap",
    "RestoreCap",
    "InstanceMachine",
    "DaemonCore",
    "StateError",
    "Checkpoint",
]


def _unchanged(cap: np.ndarray, applied: np.ndarray) -> np.ndarray:
    """Commands equal to the ones last written: ``math.isclose(applied, cap, rel_tol=1e-9)`` as
    CPython computes it, element by element (NaN, never written: False)."""
    diff = np.abs(cap - applied)
    return (applied == cap) | (diff <= np.abs(1e-9 * cap)) | (diff <= np.abs(1e-9 * applied))



class _Frame:
    """The layout of a core's live instances (those of present VRs) for its periods.

    Built by :meth:`DaemonCore._live_frame` and kept while it :meth:`holds`: the same instance
    objects under the same names, the same presence of the VRs (:attr:`DaemonCore._vrs_epoch`),
    the same states and controller objects, the same bank.  ``insts``, ``names``, ``ctls`` are
    the live instances in the instances' order; ``active`` and ``in_bank`` (active and stepped
    by the bank) are masks over them.
    """

    __slots__ = ("bank", "vrs", "epoch", "keys", "all", "names", "insts", "states", "ctls", "active",
                 "in_bank", "idle", "bank_idx", "bank_insts", "bank_ctls", "n_bank", "rnames", "ridx",
                 "rows", "bank_pos", "reads_cpu", "dead_zone", "any_reads_cpu")

    def __init__(self, core: "DaemonCore", keys: list[str], all_insts: list[InstanceMachine], names: list[str],
                 insts: list[InstanceMachine], states: list[str], ctls: list[Any], active: np.ndarray,
                 in_bank: np.ndarray) -> None:
        self.bank, self.vrs, self.epoch = core._bank, core.vrs, core._vrs_epoch
        self.keys, self.all = keys, all_insts
        self.names, self.insts, self.states, self.ctls = names, insts, states, ctls
        self.active, self.in_bank = active, in_bank
        self.idle = np.flatnonzero(~active).tolist()
        self.bank_idx = np.flatnonzero(in_bank)
        il = self.bank_idx.tolist()
        self.bank_insts = [insts[k] for k in il]
        self.bank_ctls = [ctls[k] for k in il]
        self.n_bank = len(il)
        # The bank's controllers' state as columns (they are attached to them: see Rows), and the
        # row of each live instance's controller in them (-1: not banked).
        self.rows = core._bank.rows(self.bank_ctls) if core._bank is not None and il else None
        self.bank_pos = np.full(len(insts), -1, dtype=np.intp)
        self.bank_pos[self.bank_idx] = np.arange(len(il), dtype=np.intp)
        self.rnames: list[str] | None = None
        self.ridx = np.empty(0, dtype=np.intp)
        # The controllers that use a CPU reading (XtcTuning.cap_bound_fraction > 0) and their dead zones.
        tunings = [getattr(c, "tuning", None) for c in ctls]
        self.reads_cpu = np.array([getattr(t, "cap_bound_fraction", 0.0) > 0.0 for t in tunings], dtype=bool)
        self.dead_zone = np.array([getattr(t, "dead_zone_fraction", 0.0) for t in tunings], dtype=np.float64)
        self.any_reads_cpu = bool(self.reads_cpu.any())

    def holds(self, core: "DaemonCore") -> bool:
        """Is this still the layout of ``core``'s live instances?"""
        instances = core.instances
        if core._bank is not self.bank or core.vrs is not self.vrs or core._vrs_epoch != self.epoch \
                or len(instances) != len(self.all):
            return False
        if not all(map(is_, instances.values(), self.all)) or list(instances) != self.keys:
            return False
        insts = self.insts
        return [i.state for i in insts] == self.states and all(map(is_, [i.controller for i in insts], self.ctls))

    def reading_rows(self, readings: Readings) -> np.ndarray:
        """The row of each live instance in the meter's arrays (-1: no reading)."""
        if readings.names is not self.rnames:
            get = readings.index.get
            self.ridx = np.array([get(n, -1) for n in self.names], dtype=np.intp)
            self.rnames = readings.names
        return self.ridx


@dataclass
class DaemonCore(InstanceTable):
    """All instances of one daemon and the rules that drive them: the instance table
    (:class:`~xtc.daemon.instances.InstanceTable`: requests, persistence, views) and the control period.
    Its parameters are the instance table's.
    """

    #: After a :meth:`period`: the active VRs short of their setpoints beyond the dead zone, whose
    #: controllers would raise their caps; their CPU use over the next period (``cpu_percent``)
    #: tells whether the cap binds (``XtcTuning.cap_bound_fraction``).
    cpu_wanted: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    #: The instances whose ``slack_periods`` is not 0, by ``id``.
    _slack: dict[int, InstanceMachine] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: The bank that steps the factory's controllers together (None: the factory's kind has none).
    _bank: ControllerBank | None = field(default=None, init=False, repr=False, compare=False)
    _bank_factory: Any = field(default=None, init=False, repr=False, compare=False)
    #: id(controller) -> (controller, accepted by the bank): the bank's check, once per controller.
    _bank_seen: dict[int, tuple[Any, bool]] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: The live instances' layout of the last period (see :class:`_Frame`).
    _frame: "_Frame | None" = field(default=None, init=False, repr=False, compare=False)
    #: (readings' names, vrs, epoch, rows of the readings with a view, those views) of the last period.
    _reading_views: tuple[Any, Any, int, np.ndarray, list[VrView]] | None = \
        field(default=None, init=False, repr=False, compare=False)

    def _banked(self, ctl: Controller) -> bool:
        """Does the bank step ``ctl`` (same class and parameters as the factory's controllers)?"""
        seen = self._bank_seen.get(id(ctl))
        if seen is not None and seen[0] is ctl:
            return seen[1]
        ok = self._bank is not None and self._bank.accepts(ctl)
        self._bank_seen[id(ctl)] = (ctl, ok)
        return ok

    def _refresh_bank(self) -> None:
        """Build the bank for the current factory (once per factory); forget controllers gone."""
        if self._bank_factory is not self.controller_factory:
            self._bank_factory = self.controller_factory
            self._bank = ControllerBank.like(self.controller_factory())
            self._bank_seen = {}
        elif len(self._bank_seen) > 2 * len(self.instances) + 64:
            live = {id(i.controller) for i in self.instances.values()}
            self._bank_seen = {k: v for k, v in self._bank_seen.items() if k in live}

    # ------------------------------------------------------------------------ control period
    def period(self, now_s: float, readings: Readings | Mapping[str, VrReading],
               cpu_percent: Mapping[str, float] | None = None) -> list[Action]:
        """One control period: step the active instances' controllers and say which caps to write.

        Parameters
        ----------
        now_s : float
            Monotonic time, seconds.
        readings : Readings
            Rates over the period just ended, for the VRs that could be measured (the meter's;
            any other mapping of VR name to :class:`VrReading` is taken through :meth:`Readings.of`).
        cpu_percent : mapping of VR name to float, optional
            CPU each VR used over the period just ended, percent of one CPU, for the VRs of the
            last period's :attr:`cpu_wanted` that the host could account (others: unknown).

        Returns
        -------
        list of SetCap and RestoreCap
            Caps to write (changed, never written, failed before, or due for re-assertion) and
            original caps still to restore.
        """
        readings = Readings.of(readings)
        self._set_views(readings)
        actions: list[Action] = []
        self.cpu_wanted = frozenset()
        if self.instances:
            self._refresh_bank()
            actions = self._period_instances(now_s, readings, cpu_percent)
        for name, cap in self.pending_restores.items():
            view = self.vrs.get(name)
            if view is not None and view.present:
                actions.append(RestoreCap(name, cap, self.pending_records.get(name)))
        return actions

    def _set_views(self, readings: Readings) -> None:
        """The VR views take the period's rates, from the readings' arrays (None where unknown)."""
        c = self._reading_views
        if c is None or c[0] is not readings.names or c[1] is not self.vrs or c[2] != self._vrs_epoch:
            get = self.vrs.get
            found = [get(n) for n in readings.names]
            rows = np.array([k for k, v in enumerate(found) if v is not None], dtype=np.intp)
            c = self._reading_views = (readings.names, self.vrs, self._vrs_epoch, rows,
                                       [v for v in found if v is not None])
        rows, views = c[3], c[4]
        if not views:
            return
        forwarded = readings.forwarded[rows].tolist()
        offered = readings.offered[rows].tolist()
        known = readings.known[rows]
        if not known.all():
            for k in np.flatnonzero(~known).tolist():
                forwarded[k] = offered[k] = None
        if readings.offered_known is not None:  # offered unknown, forwarded known (not from the meter)
            for k in np.flatnonzero(~readings.offered_known[rows]).tolist():
                offered[k] = None
        list(map(setattr, views, repeat("forwarded_pps"), forwarded))
        list(map(setattr, views, repeat("offered_pps"), offered))

    def _live_frame(self) -> "_Frame":
        """The layout of the live instances (present VRs), rebuilt when it no longer holds."""
        f = self._frame
        if f is not None and f.holds(self):
            return f
        vrs, banked = self.vrs, self._banked
        keys, all_insts, names, insts = list(self.instances), list(self.instances.values()), [], []
        for name, inst in self.instances.items():
            view = vrs.get(name)
            if view is not None and view.present:
                names.append(name)
                insts.append(inst)
        states = [i.state for i in insts]
        ctls = [i.controller for i in insts]
        active = np.array([st == ACTIVE for st in states], dtype=bool)
        in_bank = active & np.array([banked(c) for c in ctls], dtype=bool)
        f = self._frame = _Frame(self, keys, all_insts, names, insts, states, ctls, active, in_bank)
        return f

    def _period_instances(self, now_s: float, readings: Readings,
                          cpu_percent: Mapping[str, float] | None = None) -> list[Action]:
        """:meth:`period` for the instances: the controllers step, the caps to write.

        The same decisions, instance by instance, as stepping each controller and testing each
        cap alone (tests/unit/test_daemon_core_bank.py); done on arrays over the live instances'
        layout (:class:`_Frame`, kept between periods), with the factory's controllers stepped by
        the bank (:class:`~xtc.control.bank.ControllerBank`) and the others one by one.
        """
        f = self._live_frame()
        live = f.insts
        n = len(live)
        nan = math.nan
        # The readings of the live instances, on arrays: present, rate known, rates, counter reset.
        ridx = f.reading_rows(readings)
        has = ridx >= 0
        if readings.names:
            at = np.where(has, ridx, 0)
            known = has & readings.known[at]
            forwarded = np.where(known, readings.forwarded[at], nan)
            ok = readings.offered_known
            offered = np.where(known if ok is None else known & ok[at], readings.offered[at], nan)
            reset = has & readings.reset[at]
        else:  # nothing measured this period
            known = reset = has
            forwarded = offered = np.full(n, nan)
        if reset.any():
            for k in np.flatnonzero(reset).tolist():
                live[k].applied_cap_percent = None
        for k in f.idle:
            if live[k].saturated_periods != 0:
                live[k].saturated_periods = 0
        stepped = f.active & known
        in_bank = stepped & f.in_bank
        alone = stepped & ~f.in_bank
        cpu = None
        if cpu_percent:
            get_cpu = cpu_percent.get
            cpu = np.array([get_cpu(nm, nan) for nm in f.names], dtype=np.float64)
        if f.any_reads_cpu:
            # The VRs short of their setpoints beyond the dead zone, whose controllers would raise
            # their caps: the loop reads their CPU for the next period (does the cap bind?).
            setpoint = np.array([i.setpoint_pps for i in live], dtype=np.float64)
            short = stepped & (forwarded < (1.0 - f.dead_zone) * setpoint) & f.reads_cpu
            if short.any():
                self.cpu_wanted = frozenset(f.names[k] for k in np.flatnonzero(short).tolist())
        if alone.any():
            for k in np.flatnonzero(alone).tolist():
                self._step_one(live[k], readings[f.names[k]], None if cpu is None or cpu[k] != cpu[k] else cpu[k].item())
        if f.n_bank and in_bank.any():
            if np.array_equal(in_bank, f.in_bank):  # the usual case: every banked controller steps
                idx, b_insts, b_ctls, at = f.bank_idx, f.bank_insts, f.bank_ctls, ALL_ROWS
            else:
                idx = np.flatnonzero(in_bank)
                il = idx.tolist()
                b_insts, b_ctls, at = [live[k] for k in il], [f.ctls[k] for k in il], f.bank_pos[idx]
            self._step_bank(b_insts, b_ctls, forwarded[idx], offered[idx],
                            lambda k: readings[f.names[int(idx[k])]], f.rows, at, None if cpu is None else cpu[idx])
        self._count_slack(live, stepped, forwarded, cpu)
        # Which caps to write: never written, failed, changed, or due for re-assertion.
        applied = np.array([nan if (v := i.applied_cap_percent) is None else v for i in live], dtype=np.float64)
        cap = np.array([i.cap_percent for i in live], dtype=np.float64)
        if self.reassert_period_s > 0:
            last = np.array([nan if (v := i.last_write_s) is None else v for i in live], dtype=np.float64)
            due = now_s - last >= self.reassert_period_s  # NaN (never written): False
            if due.any():
                for k in np.flatnonzero(due).tolist():
                    live[k].applied_cap_percent = None
                applied[due] = nan
        same = _unchanged(cap, applied)
        # A controller that stepped and whose command is not written (unchanged) is still told the
        # cap in force, as after a write: on a quantising actuator its carry keeps accumulating
        # until the command crosses to the next whole cap (without it, a command pinned at the
        # lowest cap froze the carry and the mean cap stayed below the one wanted).
        in_force = [i.cap_in_force_percent for i in live]
        has_force = np.array([v is not None for v in in_force], dtype=bool)
        kept_mask = same & stepped & has_force
        if kept_mask.all() and n:  # the steady state: every instance, in order
            cap[:] = self._tell_in_force(live, in_force, f.in_bank.tolist(), f.ctls, f.rows,
                                         None if f.n_bank == n else f.bank_pos)
            same = _unchanged(cap, applied)
        elif kept_mask.any():
            kept = np.flatnonzero(kept_mask).tolist()
            cap[kept] = self._tell_in_force([live[k] for k in kept], [in_force[k] for k in kept],
                                            in_bank[kept].tolist(), None, f.rows, f.bank_pos[kept])
            same = _unchanged(cap, applied)
        if same.all():
            return []
        return [SetCap(live[k].vr, live[k].cap_percent) for k in np.flatnonzero(~same).tolist()]

    def _step_bank(self, batch: list[InstanceMachine], ctls: list[Any], forwarded: np.ndarray, offered: np.ndarray,
                   reading_of: Callable[[int], VrReading], rows: Rows | None = None, at: Any = ALL_ROWS,
                   cpu: np.ndarray | None = None) -> None:
        """The bank's controllers of ``batch`` step on their rates; caps and saturation follow.

        ``offered`` and ``cpu`` (percent of one CPU) are NaN where unknown; ``reading_of(k)`` is
        the reading of ``batch[k]`` (for the scalar step, which names what the bank refuses);
        ``rows``, ``at``: the controllers' rows, if they are attached to them
        (:meth:`ControllerBank.rows`).
        """
        bank = self._bank
        assert bank is not None
        setpoint = np.array([i.setpoint_pps for i in batch], dtype=np.float64)
        caps, ok = bank.step(ctls, forwarded, setpoint, offered, rows, at, cpu)
        if not ok.all():
            for k in np.flatnonzero(~ok).tolist():  # the scalar step names what it refuses
                c = None if cpu is None or cpu[k] != cpu[k] else cpu[k].item()
                self._step_one(batch[k], reading_of(k), c)
        old = np.array([i.cap_percent for i in batch], dtype=np.float64)
        moved = ok & (caps != old)
        if moved.any():
            for k in np.flatnonzero(moved).tolist():
                batch[k].cap_percent = caps[k].item()
        # saturation_step of each stepped instance, on arrays
        b = bank.caps
        sat = np.array([i.saturated_periods for i in batch], dtype=np.int64)
        at_max = (caps >= b.cap_max_percent * (1 - 1e-9)) & (forwarded < (1 - SATURATED_TOLERANCE) * setpoint)
        at_min = (caps <= b.cap_min_percent * (1 + 1e-9)) & (forwarded > (1 + SATURATED_TOLERANCE) * setpoint)
        new = np.where(at_max, np.maximum(sat, 0) + 1, np.where(at_min, np.minimum(sat, 0) - 1, 0))
        changed = ok & (new != sat)
        if changed.any():
            for k in np.flatnonzero(changed).tolist():
                batch[k].saturated_periods = int(new[k])

    def _count_slack(self, live: list[InstanceMachine], stepped: np.ndarray, forwarded: np.ndarray,
                     cpu: np.ndarray | None) -> None:
        """``slack_periods`` of the instances short of their setpoints (few: the VRs whose CPU is
        read) and of those counted before.

        A leaky count, between 0 and :data:`SLACK_COUNT_MAX`: a period short by more than
        :data:`SATURATED_TOLERANCE` with a cap that did not bind, one more; one short with a cap that
        bound, or one not short, one less; one short with no CPU reading, unchanged; not stepped,
        no longer active, or a new setpoint: 0.  So a VR whose TCP rates scatter by 10-20% from one
        period to the next around a mean its host holds 10-25% under its setpoint is flagged in the
        periods that happen to reach the setpoint too, and a period now and then at the cap (a
        partly held TCP VR) does not wipe out the periods before it.
        """
        slack: dict[int, InstanceMachine] = {}
        seen: set[int] = set()
        if cpu is not None:
            for k in np.flatnonzero(stepped & ~np.isnan(cpu)).tolist():
                inst = live[k]
                ctl = inst.controller
                if getattr(getattr(ctl, "tuning", None), "cap_bound_fraction", 0.0) <= 0.0:
                    continue
                seen.add(id(inst))
                n = inst.slack_periods
                if forwarded[k] < (1 - SATURATED_TOLERANCE) * inst.setpoint_pps:
                    bound = ctl.cap_bound(cpu[k].item())  # type: ignore[attr-defined]
                    if bound is False:
                        n = min(n + 1, SLACK_COUNT_MAX)
                    elif bound:
                        n = max(n - 1, 0)
                else:
                    n = max(n - 1, 0)
                inst.slack_periods = n
                if n:
                    slack[id(inst)] = inst
        vrs, instances = self.vrs, self.instances
        for key, inst in self._slack.items():
            if key in seen:
                continue
            if inst.state == ACTIVE and instances.get(inst.vr) is inst and inst.slack_periods > 0:
                view = vrs.get(inst.vr)
                y = None if view is None or not view.present else view.forwarded_pps
                if y is not None:
                    if not y < (1 - SATURATED_TOLERANCE) * inst.setpoint_pps:
                        inst.slack_periods -= 1  # not short: one less
                    if inst.slack_periods:
                        slack[key] = inst  # (short with no CPU reading this period: kept as it is)
                        continue
            inst.slack_periods = 0
        self._slack = slack

    @staticmethod
    def _step_one(inst: InstanceMachine, r: VrReading, cpu_percent: float | None = None) -> None:
        try:
            inst.cap_percent = inst.controller.step(r.forwarded_pps, inst.setpoint_pps, r.offered_pps, cpu_percent)
            saturation_step(inst, r.forwarded_pps)
        except ValueError as e:
            inst.actuation_error = f"measurement refused by the controller: {e}"

    # ----------------------------------------------------------------- outcome of actions
    def caps_written(self, written: list[tuple[str, float, float]], now_s: float) -> None:
        """:meth:`cap_written` for many writes at once: ``(vr, cap_in_force_percent, commanded_percent)``.

        The same result as calling :meth:`cap_written` for each in turn (the VRs are distinct);
        the bank's controllers learn their caps in force together.
        """
        if self.instances:
            self._refresh_bank()
        batch: list[InstanceMachine] = []
        got: list[float] = []
        seen, instances = self._bank_seen, self.instances
        for vr, in_force, commanded in written:
            inst = instances.get(vr)
            if inst is None:
                continue
            ctl = inst.controller
            ok = seen.get(id(ctl))  # self._banked(ctl), inline
            if inst.state == ACTIVE and (ok[1] if ok is not None and ok[0] is ctl else self._banked(ctl)):
                inst.applied_cap_percent = commanded
                inst.cap_in_force_percent = in_force
                inst.last_write_s = now_s
                inst.actuation_error = None
                batch.append(inst)
                got.append(in_force)
            else:
                self.cap_written(vr, in_force, now_s, commanded_percent=commanded)
        if batch:
            self._tell_in_force(batch, got, [True] * len(batch))

    def _tell_in_force(self, insts: list[InstanceMachine], got: list[float],
                       banked: list[bool] | None = None, ctls: list[Any] | None = None,
                       rows: Rows | None = None, pos: np.ndarray | None = None) -> list[float]:
        """Each instance's controller learns its cap in force (the bank's together); caps follow.

        ``banked[k]``: whether the bank steps ``insts[k]``'s controller, when the caller knows
        (default: asked of the bank); ``ctls``: the instances' controllers, when the caller has
        them; ``rows``: the rows the banked controllers are attached to, ``pos[k]`` the row of
        ``insts[k]``'s (None: row k).  Returns the instances' new caps, percent of one CPU.
        """
        if banked is None:
            banked = [self._banked(i.controller) for i in insts]
        caps = [0.0] * len(insts)
        if all(banked):  # the usual case: one call, no index lists
            assert self._bank is not None
            c, ok = self._bank.applied([i.controller for i in insts] if ctls is None else ctls,
                                       np.array(got, dtype=np.float64), rows, ALL_ROWS if pos is None else pos)
            caps = c.tolist()
            todo = np.flatnonzero(~ok).tolist()
            idx: list[int] = []
        else:
            todo = [k for k, b in enumerate(banked) if not b]
            idx = [k for k, b in enumerate(banked) if b]
        if idx:
            assert self._bank is not None
            c, ok = self._bank.applied([insts[k].controller for k in idx], np.array([got[k] for k in idx], dtype=np.float64),
                                       rows, None if rows is None else (np.array(idx, dtype=np.intp) if pos is None else pos[idx]))
            for k, cc, o in zip(idx, c.tolist(), ok.tolist()):
                if o:
                    caps[k] = cc
                else:
                    todo.append(k)
        for k in todo:
            inst = insts[k]
            try:
                inst.controller.applied(got[k])
            except ValueError as e:
                inst.actuation_error = f"cap in force refused by the controller: {e}"
            caps[k] = inst.controller.cap_percent
        list(map(setattr, insts, repeat("cap_percent"), caps))
        return caps

    def cap_written(self, vr: str, cap_in_force_percent: float, now_s: float,
                    commanded_percent: float | None = None) -> None:
        """A :class:`SetCap` succeeded: the host now has ``cap_in_force_percent`` in force.

        ``commanded_percent`` is the cap the action asked for (default: the instance's current
        command); the same command is not written again until it changes or is due for
        re-assertion.  The controller is told the cap in force (:meth:`Controller.applied`), so
        that a quantising actuator (whole Xen percents, quota microseconds) is dithered around.
        """
        inst = self.instances.get(vr)
        if inst is not None:
            inst.applied_cap_percent = inst.cap_percent if commanded_percent is None else commanded_percent
            inst.cap_in_force_percent = cap_in_force_percent
            inst.last_write_s = now_s
            inst.actuation_error = None
            if inst.state == ACTIVE:
                self._tell_in_force([inst], [cap_in_force_percent])

