"""The policer's three policies, pure: parameters + state + observations + now -> new state, decision.

Nothing here reads a clock, a socket or the database; :mod:`xtc.policer.planner` composes these per host
and :mod:`xtc.policer.engine` applies the result.

- **Allocation** (:func:`weighted_max_min`): split a host's capacity (packets/s) among its VRs by
  weighted max-min fairness with floors (the SLA's guaranteed minimum) and ceilings (the SLA's
  maximum, and the VR's demand when it is known).
- **Activation** (:func:`activation_step`): XTC goes on for a host when its aggregate demand reaches
  ``on_fraction`` of its capacity for ``hold_s`` seconds, and off again when it stays below
  ``off_fraction`` (< ``on_fraction``) for ``hold_s`` (hysteresis in level and in time).
- **Misbehaviour** (:func:`misbehaviour_step`): a VR whose offered rate stays above ``ratio`` times
  its forwarded rate (and by at least ``min_excess_pps``) for ``hold_s`` climbs one punishment
  level; every further ``hold_s`` of the same behaviour climbs another, up to its top level (the
  paper's punishments, issue 48): levels 1 and 2 lower its setpoint by ``step_factor`` each, and
  from :data:`LIMIT_LEVEL` (2) on its excess is also dropped at the host (the daemon's early drop,
  the paper's per-interface limiter); :data:`PAUSE_LEVEL` (3) pauses its instance and flags it for
  an operator; :data:`OFF_LEVEL` (4), the last resort, turns the VR off, only in a network whose
  operator enabled it (else the top is :data:`PAUSE_LEVEL`).  After ``restore_hold_s`` of good
  behaviour it is restored at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, Sequence

__all__ = [
    "MAX_PPS",
    "POLICIES",
    "AllocationParams",
    "param_ranges",
    "PolicyError",
    "Claim",
    "weighted_max_min",
    "ActivationParams",
    "ActivationState",
    "activation_step",
    "MisbehaviourParams",
    "MisbehaviourState",
    "misbehaviour_step",
    "MAX_LEVEL",
    "LIMIT_LEVEL",
    "PAUSE_LEVEL",
    "OFF_LEVEL",
]

#: From this punishment level on, the VR's excess is dropped at the host (the daemon's early drop).
LIMIT_LEVEL = 2
#: The instance is paused and the VR flagged for an operator (the top level unless VR-off is enabled).
PAUSE_LEVEL = 3
#: The last resort, only where an operator enabled it for the VR's network: the VR is turned off.
OFF_LEVEL = 4
#: The highest punishment level there is.
MAX_LEVEL = OFF_LEVEL


class PolicyError(ValueError):
    """Bad input to a policy (nothing was decided)."""


def _finite(name: str, v: float, lo: float = 0.0) -> float:
    if type(v) is float and v >= lo and math.isfinite(v):  # the common case, at once (the planner's every VR)
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PolicyError(f"{name} must be a number, got {type(v).__name__}")
    f = float(v)
    if not math.isfinite(f) or f < lo:
        raise PolicyError(f"{name} must be finite and >= {lo:g}, got {f}")
    return f


# --------------------------------------------------------------------------------- parameters
#: Highest rate a policy parameter takes, packets/s.
MAX_PPS = 1e10


def _param(default: float, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> Any:
    """A policy parameter's one declaration: its default and the range it lies in (``lo_open``,
    ``hi_open``: the bound itself excluded).  The checks of the parameter classes, the store's reading
    of the settings and the REST API's schema derive from it (:func:`param_ranges`)."""
    return field(default=default, metadata={"lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open})


def param_ranges(cls: type) -> dict[str, dict[str, Any]]:
    """A parameter class's fields as ``{name: {"default", "ge" or "gt", "le" or "lt"}}`` (the keywords of
    pydantic's ``Field``: what the REST API's policy models are made of)."""
    out = {}
    for f in fields(cls):
        m = f.metadata
        out[f.name] = {"default": f.default, ("gt" if m["lo_open"] else "ge"): m["lo"],
                       ("lt" if m["hi_open"] else "le"): m["hi"]}
    return out


def _check_ranges(params: Any) -> None:
    for f in fields(params):
        m = f.metadata
        v = _finite(f.name, getattr(params, f.name), -math.inf)
        if v < m["lo"] or v > m["hi"] or (m["lo_open"] and v == m["lo"]) or (m["hi_open"] and v == m["hi"]):
            raise PolicyError(f"{f.name} must be within {'(' if m['lo_open'] else '['}{m['lo']:g}, {m['hi']:g}"
                              f"{')' if m['hi_open'] else ']'}, got {v:g}")


# ------------------------------------------------------------------------------------ allocation


@dataclass(frozen=True)
class Claim:
    """One VR's claim on its host's capacity.

    Parameters
    ----------
    key : str
        The VR's name (the key of the result).
    weight : float
        Share weight, > 0.
    min_pps : float
        Guaranteed minimum rate, packets/s (>= 0).
    max_pps : float
        Maximum rate, packets/s (>= min_pps).
    demand_pps : float or None
        What the VR could use, packets/s; ``None`` = unknown (no ceiling besides ``max_pps``).
        A demand below ``min_pps`` does not lower the guarantee.
    """

    key: str
    weight: float = 1.0
    min_pps: float = 0.0
    max_pps: float = math.inf
    demand_pps: float | None = None

    def upper_pps(self) -> float:
        """The claim's ceiling: max(min, min(max, demand)), packets/s."""
        ceiling = self.max_pps if self.demand_pps is None else min(self.max_pps, self.demand_pps)
        return max(self.min_pps, ceiling)


def _check_claims(claims: Sequence[Claim]) -> None:
    seen: set[str] = set()
    for c in claims:
        if c.key in seen:
            raise PolicyError(f"claim {c.key!r} appears twice")
        seen.add(c.key)
        w, lo, hi, d = c.weight, c.min_pps, c.max_pps, c.demand_pps
        if (type(w) is float and 0.0 < w < math.inf and type(lo) is float and 0.0 <= lo < math.inf
                and type(hi) is float and hi >= lo and (d is None or type(d) is float and 0.0 <= d < math.inf)):
            continue  # valid: the common case, decided without the messages below
        if _finite(f"{c.key}: weight", c.weight) <= 0:
            raise PolicyError(f"{c.key}: weight must be > 0, got {c.weight}")
        _finite(f"{c.key}: min_pps", c.min_pps)
        if isinstance(c.max_pps, bool) or not isinstance(c.max_pps, (int, float)) or math.isnan(c.max_pps):
            raise PolicyError(f"{c.key}: max_pps must be a number, got {c.max_pps!r}")
        if c.max_pps < c.min_pps:
            raise PolicyError(f"{c.key}: max_pps ({c.max_pps:g}) is below min_pps ({c.min_pps:g})")
        if c.demand_pps is not None:
            _finite(f"{c.key}: demand_pps", c.demand_pps)


def weighted_max_min(capacity_pps: float, claims: Sequence[Claim]) -> dict[str, float]:
    """Weighted max-min fair shares with floors and ceilings.

    Each VR gets ``clamp(weight * level, min_pps, upper_pps)`` for the largest common ``level``
    whose shares fit in ``capacity_pps``; when even the minimums do not fit they are scaled down
    in proportion (the only case where a minimum is not met).

    Parameters
    ----------
    capacity_pps : float
        Packets/s to share, >= 0.
    claims : sequence of Claim

    Returns
    -------
    dict
        ``{key: share_pps}``.  The shares sum to at most ``capacity_pps``; they sum to less only
        when every VR is at its ceiling (work conservation).

    Raises
    ------
    PolicyError
        On a non-finite or negative capacity, a duplicate key, a weight <= 0, max < min.
    """
    cap = _finite("capacity_pps", capacity_pps)
    _check_claims(claims)
    if not claims:
        return {}
    total_min = sum(c.min_pps for c in claims)
    if total_min >= cap:
        if total_min == 0:
            return {c.key: 0.0 for c in claims}
        scale = cap / total_min
        return {c.key: c.min_pps * scale for c in claims}
    uppers = [c.upper_pps() for c in claims]
    weights = [c.weight for c in claims]
    mins = [c.min_pps for c in claims]

    def shares(level: float) -> list[float]:
        return [min(max(w * level, m), u) for w, m, u in zip(weights, mins, uppers)]

    # The sum of shares is piecewise linear and non-decreasing in the level; its kinks are where a
    # share leaves its floor or reaches its ceiling.
    kinks = sorted({c.min_pps / c.weight for c in claims} | {u / c.weight for c, u in zip(claims, uppers) if math.isfinite(u)})
    if kinks and sum(shares(kinks[-1])) <= cap and all(math.isfinite(u) for u in uppers):
        return {c.key: u for c, u in zip(claims, uppers)}
    # The first kink whose sum reaches the capacity, by bisection (the sums do not decrease).
    a, b = 0, len(kinks)
    while a < b:
        m = (a + b) // 2
        if sum(shares(kinks[m])) >= cap:
            b = m
        else:
            a = m + 1
    lo, lo_sum = (kinks[a - 1], sum(shares(kinks[a - 1]))) if a > 0 else (0.0, sum(shares(0.0)))
    if a < len(kinks):
        hi, hi_sum = kinks[a], sum(shares(kinks[a]))
    else:
        # Beyond the last kink only the unbounded claims grow, linearly.
        slope = sum(c.weight for c, u in zip(claims, uppers) if not math.isfinite(u))
        level = lo + (cap - lo_sum) / slope
        return dict(zip((c.key for c in claims), shares(level)))
    level = hi if hi_sum == lo_sum else lo + (hi - lo) * (cap - lo_sum) / (hi_sum - lo_sum)
    out = shares(level)
    # Rounding must never make the total exceed the capacity.
    total = sum(out)
    if total > cap and total > 0:
        out = [x * cap / total for x in out]
    return dict(zip((c.key for c in claims), out))


# ------------------------------------------------------------------------------------ activation


@dataclass(frozen=True)
class ActivationParams:
    """When XTC goes on and off for a host.

    Parameters
    ----------
    on_fraction : float
        Turn on when aggregate demand >= on_fraction * capacity (0 < off < on <= 2).
    off_fraction : float
        Turn off when aggregate demand < off_fraction * capacity.
    hold_s : float
        The condition must hold this long, seconds (>= 0).
    """

    on_fraction: float = _param(0.9, 0.0, 2.0, lo_open=True)
    off_fraction: float = _param(0.7, 0.0, 2.0, lo_open=True)
    hold_s: float = _param(2.0, 0.0, 86400.0)

    def __post_init__(self) -> None:
        _check_ranges(self)
        if not (0 < self.off_fraction < self.on_fraction <= 2):
            raise PolicyError(f"need 0 < off_fraction < on_fraction <= 2, got {self.off_fraction} and {self.on_fraction}")


@dataclass(frozen=True)
class ActivationState:
    """A host's control state: ``on`` and since when (seconds) the opposite condition has held."""

    on: bool = False
    pending_since_s: float | None = None


def activation_step(
    params: ActivationParams, state: ActivationState, demand_pps: float, capacity_pps: float, now_s: float
) -> tuple[ActivationState, bool | None]:
    """One evaluation of the activation policy for one host.

    Parameters
    ----------
    params : ActivationParams
    state : ActivationState
    demand_pps : float
        The host's aggregate demand (sum over its VRs of max(offered, forwarded)), packets/s.
    capacity_pps : float
        What the host's Dom0 can forward, packets/s (> 0).
    now_s : float
        Time, seconds (any monotonic origin, consistent across calls).

    Returns
    -------
    state, switch
        The new state and ``True`` (turn on), ``False`` (turn off) or ``None`` (no change).
    """
    d = _finite("demand_pps", demand_pps)
    c = _finite("capacity_pps", capacity_pps)
    if c <= 0:
        raise PolicyError(f"capacity_pps must be > 0, got {c}")
    if state.on:
        wants_switch = d < params.off_fraction * c
    else:
        wants_switch = d >= params.on_fraction * c
    if not wants_switch:
        return (ActivationState(state.on, None), None) if state.pending_since_s is not None else (state, None)
    since = state.pending_since_s if state.pending_since_s is not None else now_s
    if now_s - since >= params.hold_s:
        return ActivationState(not state.on, None), (not state.on)
    return ActivationState(state.on, since), None


# --------------------------------------------------------------------------------- misbehaviour


@dataclass(frozen=True)
class MisbehaviourParams:
    """What counts as misbehaving and how punishment proceeds.

    Parameters
    ----------
    ratio : float
        Misbehaving when offered > ratio * forwarded (> 1).
    min_excess_pps : float
        ... and offered - forwarded > min_excess_pps, packets/s.
    hold_s : float
        Seconds of misbehaviour before each step up.
    restore_hold_s : float
        Seconds of good behaviour before the VR is restored.
    step_factor : float
        Each level below :data:`MAX_LEVEL` multiplies the setpoint by this (0 < f < 1).
    """

    ratio: float = _param(1.5, 1.0, 1000.0, lo_open=True)
    min_excess_pps: float = _param(5000.0, 0.0, MAX_PPS)
    hold_s: float = _param(3.0, 0.0, 86400.0)
    restore_hold_s: float = _param(5.0, 0.0, 86400.0)
    step_factor: float = _param(0.5, 0.0, 1.0, lo_open=True, hi_open=True)

    def __post_init__(self) -> None:
        _check_ranges(self)


@dataclass(frozen=True)
class MisbehaviourState:
    """A VR's punishment: ``level`` 0 (none) .. MAX_LEVEL and the timers, seconds."""

    level: int = 0
    bad_since_s: float | None = None
    good_since_s: float | None = None


def is_misbehaving(params: MisbehaviourParams, offered_pps: float, forwarded_pps: float) -> bool:
    """Offered rate far above the forwarded rate (traffic that does not back off)."""
    return offered_pps > params.ratio * forwarded_pps and offered_pps - forwarded_pps > params.min_excess_pps


def misbehaviour_step(
    params: MisbehaviourParams,
    state: MisbehaviourState,
    offered_pps: float | None,
    forwarded_pps: float | None,
    now_s: float,
    top_level: int = PAUSE_LEVEL,
) -> tuple[MisbehaviourState, str | None]:
    """One evaluation of the misbehaviour policy for one VR.

    Parameters
    ----------
    offered_pps, forwarded_pps : float or None
        Packets/s offered to and forwarded by the VR over the last period; ``None`` (no
        measurement) leaves the state as it is.
    now_s : float
        Time, seconds.
    top_level : int
        The highest level this VR climbs to: :data:`PAUSE_LEVEL`, or :data:`OFF_LEVEL` where
        turning the VR off is enabled for its network.

    Returns
    -------
    state, event
        ``event`` is ``"punish"`` (one level up), ``"restore"`` (back to level 0) or ``None``.
    """
    if offered_pps is None or forwarded_pps is None:
        return state, None
    off = _finite("offered_pps", offered_pps)
    fwd = _finite("forwarded_pps", forwarded_pps)
    if is_misbehaving(params, off, fwd):
        since = state.bad_since_s if state.bad_since_s is not None else now_s
        if state.level < min(top_level, MAX_LEVEL) and now_s - since >= params.hold_s:
            return MisbehaviourState(state.level + 1, now_s, None), "punish"
        return MisbehaviourState(state.level, since, None), None
    if state.level == 0:
        return (MisbehaviourState(), None) if state != MisbehaviourState() else (state, None)
    since = state.good_since_s if state.good_since_s is not None else now_s
    if now_s - since >= params.restore_hold_s:
        return MisbehaviourState(), "restore"
    return replace(state, bad_since_s=None, good_since_s=since), None


def punished_setpoint_pps(params: MisbehaviourParams, level: int, base_pps: float) -> float:
    """The setpoint of a VR at punishment ``level`` whose unpunished setpoint is ``base_pps``."""
    return base_pps * params.step_factor ** min(max(level, 0), PAUSE_LEVEL - 1)


def claims_from(entries: Mapping[str, Claim]) -> list[Claim]:
    """Claims sorted by key (a stable order for :func:`weighted_max_min`)."""
    return [entries[k] for k in sorted(entries)]


# ----------------------------------------------------------------------------------- allocation


@dataclass(frozen=True)
class AllocationParams:
    """How a host's capacity is shared among its VRs (:func:`weighted_max_min` over their demands).

    Parameters
    ----------
    target_fraction : float
        Share this fraction of a host's capacity (headroom for Dom0's own work).
    min_setpoint_pps : float
        No setpoint below this, packets/s.
    demand_headroom : float
        A VR's demand is taken as max(offered, forwarded) times this (lets backing-off flows grow).
    hysteresis : float
        A derived setpoint is kept while the new share is within this relative distance of it (as long
        as the kept setpoints still fit): no setpoint churn from measurement noise.
    """

    target_fraction: float = _param(0.9, 0.0, 1.0, lo_open=True)
    min_setpoint_pps: float = _param(1000.0, 1.0, MAX_PPS)
    demand_headroom: float = _param(1.2, 1.0, 10.0)
    hysteresis: float = _param(0.1, 0.0, 0.5)

    def __post_init__(self) -> None:
        _check_ranges(self)


#: The policies by the name the store and the REST API give them, each with its parameter class: the
#: one declaration of their parameters (each policy also has its ``enabled`` switch, on by default).
POLICIES: dict[str, type] = {"activation": ActivationParams, "allocation": AllocationParams,
                             "misbehaviour": MisbehaviourParams}
