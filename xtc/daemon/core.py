"""The daemon's decision logic: XTC instances, manager requests and the control period.  Pure.

Nothing here reads a clock, a file or a socket.  The service layer (:mod:`xtc.daemon.service`)
hands :class:`DaemonCore` the time, the measured rates and the VRs' current caps, and applies the
actions it returns (:class:`SetCap`, :class:`RestoreCap`); it then reports back whether each
action worked (:meth:`DaemonCore.cap_written`, :meth:`DaemonCore.cap_failed`, ...), so that a failed
write is retried next period and never forgotten.

Instances
---------
One instance per VR, in one of three states::

    inactive --activate--> active --pause--> paused --resume--> active
        ^                    |                  |
        +----deactivate------+------------------+

- activate: the VR's current cap is recorded as its *original* cap (``None`` = unlimited) and
  the controller starts from it (bumpless).  Beside the percentage, the backend's exact record
  of the setting (:meth:`xtc.host.base.Backend.read_original`: e.g. the raw
  ``vcpu_quota`` and ``vcpu_period``) is kept as ``original_record``; it is opaque here and is
  handed back unchanged in :class:`RestoreCap`, so the VR gets exactly its setting back, not a
  setting rebuilt from a percentage.  Both are part of the persisted state before the first cap
  is written, so even a SIGKILL cannot lose them.
- pause: the controller stops; the cap stays where it is.
- resume: the controller restarts from the cap it left (bumpless).
- deactivate: the instance goes; the original cap is written back.  Until that write has
  succeeded the VR stays in :attr:`DaemonCore.pending_restores` (persisted, retried every period).

Caps are written only when they change, and again when a VR reappears, when its counters reset
(a reboot may have reset its cap) and every ``reassert_period_s``.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_
from typing import Any, Callable, Mapping

import numpy as np

from xtc.control import Controller
from xtc.control.bank import _EVERYTHING, ControllerBank, Rows

from .api import ApiError, Request
from .meter import Readings, VrReading

__all__ = [
    "STATE_SCHEMA",
    "VrReading",
    "SetCap",
    "RestoreCap",
    "InstanceMachine",
    "DaemonCore",
    "StateError",
    "Checkpoint",
]

STATE_SCHEMA = "xtc-daemon-state/1"
ACTIVE, PAUSED, INACTIVE = "active", "paused", "inactive"

ControllerFactory = Callable[[], Controller]


class StateError(ValueError):
    """A state file cannot be used (it names the problem)."""


@dataclass(frozen=True)
class SetCap:
    """Write ``cap_percent`` (percent of one CPU, never 0) as the VR's cap."""

    vr: str
    cap_percent: float


@dataclass(frozen=True)
class RestoreCap:
    """Give the VR back its original cap (``None`` = unlimited, as it was before XTC).

    ``original_record`` is the backend's exact record of that setting (None when only the
    percentage is known, e.g. a state file written before records were kept).
    """

    vr: str
    cap_percent: float | None
    original_record: Mapping[str, Any] | None = None


Action = SetCap | RestoreCap


@dataclass(slots=True)
class InstanceMachine:
    """The XTC instance of one VR (runtime state, persisted by :meth:`DaemonCore.to_state`)."""

    vr: str
    state: str
    setpoint_pps: float
    original_cap_percent: float | None
    controller: Controller
    cap_percent: float
    #: The command last written successfully (None: to be written).
    applied_cap_percent: float | None = None
    #: The cap the host reported in force after that write, percent of one CPU.
    cap_in_force_percent: float | None = None
    last_write_s: float | None = None
    actuation_error: str | None = None
    #: The backend's exact record of the original setting (opaque JSON object), or None.
    original_record: dict[str, Any] | None = None
    #: Consecutive periods the cap sat at its maximum below the setpoint (> 0) or at its minimum
    #: above it (< 0); see :data:`SATURATED_AFTER_PERIODS`.
    saturated_periods: int = 0
    #: A leaky count of the periods the VR was more than :data:`SATURATED_TOLERANCE` short of its
    #: setpoint while its measured CPU use stayed below the binding fraction of its cap in force
    #: (``XtcTuning.cap_bound_fraction``): its traffic or its host, not its cap, is the limit
    #: (:meth:`DaemonCore._count_slack`; flagged ``cap_slack`` from :data:`SATURATED_AFTER_PERIODS`).
    slack_periods: int = 0


def _lag_of(inst: InstanceMachine | None) -> dict[str, Any]:
    """``lag`` and ``lag_measured`` of an instance object (None for controllers without a lag estimate)."""
    c = inst.controller if inst is not None else None
    tuning = getattr(c, "tuning", None)
    if c is None or not getattr(tuning, "lag_probe", False):
        return {"lag": None, "lag_measured": None}
    le = c.lag_estimator  # type: ignore[attr-defined]
    return {"lag": le.lag, "lag_measured": le.confident}


#: An instance is flagged "saturated" (its setpoint unreachable with caps in range) after its cap
#: has sat at a bound for this many consecutive periods with the rate more than
#: :data:`SATURATED_TOLERANCE` short of (cap at its maximum) or above (cap at its minimum) the setpoint.
SATURATED_AFTER_PERIODS = 5
SATURATED_TOLERANCE = 0.03
#: The most ``InstanceMachine.slack_periods`` counts up to (so that a VR flagged ``cap_slack`` that then
#: reaches its setpoint loses the flag within ``SLACK_COUNT_MAX - SATURATED_AFTER_PERIODS + 1`` periods).
SLACK_COUNT_MAX = 2 * SATURATED_AFTER_PERIODS


def _unchanged(cap: np.ndarray, applied: np.ndarray) -> np.ndarray:
    """Commands equal to the ones last written: ``math.isclose(applied, cap, rel_tol=1e-9)`` as
    CPython computes it, element by element (NaN, never written: False)."""
    diff = np.abs(cap - applied)
    return (applied == cap) | (diff <= np.abs(1e-9 * cap)) | (diff <= np.abs(1e-9 * applied))


def _saturation_step(inst: InstanceMachine, forwarded_pps: float) -> None:
    caps = getattr(inst.controller, "caps", None)
    if caps is None:
        return
    cap = inst.cap_percent
    r = inst.setpoint_pps
    if cap >= caps.cap_max_percent * (1 - 1e-9) and forwarded_pps < (1 - SATURATED_TOLERANCE) * r:
        inst.saturated_periods = max(inst.saturated_periods, 0) + 1
    elif cap <= caps.cap_min_percent * (1 + 1e-9) and forwarded_pps > (1 + SATURATED_TOLERANCE) * r:
        inst.saturated_periods = min(inst.saturated_periods, 0) - 1
    else:
        inst.saturated_periods = 0


def saturation_of(inst: InstanceMachine | None) -> str | None:
    """``"cap_max"``, ``"cap_min"``, ``"cap_slack"`` or None: is the instance's setpoint out of
    reach of its caps (at their maximum, at their minimum, or with a cap its VR does not use up)?"""
    if inst is None or inst.state != ACTIVE:
        return None
    if inst.saturated_periods >= SATURATED_AFTER_PERIODS:
        return "cap_max"
    if inst.saturated_periods <= -SATURATED_AFTER_PERIODS:
        return "cap_min"
    if inst.slack_periods >= SATURATED_AFTER_PERIODS:
        return "cap_slack"
    return None


#: "Not in the table" in a :class:`Checkpoint`.
_MISSING: Any = object()


@dataclass(frozen=True)
class Checkpoint:
    """One VR's part of a :class:`DaemonCore` before a request (see :meth:`DaemonCore.checkpoint`)."""

    vr: str | None
    instance: Any
    pending_restore: Any
    pending_record: Any
    dirty: bool


@dataclass(slots=True)
class _VrView:
    present: bool = False
    forwarded_pps: float | None = None
    offered_pps: float | None = None


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


def _cap_value(name: str, v: Any, allow_none: bool) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise StateError(f"{name} must be a cap > 0 percent{' or null' if allow_none else ''}, got {v!r}")
    return float(v)


def _record_value(name: str, v: Any) -> dict[str, Any] | None:
    """An original record: None or a JSON object (str keys, JSON values); a deep copy."""
    if v is None:
        return None
    if not isinstance(v, dict) or not v:
        raise StateError(f"{name} must be a non-empty JSON object or null, got {v!r}"[:300])
    try:
        out = json.loads(json.dumps(v, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise StateError(f"{name} is not plain JSON: {e}") from None
    if not isinstance(out, dict) or any(not isinstance(k, str) for k in v):
        raise StateError(f"{name} must have string keys")
    return out


@dataclass
class DaemonCore:
    """All instances of one daemon and the rules that drive them.

    Parameters
    ----------
    controller_factory : callable
        Returns a fresh, unstarted controller (:func:`xtc.control.make_controller`).
    max_setpoint_pps : float
        Largest setpoint accepted, packets/s.
    reassert_period_s : float
        Rewrite every controlled cap at least this often, seconds (0 = never).
    """

    controller_factory: ControllerFactory
    max_setpoint_pps: float = 1e8
    reassert_period_s: float = 30.0
    instances: dict[str, InstanceMachine] = field(default_factory=dict)
    pending_restores: dict[str, float | None] = field(default_factory=dict)
    #: Exact original records of the pending restores that have one (see :class:`RestoreCap`).
    pending_records: dict[str, dict[str, Any]] = field(default_factory=dict)
    vrs: dict[str, _VrView] = field(default_factory=dict)
    #: Set when something that must survive a crash changed; the service saves and clears it.
    dirty: bool = False
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
    #: (VR names, instance names, both sorted) of the last :meth:`sample_rows`.
    _names_sorted: tuple[set[str], set[str], list[str]] | None = field(default=None, init=False, repr=False, compare=False)
    #: Bumped by :meth:`set_present` whenever a VR view comes, goes or changes presence.
    _vrs_epoch: int = field(default=0, init=False, repr=False, compare=False)
    #: (vrs, epoch, names) after the last :meth:`set_present`.
    _present_last: tuple[Any, int, frozenset[str]] | None = field(default=None, init=False, repr=False, compare=False)
    #: (vrs, epoch, len(vrs), instance names, instances, sorted (name, view, instance)) of :meth:`_sample_pairs`.
    _pairs: tuple[Any, ...] | None = field(default=None, init=False, repr=False, compare=False)
    #: The live instances' layout of the last period (see :class:`_Frame`).
    _frame: "_Frame | None" = field(default=None, init=False, repr=False, compare=False)
    #: (readings' names, vrs, epoch, rows of the readings with a view, those views) of the last period.
    _reading_views: tuple[Any, Any, int, np.ndarray, list[_VrView]] | None = \
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

    # ------------------------------------------------------------------------- VR inventory
    def set_present(self, names: set[str] | frozenset[str]) -> None:
        """The VRs the backend sees now.  A VR that (re)appears gets its cap rewritten."""
        last = self._present_last
        if last is not None and last[0] is self.vrs and last[1] == self._vrs_epoch \
                and len(self.vrs) == len(names) and last[2] == names:
            # Nothing changed since the last call (no view came, went or changed presence, and it
            # left exactly these present): every view is present, so each step below does nothing.
            return
        for name in names:
            v = self.vrs.setdefault(name, _VrView())
            if not v.present:
                self._vrs_epoch += 1
                v.present = True
                inst = self.instances.get(name)
                if inst is not None:
                    inst.applied_cap_percent = None
        for name, v in self.vrs.items():
            if name not in names and v.present:
                self._vrs_epoch += 1
                v.present = False
                v.forwarded_pps = v.offered_pps = None
                inst = self.instances.get(name)
                if inst is not None:
                    inst.applied_cap_percent = None
        for name in [n for n, v in self.vrs.items() if not v.present and n not in self.instances]:
            if name not in self.pending_restores:
                self._vrs_epoch += 1
                del self.vrs[name]
        self._present_last = (self.vrs, self._vrs_epoch, frozenset(names))

    # ---------------------------------------------------------------------------- requests
    @staticmethod
    def needs_current_cap(req: Request) -> bool:
        """True when :meth:`handle` needs the VR's current cap (read by the service)."""
        return req.cmd == "activate"

    def handle(
        self,
        req: Request,
        now_s: float,
        current_cap_percent: float | None = None,
        current_record: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, Any], list[Action]]:
        """Apply a validated request.

        Parameters
        ----------
        req : Request
            From :func:`xtc.daemon.api.parse_request`.
        now_s : float
            Monotonic time, seconds.
        current_cap_percent : float or None
            For ``activate``: the VR's cap now, percent of one CPU (None = unlimited).
        current_record : mapping, optional
            For ``activate``: the backend's exact record of the VR's setting now (a JSON
            object, kept opaque and restored as is); None if the backend has none.

        Returns
        -------
        result, actions
            The reply's ``result`` object and the cap writes to perform.

        Raises
        ------
        ApiError
            The request does not apply; nothing was changed.
        """
        cmd = req.cmd
        if cmd == "ping":
            return {"pong": True, "instances": len(self.instances)}, []
        if cmd == "list":
            return {"vrs": [self.describe(n) for n in sorted(self._names())]}, []
        assert req.vr is not None
        vr = req.vr
        if cmd == "status":
            if vr not in self.vrs and vr not in self.instances:
                raise ApiError("unknown_vr", f"no VR named {vr!r}")
            return self.describe(vr), []
        if cmd == "activate":
            return self._activate(vr, req.setpoint_pps, now_s, current_cap_percent, current_record)
        inst = self.instances.get(vr)
        if inst is None:
            if vr not in self.vrs:
                raise ApiError("unknown_vr", f"no VR named {vr!r}")
            raise ApiError("bad_state", f"VR {vr!r} has no XTC instance (state inactive); activate it first")
        if cmd == "setpoint":
            assert req.setpoint_pps is not None
            inst.setpoint_pps = req.setpoint_pps
            inst.slack_periods = 0  # a new setpoint: whether it is reachable is not known yet
            self.dirty = True
            return self.describe(vr), []
        if cmd == "pause":
            if inst.state != ACTIVE:
                raise ApiError("bad_state", f"VR {vr!r} is {inst.state}, not active")
            inst.state = PAUSED
            self.dirty = True
            return self.describe(vr), []
        if cmd == "resume":
            if inst.state != PAUSED:
                raise ApiError("bad_state", f"VR {vr!r} is {inst.state}, not paused")
            inst.controller.start(inst.cap_percent)
            inst.state = ACTIVE
            self.dirty = True
            return self.describe(vr), []
        if cmd == "deactivate":
            del self.instances[vr]
            self.pending_restores[vr] = inst.original_cap_percent
            if inst.original_record is not None:
                self.pending_records[vr] = inst.original_record
            self.dirty = True
            result = self.describe(vr)
            del result["restore_pending"]  # until the write is tried: the service says whether it failed
            return result, [RestoreCap(vr, inst.original_cap_percent, inst.original_record)]
        raise ApiError("unknown_command", f"unknown command {cmd!r}")  # pragma: no cover

    def _activate(
        self,
        vr: str,
        setpoint_pps: float | None,
        now_s: float,
        current_cap_percent: float | None,
        current_record: Mapping[str, Any] | None,
    ) -> tuple[dict[str, Any], list[Action]]:
        assert setpoint_pps is not None
        view = self.vrs.get(vr)
        if view is None or not view.present:
            raise ApiError("unknown_vr", f"no running VR named {vr!r}")
        if vr in self.instances:
            raise ApiError("bad_state", f"VR {vr!r} is already {self.instances[vr].state}; use 'setpoint' or 'resume'")
        try:
            if current_cap_percent is not None:
                _cap_value("current cap", current_cap_percent, allow_none=False)
            record = _record_value("current original record", None if current_record is None else dict(current_record))
        except StateError as e:
            raise ApiError("backend", str(e)) from None
        # A VR whose restore is still pending has not got its original back: keep that original.
        if vr in self.pending_restores:
            original = self.pending_restores.pop(vr)
            record = self.pending_records.pop(vr, None)
        else:
            original = current_cap_percent
        ctl = self.controller_factory()
        ctl.start(current_cap_percent if current_cap_percent is not None else 100.0)
        inst = InstanceMachine(
            vr=vr,
            state=ACTIVE,
            setpoint_pps=setpoint_pps,
            original_cap_percent=original,
            controller=ctl,
            cap_percent=ctl.cap_percent,
            applied_cap_percent=None,
            original_record=record,
        )
        self.instances[vr] = inst
        self.dirty = True
        return self.describe(vr), [SetCap(vr, inst.cap_percent)]

    # ------------------------------------------------------------------------ transactions
    def checkpoint(self, vr: str | None) -> "Checkpoint":
        """What :meth:`handle` may change for a request about ``vr`` (a deep copy), and ``dirty``.

        :meth:`rollback` puts it back: a request whose change could not be saved is undone.
        """
        missing = _MISSING
        if vr is None:
            return Checkpoint(None, missing, missing, missing, self.dirty)
        return Checkpoint(
            vr,
            copy.deepcopy(self.instances[vr]) if vr in self.instances else missing,
            self.pending_restores.get(vr, missing),
            copy.deepcopy(self.pending_records[vr]) if vr in self.pending_records else missing,
            self.dirty,
        )

    def rollback(self, cp: "Checkpoint") -> None:
        """Undo everything :meth:`handle` changed since ``cp`` was taken."""
        self.dirty = cp.dirty
        if cp.vr is None:
            return
        for table, value in ((self.instances, cp.instance), (self.pending_restores, cp.pending_restore),
                             (self.pending_records, cp.pending_record)):
            if value is _MISSING:
                table.pop(cp.vr, None)
            else:
                table[cp.vr] = value

    # ------------------------------------------------------------------------ control period
    def period(self, now_s: float, readings: Mapping[str, VrReading],
               cpu_percent: Mapping[str, float] | None = None) -> list[Action]:
        """One control period: step the active instances' controllers and say which caps to write.

        Parameters
        ----------
        now_s : float
            Monotonic time, seconds.
        readings : mapping of VR name to VrReading
            Rates over the period just ended, for the VRs that could be measured.
        cpu_percent : mapping of VR name to float, optional
            CPU each VR used over the period just ended, percent of one CPU, for the VRs of the
            last period's :attr:`cpu_wanted` that the host could account (others: unknown).

        Returns
        -------
        list of SetCap and RestoreCap
            Caps to write (changed, never written, failed before, or due for re-assertion) and
            original caps still to restore.
        """
        if isinstance(readings, Readings):
            self._set_views(readings)
        else:
            vrs = self.vrs
            for name, r in readings.items():
                view = vrs.get(name)
                if view is None:
                    continue
                view.forwarded_pps = r.forwarded_pps
                view.offered_pps = r.offered_pps
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
        """The VR views take the meter's rates (what :meth:`period` does with any mapping), from its arrays."""
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
        measured = readings.forwarded[rows].tolist()
        offered = readings.offered[rows].tolist()
        known = readings.known[rows]
        if not known.all():
            for k in np.flatnonzero(~known).tolist():
                measured[k] = offered[k] = None
        list(map(setattr, views, repeat("forwarded_pps"), measured))
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

    def _period_instances(self, now_s: float, readings: Mapping[str, VrReading],
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
        if isinstance(readings, Readings):
            ridx = f.reading_rows(readings)
            has = ridx >= 0
            at = np.where(has, ridx, 0)
            known = has & readings.known[at]
            measured = np.where(known, readings.forwarded[at], nan)
            offered = np.where(known, readings.offered[at], nan)
            reset = has & readings.reset[at]
        else:
            got = list(map(readings.get, f.names))
            known = np.array([r is not None and r.forwarded_pps is not None for r in got], dtype=bool)
            measured = np.array([nan if r is None or (v := r.forwarded_pps) is None else v for r in got],
                                dtype=np.float64)
            offered = np.array([nan if r is None or (v := r.offered_pps) is None else v for r in got],
                               dtype=np.float64)
            reset = np.array([r is not None and bool(r.counter_reset) for r in got], dtype=bool)
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
            short = stepped & (measured < (1.0 - f.dead_zone) * setpoint) & f.reads_cpu
            if short.any():
                self.cpu_wanted = frozenset(f.names[k] for k in np.flatnonzero(short).tolist())
        if alone.any():
            for k in np.flatnonzero(alone).tolist():
                self._step_one(live[k], readings[f.names[k]], None if cpu is None or cpu[k] != cpu[k] else cpu[k].item())
        if f.n_bank and in_bank.any():
            if np.array_equal(in_bank, f.in_bank):  # the usual case: every banked controller steps
                idx, b_insts, b_ctls, at = f.bank_idx, f.bank_insts, f.bank_ctls, _EVERYTHING
            else:
                idx = np.flatnonzero(in_bank)
                il = idx.tolist()
                b_insts, b_ctls, at = [live[k] for k in il], [f.ctls[k] for k in il], f.bank_pos[idx]
            self._step_bank(b_insts, b_ctls, measured[idx], offered[idx],
                            lambda k: readings[f.names[int(idx[k])]], f.rows, at, None if cpu is None else cpu[idx])
        self._count_slack(live, stepped, measured, cpu)
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

    def _step_bank(self, batch: list[InstanceMachine], ctls: list[Any], measured: np.ndarray, offered: np.ndarray,
                   reading_of: Callable[[int], VrReading], rows: Rows | None = None, at: Any = _EVERYTHING,
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
        caps, ok = bank.step(ctls, measured, setpoint, offered, rows, at, cpu)
        if not ok.all():
            for k in np.flatnonzero(~ok).tolist():  # the scalar step names what it refuses
                c = None if cpu is None or cpu[k] != cpu[k] else cpu[k].item()
                self._step_one(batch[k], reading_of(k), c)
        old = np.array([i.cap_percent for i in batch], dtype=np.float64)
        moved = ok & (caps != old)
        if moved.any():
            for k in np.flatnonzero(moved).tolist():
                batch[k].cap_percent = caps[k].item()
        # _saturation_step of each stepped instance, on arrays
        b = bank.caps
        sat = np.array([i.saturated_periods for i in batch], dtype=np.int64)
        at_max = (caps >= b.cap_max_percent * (1 - 1e-9)) & (measured < (1 - SATURATED_TOLERANCE) * setpoint)
        at_min = (caps <= b.cap_min_percent * (1 + 1e-9)) & (measured > (1 + SATURATED_TOLERANCE) * setpoint)
        new = np.where(at_max, np.maximum(sat, 0) + 1, np.where(at_min, np.minimum(sat, 0) - 1, 0))
        changed = ok & (new != sat)
        if changed.any():
            for k in np.flatnonzero(changed).tolist():
                batch[k].saturated_periods = int(new[k])

    def _count_slack(self, live: list[InstanceMachine], stepped: np.ndarray, measured: np.ndarray,
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
                if measured[k] < (1 - SATURATED_TOLERANCE) * inst.setpoint_pps:
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
            _saturation_step(inst, r.forwarded_pps)
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
                                       np.array(got, dtype=np.float64), rows, _EVERYTHING if pos is None else pos)
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

    def cap_failed(self, vr: str, error: str) -> None:
        inst = self.instances.get(vr)
        if inst is not None:
            inst.applied_cap_percent = None
            inst.actuation_error = error

    def restored(self, vr: str) -> None:
        if vr in self.pending_restores and vr not in self.instances:
            del self.pending_restores[vr]
            self.pending_records.pop(vr, None)
            self.dirty = True

    def shutdown_actions(self) -> list[RestoreCap]:
        """Caps to hand back when the daemon stops (instances are kept in the state file)."""
        out = [RestoreCap(n, i.original_cap_percent, i.original_record) for n, i in sorted(self.instances.items())]
        out += [RestoreCap(n, c, self.pending_records.get(n)) for n, c in sorted(self.pending_restores.items())]
        return out

    def replace_controllers(self, factory: ControllerFactory) -> None:
        """Use a new controller factory (config reload); running instances restart bumpless."""
        self.controller_factory = factory
        for inst in self.instances.values():
            ctl = factory()
            ctl.start(inst.cap_percent)
            inst.controller = ctl
            inst.cap_percent = ctl.cap_percent
        self.dirty = True

    def saved_records(self) -> list[tuple[str, dict[str, Any]]]:
        """Every original record held, ``(vr, record)``: the instances' and the pending restores'."""
        out = [(n, i.original_record) for n, i in sorted(self.instances.items()) if i.original_record is not None]
        return out + sorted(self.pending_records.items())

    def restore_only(self, configured: frozenset[str] | set[str]) -> list[str]:
        """The instances of VRs not in ``configured`` become pending restores; returns their names.

        Such an instance (its VR gone from the configuration since it was saved) is never
        controlled again: it is kept only so that its original cap (and record) can be given back,
        and :meth:`describe` shows it as inactive with ``restore_pending``.
        """
        gone = sorted(n for n in self.instances if n not in configured)
        for n in gone:
            inst = self.instances.pop(n)
            self.pending_restores[n] = inst.original_cap_percent
            if inst.original_record is not None:
                self.pending_records[n] = inst.original_record
            self.vrs.setdefault(n, _VrView())
        if gone:
            self._vrs_epoch += 1
            self.dirty = True
        return gone

    # ------------------------------------------------------------------------------ views
    def _names(self) -> set[str]:
        return set(self.vrs) | set(self.instances)

    def _sorted_names(self) -> list[str]:
        """``sorted(self._names())``, kept while the VRs and the instances stay the same (do not change it)."""
        c = self._names_sorted
        if c is not None and c[0] == self.vrs.keys() and c[1] == self.instances.keys():
            return c[2]
        names = sorted(self._names())
        self._names_sorted = (set(self.vrs), set(self.instances), names)
        return names

    def describe(self, vr: str) -> dict[str, Any]:
        """The public view of one VR (the ``instance`` object of the API schema)."""
        view = self.vrs.get(vr, _VrView())
        inst = self.instances.get(vr)
        pending = {"restore_pending": True} if inst is None and vr in self.pending_restores else {}
        return {
            "vr": vr,
            "state": inst.state if inst else INACTIVE,
            "present": view.present,
            "setpoint_pps": inst.setpoint_pps if inst else None,
            "forwarded_pps": view.forwarded_pps,
            "offered_pps": view.offered_pps,
            "cap_percent": inst.cap_percent if inst else None,
            "original_cap_percent": inst.original_cap_percent if inst else self.pending_restores.get(vr),
            "original_record": inst.original_record if inst else self.pending_records.get(vr),
            "actuation_error": inst.actuation_error if inst else None,
            "saturated": saturation_of(inst),
            **_lag_of(inst),
            **pending,
        }

    def _sample_pairs(self) -> list[tuple[str, _VrView, InstanceMachine | None]]:
        """Every known VR sorted by name, with its view and its instance (None: inactive).

        Kept while the VR views (:attr:`_vrs_epoch`) and the instances (the same objects under
        the same names) stay the same, so that a period's rows need no lookup by name.
        """
        c = self._pairs
        vrs, instances = self.vrs, self.instances
        if c is not None and c[0] is vrs and c[1] == self._vrs_epoch and c[2] == len(vrs) \
                and len(instances) == len(c[4]) and all(map(is_, instances.values(), c[4])) \
                and list(instances) == c[3]:
            return c[5]
        empty = _VrView()
        pairs = [(n, vrs.get(n, empty), instances.get(n)) for n in self._sorted_names()]
        self._pairs = (vrs, self._vrs_epoch, len(vrs), list(instances), list(instances.values()), pairs)
        return pairs

    def sample_rows(self) -> list[list[Any]]:
        """Every known VR's row of the period's samples, sorted by name (for the PUB socket and the metrics).

        A row is :meth:`describe` of the VR without ``original_record``, values only, in the order
        of :data:`xtc.daemon.api.SAMPLE_FIELDS`; built in one step per VR (this runs for every VR
        every period).
        """
        out = []
        pending = self.pending_restores
        for n, view, inst in self._sample_pairs():
            if inst is None:
                out.append([n, INACTIVE, view.present, None, view.forwarded_pps, view.offered_pps, None,
                            pending.get(n), None, None])
            else:
                p = inst.saturated_periods
                sat = None if inst.state != ACTIVE or -SATURATED_AFTER_PERIODS < p < SATURATED_AFTER_PERIODS \
                    else ("cap_max" if p > 0 else "cap_min")
                if sat is None and inst.slack_periods >= SATURATED_AFTER_PERIODS and inst.state == ACTIVE:
                    sat = "cap_slack"
                out.append([n, inst.state, view.present, inst.setpoint_pps, view.forwarded_pps, view.offered_pps,
                            inst.cap_percent, inst.original_cap_percent, inst.actuation_error, sat])
        return out

    # ---------------------------------------------------------------------- persistence
    def to_state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot of everything a restart must know."""
        return {
            "schema": STATE_SCHEMA,
            "instances": {
                n: {
                    "state": i.state,
                    "setpoint_pps": i.setpoint_pps,
                    "original_cap_percent": i.original_cap_percent,
                    "original_record": i.original_record,
                    "cap_percent": i.cap_percent,
                    "controller": i.controller.to_state(),
                }
                for n, i in sorted(self.instances.items())
            },
            "pending_restores": dict(sorted(self.pending_restores.items())),
            "pending_records": dict(sorted(self.pending_records.items())),
        }

    def load_state(self, doc: Any) -> list[str]:
        """Take over a snapshot written by :meth:`to_state` (at start-up, before anything runs).

        Returns notes (e.g. a controller state that did not fit the configured controller and was
        restarted from the saved cap).  Raises :class:`StateError` (and changes nothing) if the
        snapshot is malformed.
        """
        notes: list[str] = []
        if not isinstance(doc, dict) or doc.get("schema") != STATE_SCHEMA:
            raise StateError(f"not an {STATE_SCHEMA} document")
        raw_inst, raw_pend = doc.get("instances", {}), doc.get("pending_restores", {})
        if not isinstance(raw_inst, dict) or not isinstance(raw_pend, dict):
            raise StateError("'instances' and 'pending_restores' must be objects")
        instances: dict[str, InstanceMachine] = {}
        for name, d in raw_inst.items():
            if not isinstance(d, dict):
                raise StateError(f"instance {name!r} must be an object")
            state = d.get("state")
            if state not in (ACTIVE, PAUSED):
                raise StateError(f"instance {name!r}: state must be active or paused, got {state!r}")
            sp = d.get("setpoint_pps")
            if isinstance(sp, bool) or not isinstance(sp, (int, float)) or not math.isfinite(sp) or sp <= 0:
                raise StateError(f"instance {name!r}: bad setpoint_pps {sp!r}")
            if sp > self.max_setpoint_pps:
                raise StateError(f"instance {name!r}: setpoint_pps {sp:g} is above daemon.max_setpoint_pps "
                                 f"({self.max_setpoint_pps:g}) of the configuration")
            if "original_cap_percent" not in d:
                raise StateError(f"instance {name!r}: missing original_cap_percent")
            original = _cap_value(f"instance {name!r}: original_cap_percent", d["original_cap_percent"], True)
            # Absent in state files written before exact records were kept: the percentage is used.
            record = _record_value(f"instance {name!r}: original_record", d.get("original_record"))
            cap = _cap_value(f"instance {name!r}: cap_percent", d.get("cap_percent"), False)
            assert cap is not None
            ctl = self.controller_factory()
            ctl.start(cap)
            cstate = d.get("controller")
            if isinstance(cstate, dict):
                try:
                    ctl.restore_state(cstate)
                except (ValueError, KeyError, TypeError, OverflowError) as e:
                    ctl.start(cap)
                    notes.append(f"instance {name!r}: controller state not reused ({e}); restarted from cap {cap:g}")
            instances[name] = InstanceMachine(
                vr=name,
                state=state,
                setpoint_pps=float(sp),
                original_cap_percent=original,
                controller=ctl,
                cap_percent=ctl.cap_percent,
                original_record=record,
            )
        pending = {n: _cap_value(f"pending restore {n!r}", c, True) for n, c in raw_pend.items()}
        raw_rec = doc.get("pending_records", {})
        if not isinstance(raw_rec, dict):
            raise StateError("'pending_records' must be an object")
        records: dict[str, dict[str, Any]] = {}
        for n, r in raw_rec.items():
            if n not in pending:
                raise StateError(f"pending record {n!r} has no pending restore")
            rec = _record_value(f"pending record {n!r}", r)
            if rec is not None:
                records[n] = rec
        self.instances = instances
        self.pending_restores = pending
        self.pending_records = records
        for n in [*instances, *pending]:
            self.vrs.setdefault(n, _VrView())
        self._vrs_epoch += 1
        return notes
