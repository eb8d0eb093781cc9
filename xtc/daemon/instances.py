"""The XTC instances of one daemon: their state machine, the manager's requests, persistence.  Pure.

Nothing here reads a clock, a file or a socket.  :class:`InstanceTable` holds one instance per VR
(:class:`InstanceMachine`), the VRs the backend sees (:class:`VrView`) and the original caps still to
give back; it applies the manager's requests (:meth:`InstanceTable.handle`), answers with the public
view of a VR (:meth:`InstanceTable.describe`, :meth:`InstanceTable.sample_rows`) and saves and loads
all of it (:meth:`InstanceTable.to_state`, :meth:`InstanceTable.load_state`).  The control period,
which steps the controllers of the active instances on arrays, is :class:`xtc.daemon.core.DaemonCore`,
built on this table.

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
  succeeded the VR stays in :attr:`InstanceTable.pending_restores` (persisted, retried every period).
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from operator import is_
from typing import Any, Callable, Mapping

from xtc.control import Controller

from .api import ApiError, Request

__all__ = [
    "STATE_SCHEMA",
    "ACTIVE",
    "PAUSED",
    "INACTIVE",
    "SATURATED_AFTER_PERIODS",
    "SATURATED_TOLERANCE",
    "SLACK_COUNT_MAX",
    "Action",
    "Checkpoint",
    "ControllerFactory",
    "InstanceMachine",
    "InstanceTable",
    "RestoreCap",
    "SetCap",
    "StateError",
    "VrView",
    "saturation_of",
    "saturation_step",
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
    """The XTC instance of one VR (runtime state, persisted by :meth:`InstanceTable.to_state`)."""

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



def saturation_step(inst: InstanceMachine, forwarded_pps: float) -> None:
    """``inst.saturated_periods`` after a step of its controller (see :data:`SATURATED_AFTER_PERIODS`)."""
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
class VrView:
    """What the daemon knows of a VR the backend sees (or saw): present now, its last rates."""

    present: bool = False
    forwarded_pps: float | None = None
    offered_pps: float | None = None




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
class InstanceTable:
    """The instances of one daemon, the VRs it sees and the restores it owes; the requests that
    change them and their persistence (the control period: :class:`xtc.daemon.core.DaemonCore`).

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
    vrs: dict[str, VrView] = field(default_factory=dict)
    #: Set when something that must survive a crash changed; the service saves and clears it.
    dirty: bool = False
    #: (VR names, instance names, both sorted) of the last :meth:`sample_rows`.
    _names_sorted: tuple[set[str], set[str], list[str]] | None = field(default=None, init=False, repr=False, compare=False)
    #: Bumped by :meth:`set_present` whenever a VR view comes, goes or changes presence.
    _vrs_epoch: int = field(default=0, init=False, repr=False, compare=False)
    #: (vrs, epoch, names) after the last :meth:`set_present`.
    _present_last: tuple[Any, int, frozenset[str]] | None = field(default=None, init=False, repr=False, compare=False)
    #: (vrs, epoch, len(vrs), instance names, instances, sorted (name, view, instance)) of :meth:`_sample_pairs`.
    _pairs: tuple[Any, ...] | None = field(default=None, init=False, repr=False, compare=False)

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
            v = self.vrs.setdefault(name, VrView())
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
            self.vrs.setdefault(n, VrView())
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
        view = self.vrs.get(vr, VrView())
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

    def _sample_pairs(self) -> list[tuple[str, VrView, InstanceMachine | None]]:
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
        empty = VrView()
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
            self.vrs.setdefault(n, VrView())
        self._vrs_epoch += 1
        return notes
