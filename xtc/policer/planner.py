"""One host's plan, pure: what the daemon reports + the policer's state + now -> new state, commands.

:func:`plan_router` runs the three policies of :mod:`xtc.policer.policy` for one host and reconciles the
VRs' wanted state (inactive / active at a setpoint / paused) with what its daemon reports, as a list
of manager-API commands.  Reconciling against the report (not against what was sent last) is what
makes the policer catch up by itself after a daemon or the policer was away.

The punishments beyond setpoints and pausing (issue 48) are commands sent at the step itself, each
undone when the VR is restored: reaching :data:`~xtc.policer.policy.LIMIT_LEVEL` sends
``early_drop`` on (its excess dropped at the host), a restore from there sends ``early_drop``
without ``on`` (back to the daemon's default); reaching :data:`~xtc.policer.policy.OFF_LEVEL`
(only for a VR whose network enables it: :attr:`VrPolicy.vr_off_allowed`) sends ``vr_off`` with the
reason.  While the VR is off (not present) it keeps its level; when it is back (an operator's
``vr_on``) its ladder starts from the bottom; a restore while it is off (the policy disabled,
control off) sends ``vr_on``.  A daemon that refuses one of these (an older daemon, a backend
that cannot turn a VR off) has the refusal in the audit log and the VR stays at its level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from .policy import (
    LIMIT_LEVEL,
    OFF_LEVEL,
    PAUSE_LEVEL,
    ActivationParams,
    ActivationState,
    AllocationParams,
    Claim,
    MisbehaviourParams,
    MisbehaviourState,
    activation_step,
    misbehaviour_step,
    punished_setpoint_pps,
    weighted_max_min,
)

__all__ = [
    "CONTROL_MODES",
    "Settings",
    "VrObs",
    "VrPolicy",
    "RouterInput",
    "Command",
    "Event",
    "RouterPlan",
    "plan_router",
    "SETPOINT_TOLERANCE",
]

CONTROL_MODES = ("auto", "on", "off")
#: A daemon's setpoint within this relative distance of the wanted one is left alone.
SETPOINT_TOLERANCE = 0.01


@dataclass(frozen=True)
class Settings:
    """The policies' switches and parameters (stored in the database, changed through the API)."""

    activation_enabled: bool = True
    activation: ActivationParams = field(default_factory=ActivationParams)
    allocation_enabled: bool = True
    allocation: AllocationParams = field(default_factory=AllocationParams)
    misbehaviour_enabled: bool = True
    misbehaviour: MisbehaviourParams = field(default_factory=MisbehaviourParams)


@dataclass(frozen=True)
class VrObs:
    """A VR as its daemon reported it (rates in packets/s; ``state`` of its XTC instance)."""

    name: str
    present: bool = True
    state: str = "inactive"
    setpoint_pps: float | None = None
    forwarded_pps: float | None = None
    offered_pps: float | None = None
    #: The daemon's flag: the setpoint is out of reach, the cap at its maximum ("cap_max"), at its
    #: minimum ("cap_min") or not used up ("cap_slack") (:class:`xtc.daemon.api.Instance`); None = none.
    saturated: str | None = None


@dataclass(frozen=True)
class VrPolicy:
    """The policer's view of one VR: its SLA (from its network), manual setpoint, punishment."""

    weight: float = 1.0
    min_pps: float = 0.0
    max_pps: float = math.inf
    manual_setpoint_pps: float | None = None
    misbehaviour: MisbehaviourState = field(default_factory=MisbehaviourState)
    #: The unpunished setpoint when punishment began, packets/s.
    punish_base_pps: float | None = None
    derived_setpoint_pps: float | None = None
    #: The VR's network lets the ladder's last resort turn it off (:data:`~xtc.policer.policy.OFF_LEVEL`).
    vr_off_allowed: bool = False


@dataclass(frozen=True)
class RouterInput:
    """Everything :func:`plan_router` needs about one host."""

    name: str
    capacity_pps: float
    control_mode: str
    activation: ActivationState
    vrs: Mapping[str, VrObs]
    policies: Mapping[str, VrPolicy]


@dataclass(frozen=True)
class Command:
    """One manager-API request to the host's daemon."""

    cmd: str
    vr: str
    setpoint_pps: float | None = None
    #: ``early_drop``: on or off (None: back to the daemon's default).
    on: bool | None = None
    #: ``vr_off``: why.
    reason: str | None = None

    def fields(self) -> dict[str, Any]:
        return {"vr": self.vr, **self.options()}

    def options(self) -> dict[str, Any]:
        """The optional fields that are set (``setpoint_pps``, ``on``, ``reason``; None ones left out)."""
        out: dict[str, Any] = {}
        if self.setpoint_pps is not None:
            out["setpoint_pps"] = self.setpoint_pps
        if self.on is not None:
            out["on"] = self.on
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class Event:
    """A decision worth an audit record."""

    kind: str
    vr: str | None
    detail: dict[str, Any]


@dataclass(frozen=True)
class RouterPlan:
    activation: ActivationState
    control_on: bool
    policies: dict[str, VrPolicy]
    wanted: dict[str, tuple[str, float | None]]
    commands: list[Command]
    events: list[Event]
    demand_pps: float


_NO_POLICY = VrPolicy()


def _demand(o: VrObs) -> float | None:
    vals = [v for v in (o.offered_pps, o.forwarded_pps) if v is not None]
    return max(vals) if vals else None


def _reconcile(o: VrObs, want: str, sp: float | None) -> list[Command]:
    def differs() -> bool:
        return sp is not None and (o.setpoint_pps is None or abs(o.setpoint_pps - sp) > SETPOINT_TOLERANCE * sp)

    if want == "inactive":
        return [Command("deactivate", o.name)] if o.state in ("active", "paused") else []
    assert sp is not None
    if o.state == "inactive":
        return [Command("activate", o.name, sp)] + ([Command("pause", o.name)] if want == "paused" else [])
    out: list[Command] = []
    if want == "active":
        if o.state == "paused":
            out.append(Command("resume", o.name))
        if differs():
            out.append(Command("setpoint", o.name, sp))
    else:  # paused
        if o.state == "active":
            if differs():
                out.append(Command("setpoint", o.name, sp))
            out.append(Command("pause", o.name))
    return out


def _undo(vr: str, level: int, off_now: bool) -> list[Command]:
    """The commands that take back a VR's punishments of ``level`` (its setpoint and pause are
    reconciled as usual): early drop back to the daemon's default, the VR on again if it is off."""
    out = []
    if level >= OFF_LEVEL and off_now:
        out.append(Command("vr_on", vr))
    if level >= LIMIT_LEVEL:
        out.append(Command("early_drop", vr))
    return out


def plan_router(settings: Settings, rin: RouterInput, now_s: float) -> RouterPlan:
    """Run the policies for one reachable host.

    Parameters
    ----------
    settings : Settings
    rin : RouterInput
        The host, its VRs as its daemon reported them now, the policer's state of each.
    now_s : float
        Time, seconds (the same clock on every call).

    Returns
    -------
    RouterPlan
        New activation and per-VR state, the wanted state of every present VR, the commands that
        bring the daemon there, and the events to record.
    """
    events: list[Event] = []
    present = {n: o for n, o in rin.vrs.items() if o.present}
    demand = sum(d for d in (_demand(o) for o in present.values()) if d is not None)

    act = rin.activation
    if settings.activation_enabled:
        act, switch = activation_step(settings.activation, act, demand, rin.capacity_pps, now_s)
        if switch is not None and rin.control_mode == "auto":
            events.append(Event("control_on" if switch else "control_off", None,
                                {"demand_pps": demand, "capacity_pps": rin.capacity_pps}))
    if rin.control_mode == "on":
        control_on = True
    elif rin.control_mode == "off":
        control_on = False
    else:
        control_on = act.on

    mp = settings.misbehaviour
    pol: dict[str, VrPolicy] = {n: rin.policies.get(n, _NO_POLICY) for n in set(rin.policies) | set(present)}

    # Misbehaviour: only while the host is under control (that is when the shared Dom0 is scarce).
    ladder_cmds: list[Command] = []  # the punishments' own commands (early drop, VR off/on), sent after the reconciliation's
    for n, p in pol.items():
        o = present.get(n)
        ms = p.misbehaviour
        known = rin.vrs.get(n)
        if ms.level >= OFF_LEVEL and o is None and known is not None and settings.misbehaviour_enabled and control_on:
            # Turned off, as the ladder's last step wanted: it keeps its level while it is off (the
            # timers cleared: "seen off", so that its coming back restarts the ladder).
            if ms.bad_since_s is not None or ms.good_since_s is not None:
                pol[n] = replace(p, misbehaviour=MisbehaviourState(ms.level, None, None))
            continue
        if not (settings.misbehaviour_enabled and control_on and o is not None):
            if ms.level > 0:
                why = "policy disabled" if not settings.misbehaviour_enabled else (
                    "control off" if not control_on else "VR not present")
                events.append(Event("restore", n, {"from_level": ms.level, "reason": why}))
                # (control off deactivates the instance, and its early drop with it)
                ladder_cmds.extend(c for c in _undo(n, ms.level, known is not None and not known.present)
                            if control_on or c.cmd != "early_drop")
            if ms != MisbehaviourState() or p.punish_base_pps is not None:
                pol[n] = replace(p, misbehaviour=MisbehaviourState(), punish_base_pps=None)
            continue
        if ms.level >= OFF_LEVEL and ms.bad_since_s is None and ms.good_since_s is None:
            # Seen off, and back (an operator turned it on): its ladder starts from the bottom.
            events.append(Event("restore", n, {"from_level": ms.level, "reason": "VR turned on again",
                                               "offered_pps": o.offered_pps, "forwarded_pps": o.forwarded_pps}))
            ladder_cmds.extend(_undo(n, ms.level, False))
            pol[n] = replace(p, misbehaviour=MisbehaviourState(), punish_base_pps=None)
            continue
        top = OFF_LEVEL if p.vr_off_allowed else PAUSE_LEVEL
        new, ev = misbehaviour_step(mp, ms, o.offered_pps, o.forwarded_pps, now_s, top)
        base = p.punish_base_pps
        if ev == "punish":
            if base is None:
                base = p.manual_setpoint_pps or p.derived_setpoint_pps or o.setpoint_pps or o.forwarded_pps or settings.allocation.min_setpoint_pps
            detail: dict[str, Any] = {"level": new.level, "offered_pps": o.offered_pps, "forwarded_pps": o.forwarded_pps}
            if new.level < PAUSE_LEVEL:
                detail["setpoint_pps"] = max(settings.allocation.min_setpoint_pps, punished_setpoint_pps(mp, new.level, base))
            if new.level == LIMIT_LEVEL:
                detail["action"] = "setpoint lowered; its excess dropped at the host (early drop on)"
                ladder_cmds.append(Command("early_drop", n, on=True))
            elif new.level == PAUSE_LEVEL:
                detail["action"] = "instance paused; VR flagged for an operator"
            elif new.level >= OFF_LEVEL:
                reason = (f"xtc policer: misbehaviour level {new.level}: offered {o.offered_pps:.0f} p/s, "
                          f"forwarded {o.forwarded_pps:.0f} p/s, for {mp.hold_s * (new.level):g} s or more")
                detail["action"] = "VR turned off (its network enables it); an operator's vr_on brings it back"
                detail["reason"] = reason
                ladder_cmds.append(Command("vr_off", n, reason=reason))
            events.append(Event("punish", n, detail))
        elif ev == "restore":
            events.append(Event("restore", n, {"from_level": ms.level, "offered_pps": o.offered_pps,
                                               "forwarded_pps": o.forwarded_pps}))
            ladder_cmds.extend(_undo(n, ms.level, False))
            base = None
        if new != ms or base != p.punish_base_pps:
            pol[n] = replace(p, misbehaviour=new, punish_base_pps=base)

    # Allocation over the unpunished, present VRs without a manual setpoint; the rest are fixed.
    if settings.allocation_enabled and present:
        budget = rin.capacity_pps * settings.allocation.target_fraction
        claims: list[Claim] = []
        for n in sorted(present):
            p = pol[n]
            if p.misbehaviour.level > 0:
                budget -= max(settings.allocation.min_setpoint_pps, punished_setpoint_pps(mp, p.misbehaviour.level, p.punish_base_pps or 0.0))
            elif p.manual_setpoint_pps is not None:
                budget -= p.manual_setpoint_pps
            else:
                o = present[n]
                d = _demand(o)
                dem = None if d is None else max(settings.allocation.min_setpoint_pps, d * settings.allocation.demand_headroom)
                lo = p.min_pps
                if o.forwarded_pps is not None and o.saturated in ("cap_max", "cap_slack"):
                    # All the VR can (cap_max) or will (cap_slack: a cap it does not use up) forward on
                    # this host now, whatever its setpoint: a larger share would sit unused while other
                    # VRs want it.
                    dem = max(settings.allocation.min_setpoint_pps, o.forwarded_pps) if dem is None else \
                        min(dem, max(settings.allocation.min_setpoint_pps, o.forwarded_pps))
                elif o.forwarded_pps is not None and o.saturated == "cap_min":
                    # It forwards this much even at its lowest cap: count it, so the others' shares fit.
                    lo = min(max(lo, o.forwarded_pps), p.max_pps)
                claims.append(Claim(n, p.weight, lo, p.max_pps, dem))
        shares = weighted_max_min(max(0.0, budget), claims)
        kept = {n: pol[n].derived_setpoint_pps if pol[n].derived_setpoint_pps is not None
                and abs(sh - pol[n].derived_setpoint_pps) <= settings.allocation.hysteresis * pol[n].derived_setpoint_pps else sh
                for n, sh in shares.items()}
        if sum(kept.values()) <= max(0.0, budget) * (1 + 1e-9):
            shares = kept
        for n, s in shares.items():
            derived = max(settings.allocation.min_setpoint_pps, s)
            if derived != pol[n].derived_setpoint_pps:
                pol[n] = replace(pol[n], derived_setpoint_pps=derived)

    wanted: dict[str, tuple[str, float | None]] = {}
    commands: list[Command] = []
    for n in sorted(present):
        p = pol[n]
        base = p.manual_setpoint_pps if p.manual_setpoint_pps is not None else p.derived_setpoint_pps
        lvl = p.misbehaviour.level
        if lvl > 0:
            sp: float | None = max(settings.allocation.min_setpoint_pps, punished_setpoint_pps(mp, lvl, p.punish_base_pps or base or 0.0))
        else:
            sp = base
        if not control_on or sp is None:
            want = ("inactive", None)
        elif lvl >= PAUSE_LEVEL:
            want = ("paused", sp)
        else:
            want = ("active", sp)
        wanted[n] = want
        commands.extend(_reconcile(present[n], *want))
    commands.extend(ladder_cmds)
    return RouterPlan(act, control_on, pol, wanted, commands, events, demand)
