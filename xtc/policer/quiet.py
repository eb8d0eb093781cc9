"""The policy's per-VR arithmetic over a batch of routers at once (numpy), pure: which routers' plans
would change nothing.

A fleet whose rates move a little every period (a real one) has every router's plan inputs change every
period, so :func:`xtc.policer.planner.plan_router` ran for each, VR by VR in Python, and almost always
decided nothing: the demands moved, the allocation's shares moved within the hysteresis, no VR
misbehaved, the daemon already held the wanted state.  :func:`quiet_routers` runs that arithmetic
(the demands and the host's aggregate, the activation step, the misbehaviour test and its timers, the
weighted max-min shares with floors and ceilings, the hysteresis, the reconciliation's tolerance)
over the batch's VRs as ``(routers, VRs)`` arrays, and says for each router whether its plan is
*quiet*: the activation state unchanged, no VR's policy state or wanted state changed, no command, no
event.  A quiet router's plan is exactly that (nothing to save but its demand, nothing to send or
record): the engine records it so without calling :func:`~xtc.policer.planner.plan_router`.  Every
other router is planned by :func:`~xtc.policer.planner.plan_router` as before, which stays the one
source of decisions: the punishment ladder's steps, setpoint changes, activations, their commands and
their audit records.

The answer errs one way only: "quiet" is said only where every comparison that decides it holds, those
of the shares and sums (which the arrays add in another order than the per-VR code) with a margin
(:data:`MARGIN` of the host's budget) far above the rounding by which they can differ; the others are
the very IEEE operations of the per-VR code on the same values.  Anything unusual (a timer at its hold,
a step of the punishment ladder or a restore, its last level, a VR the daemon does not hold as wanted,
a parameter or a measurement the policies would refuse, more than :data:`MAX_VRS` VRs) is "plan it".  A
VR held at a punishment level (its timer short of the hold, or at its top level) is quiet like any other.
tests/policer/test_policer_quiet.py checks on seeded random fleets that every router said quiet is
planned to nothing by :func:`~xtc.policer.planner.plan_router`, with the same demand, and that an
engine with the arrays writes, sends and audits exactly what one without them does.

The inputs are the store's plan-input rows (the columns of :data:`~xtc.policer.store.STATE_COLS`, as
:meth:`~xtc.policer.store.Store.router_states` gives them: :class:`~xtc.policer.store.VrRow`), the time passed in
(no clock here): as rows (:func:`quiet_routers`), or already in columns (:func:`quiet_columns`: each router's
:func:`plan_columns`, which the engine keeps with the rows they were made from and fills with the live
table's measurements), side by side.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .planner import SETPOINT_TOLERANCE, Settings
from .policy import OFF_LEVEL, PAUSE_LEVEL

__all__ = ["COLUMNS", "MARGIN", "MAX_VRS", "plan_columns", "quiet_columns", "quiet_routers", "shares_pps"]

#: The relative margin the comparisons of shares and sums must clear (the array arithmetic sums in another
#: order than the per-VR code: its results differ by a few units of 1e-16 relative to the host's budget).
MARGIN = 1e-12
#: Routers with more VRs than this are always planned (the arrays are routers x the most VRs of any).
MAX_VRS = 64

_COLS = ("present", "state", "daemon_setpoint_pps", "forwarded_pps", "offered_pps", "saturated", "sla_weight",
         "sla_min_pps", "sla_max_pps", "manual_setpoint_pps", "punish_level", "punish_bad_since_s",
         "punish_good_since_s", "punish_base_pps", "derived_setpoint_pps", "wanted_state", "wanted_setpoint_pps",
         "punish_vr_off")
_cols = operator.attrgetter(*_COLS)
#: The plan inputs' columns, in the order of :func:`plan_columns`'s rows.
COLUMNS = _COLS
_STATE = {"inactive": 0, "active": 1, "paused": 2}
_WANTED = {None: 0, "inactive": 1, "active": 2, "paused": 3}
_SAT = {None: 0, "cap_max": 1, "cap_min": 2, "cap_slack": 3}
_MODE = {"auto": 0, "on": 1, "off": 2}


def _codes(table: Mapping[Any, int]) -> Any:
    return lambda col: [table.get(x, -1) for x in col]


#: Each column's conversion to float64 (a flag to 0/1, a level to an integer first, a state to its code).
_CONV = tuple({"present": lambda c: np.array(c, dtype=bool), "state": _codes(_STATE), "saturated": _codes(_SAT),
               "wanted_state": _codes(_WANTED), "punish_level": lambda c: np.array(c, dtype=np.int64)}.get(
    name, lambda c: np.array(c, dtype=np.float64)) for name in _COLS)


def _python_sum(terms: np.ndarray) -> np.ndarray:
    """Per row, ``sum()`` of the row's values as this interpreter adds floats, in their order: one after
    the other before Python 3.12, with Neumaier's compensation from 3.12 on (a zero term changes nothing
    in either)."""
    total = np.zeros(terms.shape[0])
    if sys.version_info < (3, 12):
        for j in range(terms.shape[1]):
            total = total + terms[:, j]
        return total
    comp = np.zeros(terms.shape[0])
    for j in range(terms.shape[1]):
        x = terms[:, j]
        t = total + x
        with np.errstate(invalid="ignore"):
            comp = comp + np.where(np.abs(total) >= np.abs(x), (total - t) + x, (x - t) + total)
        total = t
    return np.where((comp != 0) & np.isfinite(comp), total + comp, total)


def _num(col: Sequence[Any]) -> np.ndarray:
    """A column of numbers or None as float64 (None: NaN)."""
    return np.array(col, dtype=np.float64)


def shares_pps(capacity_pps: np.ndarray, weight: np.ndarray, min_pps: np.ndarray, upper_pps: np.ndarray,
               claim: np.ndarray) -> np.ndarray:
    """:func:`xtc.policer.policy.weighted_max_min` for many hosts at once: ``capacity_pps`` per host (R,),
    the claims as (R, K) arrays (``claim``: the entry is a claim; ``upper_pps`` is the claim's ceiling,
    :meth:`~xtc.policer.policy.Claim.upper_pps`, inf: none).  The same shares up to rounding (the sums
    are taken in another order); 0 where there is no claim.  The inputs must be valid claims (weights
    > 0, floors >= 0 and finite, ceilings >= floors)."""
    w = np.where(claim, weight, 1.0)
    lo = np.where(claim, min_pps, 0.0)
    up = np.where(claim, upper_pps, 0.0)
    cap = np.maximum(capacity_pps, 0.0)
    r, k = w.shape
    if k == 0:
        return np.zeros((r, 0))
    total_min = lo.sum(axis=1)
    # The sum of the shares at each kink (where a share leaves its floor or reaches its ceiling).
    kinks = np.sort(np.concatenate([lo / w, up / w], axis=1), axis=1)  # (R, 2K), inf last
    with np.errstate(invalid="ignore"):
        at = np.multiply(w[:, None, :], kinks[:, :, None])
        np.maximum(at, lo[:, None, :], out=at)
        np.minimum(at, up[:, None, :], out=at)
    s = at.sum(axis=2)  # (R, 2K), non-decreasing
    reach = s >= cap[:, None]
    a = np.where(reach.any(axis=1), reach.argmax(axis=1), 2 * k)
    rows = np.arange(r)
    prev = np.maximum(a - 1, 0)
    lo_level = np.where(a > 0, kinks[rows, prev], 0.0)
    lo_sum = np.where(a > 0, s[rows, prev], lo.sum(axis=1))
    nxt = np.minimum(a, 2 * k - 1)
    hi_level, hi_sum = kinks[rows, nxt], s[rows, nxt]
    slope = np.where(claim & np.isinf(up), w, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        inside = np.where(hi_sum == lo_sum, hi_level,
                          lo_level + (hi_level - lo_level) * (cap - lo_sum) / (hi_sum - lo_sum))
        beyond = lo_level + (cap - lo_sum) / slope
    level = np.where(np.isinf(hi_level), beyond, inside)
    out = np.minimum(np.maximum(w * level[:, None], lo), up)
    all_up = (a == 2 * k) | (~np.isinf(up).any(axis=1) & (s[:, -1] <= cap))
    out = np.where(all_up[:, None], up, out)
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = np.where(total_min[:, None] > 0, lo * (cap / total_min)[:, None], 0.0)
    out = np.where((total_min >= cap)[:, None], scaled, out)
    total = out.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(((total > cap) & (total > 0))[:, None], out * (cap / total)[:, None], out)
    return np.where(claim, out, 0.0)


def plan_columns(rows: Mapping[str, Any]) -> np.ndarray | None:
    """A router's VRs' plan inputs (``rows``: name -> its :class:`~xtc.policer.store.VrRow`)
    as one ``(len(COLUMNS), VRs)`` float64 array, in the rows' order: a column per name of :data:`COLUMNS`,
    the states and flags by their codes (-1: one the policies do not know), None as NaN; None if a value
    cannot be held so (then the router is planned)."""
    flat = [_cols(row) for row in rows.values()]
    out = np.empty((len(_COLS), len(flat)))
    if not flat:
        return out
    cols = list(zip(*flat))
    try:
        for i, col in enumerate(cols):
            conv = _CONV[i]
            out[i] = conv(col)
    except (TypeError, ValueError, OverflowError):
        return None  # a value the arrays cannot hold: plan it
    return out


def quiet_routers(settings: Settings, routers: Sequence[tuple[float, str, bool, float | None, Mapping[str, Any]]],
                  now_s: np.ndarray | Sequence[float] | float) -> tuple[np.ndarray, np.ndarray]:
    """Which routers' plans would change nothing, and their demands.

    Parameters
    ----------
    settings : Settings
    routers : sequence of (capacity_pps, control_mode, activation on, activation pending since or None, rows)
        Each router's plan inputs as the engine hands them to :func:`~xtc.policer.planner.plan_router`: its
        capacity, control mode, activation state (the pending time already no later than ``now_s``) and
        its VRs' rows (name -> its :class:`~xtc.policer.store.VrRow`), in the rows' order.
    now_s : float or array
        The time of each router's plan (the same clock as the timers).

    Returns
    -------
    quiet : bool array
        Per router: its plan is certainly quiet (see the module).
    demand_pps : float array
        Per router: the host's aggregate demand as :func:`~xtc.policer.planner.plan_router` sums it (the same
        value, summed in the same order; NaN where not quiet).
    """
    blocks = [plan_columns(rt[4]) for rt in routers]
    counts = np.array([-1 if b is None else b.shape[1] for b in blocks], dtype=np.intp)
    good = [b for b in blocks if b is not None]
    cols = np.concatenate(good, axis=1) if good else np.empty((len(_COLS), 0))
    return quiet_columns(settings, [rt[:4] for rt in routers], counts, cols, now_s)


def quiet_columns(settings: Settings, heads: Sequence[tuple[float, str, bool, float | None]], counts: np.ndarray,
                  cols: np.ndarray, now_s: np.ndarray | Sequence[float] | float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quiet_routers` over the plan inputs already in columns: ``heads`` (capacity_pps, control_mode,
    activation on, activation pending since or None) per router; ``counts`` each router's VRs (-1: none
    given, plan it); ``cols`` the routers' :func:`plan_columns` side by side, in the routers' order (the
    ``counts`` that are not -1 sum to its width)."""
    n_r = len(heads)
    now = np.broadcast_to(np.asarray(now_s, dtype=np.float64), (n_r,))
    quiet = np.zeros(n_r, dtype=bool)
    demand = np.full(n_r, np.nan)
    if n_r == 0:
        return quiet, demand
    counts = np.asarray(counts, dtype=np.intp)
    usable = (counts >= 0) & (counts <= MAX_VRS)
    if not usable.all():  # those without columns, or with too many VRs: planned
        if counts.max(initial=-1) > MAX_VRS:
            starts = np.cumsum(np.maximum(counts, 0)) - np.maximum(counts, 0)
            keep = np.concatenate([np.arange(s, s + c) for s, c in zip(starts[usable], counts[usable])] or
                                  [np.zeros(0, np.intp)])
            cols = cols[:, keep]
        idx = np.flatnonzero(usable)
        if idx.size:
            q, d = quiet_columns(settings, [heads[i] for i in idx], counts[idx], cols, now[idx])
            quiet[idx], demand[idx] = q, d
        return quiet, demand
    k = int(counts.max())
    total = int(counts.sum())
    if total == n_r * k:  # every router has k VRs (a fleet's usual batch): each column is its grid, reshaped
        valid = np.ones((n_r, k), dtype=bool)

        def grid(values: np.ndarray, fill: Any) -> np.ndarray:
            return values.reshape(n_r, k)
    else:
        r_idx = np.repeat(np.arange(n_r), counts)
        k_idx = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        valid = np.zeros((n_r, k), dtype=bool)
        valid[r_idx, k_idx] = True

        def grid(values: np.ndarray, fill: Any) -> np.ndarray:
            out = np.full((n_r, k), fill, dtype=values.dtype)
            out[r_idx, k_idx] = values
            return out

    (present, state, dsp, fwd, off, sat, weight, min_pps, max_pps, manual, level, bad, good, base, derived,
     wanted, wanted_sp, vr_off) = cols
    present_g = grid(present != 0, False)
    state_g = grid(state.astype(np.int8), 0)
    sat_g = grid(sat.astype(np.int8), 0)
    wanted_g = grid(wanted.astype(np.int8), 0)
    level_g = grid(level.astype(np.int64), 0)
    dsp_g, fwd_g, off_g = grid(dsp, np.nan), grid(fwd, np.nan), grid(off, np.nan)
    w_g, min_g, max_g = grid(weight, np.nan), grid(min_pps, np.nan), grid(max_pps, np.nan)
    man_g, bad_g, good_g = grid(manual, np.nan), grid(bad, np.nan), grid(good, np.nan)
    base_g, der_g, wsp_g = grid(base, np.nan), grid(derived, np.nan), grid(wanted_sp, np.nan)
    vr_off_g = grid(vr_off, np.nan)
    caps_h, modes_h, on_h, pending_h = zip(*heads)
    cap = _num(caps_h)
    mode = np.array([_MODE.get(m, -1) for m in modes_h], dtype=np.int8)
    act_on = np.array([bool(a) for a in on_h], dtype=bool)
    pending = _num(pending_h)
    ok = (mode >= 0) & np.isfinite(cap) & (cap > 0)
    ok &= ((state_g >= 0) & (sat_g >= 0) & (wanted_g >= 0) | ~valid).all(axis=1)
    pres = valid & present_g
    # No measurement the policies would refuse (negative, infinite), no punishment under way.
    meas_ok = lambda x: np.isnan(x) | (np.isfinite(x) & (x >= 0))
    ok &= (meas_ok(fwd_g) & meas_ok(off_g) | ~valid).all(axis=1)
    # A punished VR is quiet only at levels 1-3 and present (a restore, the last level's VR off: planned).
    punished = valid & (level_g > 0)
    ok &= ((level_g == 0) & np.isnan(base_g) & np.isnan(good_g) | punished & (level_g <= PAUSE_LEVEL) & present_g
           | ~valid).all(axis=1)

    # The host's demand: the sum over its present VRs of max(offered, forwarded), in the rows' order.
    d_vr = np.fmax(off_g, fwd_g)  # NaN only when both are missing
    take = pres & ~np.isnan(d_vr)
    host = _python_sum(np.where(take, d_vr, 0.0))
    ok &= np.isfinite(host)

    # Activation: the state stays (no switch, no timer started or stopped).
    if settings.activation_enabled:
        ap = settings.activation
        wants = np.where(act_on, host < ap.off_fraction * cap, host >= ap.on_fraction * cap)
        ok &= np.where(wants, ~np.isnan(pending) & (now - pending < ap.hold_s), np.isnan(pending))
    control_on = (mode == 1) | ((mode == 0) & act_on)

    # Misbehaviour: no step, no timer started, stopped or moved (a start later than now would be moved).
    mp = settings.misbehaviour
    watched = valid & pres & settings.misbehaviour_enabled & control_on[:, None]
    judged = watched & ~np.isnan(off_g) & ~np.isnan(fwd_g)
    top = np.where(~np.isnan(vr_off_g) & (vr_off_g != 0), OFF_LEVEL, PAUSE_LEVEL)
    now_v = now[:, None]
    # (the same IEEE operations on the same values as the per-VR code: exact, no margin needed)
    with np.errstate(invalid="ignore"):
        bad_now = (off_g > mp.ratio * fwd_g) & (off_g - fwd_g > mp.min_excess_pps)
        # misbehaving: its timer runs, from no later than now, and does not step (short of the hold, or at the top)
        climbs = np.isnan(bad_g) | (bad_g > now_v) | ((level_g < top) & (now_v - bad_g >= mp.hold_s))
        still_bad = ~climbs & np.isnan(good_g)
        # behaving: unpunished with no timer; punished, its restoration timer runs short of its hold
        restores = np.isnan(good_g) | (good_g > now_v) | (now_v - good_g >= mp.restore_hold_s)
        still_good = np.where(level_g == 0, np.isnan(bad_g), np.isnan(bad_g) & ~restores)
        unmeasured = (np.isnan(bad_g) | (bad_g <= now_v)) & (np.isnan(good_g) | (good_g <= now_v))
    mb_quiet = np.where(judged, np.where(bad_now, still_bad, still_good),
                        np.where(watched, unmeasured,  # no measurement: the state as it is
                                 (level_g == 0) & np.isnan(bad_g)))  # not watched: a punished one is restored
    ok &= (mb_quiet | ~valid).all(axis=1)

    # A punished VR's setpoint: its punishment's base (or its setpoint) lowered by its level's factor, the
    # factors as Python computes them (punished_setpoint_pps).
    al = settings.allocation
    lvl = np.clip(level_g, 0, PAUSE_LEVEL)
    factor = np.array([mp.step_factor ** min(k, PAUSE_LEVEL - 1) for k in range(PAUSE_LEVEL + 1)])[lvl]
    pun = pres & (level_g > 0)
    base_or_0 = np.where(np.isnan(base_g) | (base_g == 0), 0.0, base_g)  # (punish_base_pps or 0.0)

    # Allocation: every claim's share within the hysteresis of its derived setpoint, which is kept.
    if settings.allocation_enabled:
        has_manual = pres & ~np.isnan(man_g) & ~pun
        budget = (cap * al.target_fraction - np.where(has_manual, man_g, 0.0).sum(axis=1)
                  - np.where(pun, np.maximum(al.min_setpoint_pps, base_or_0 * factor), 0.0).sum(axis=1))
        claim = pres & np.isnan(man_g) & ~pun
        w = np.where(np.isnan(w_g), 1.0, w_g)
        lo = np.where(np.isnan(min_g), 0.0, min_g)
        hi = np.where(np.isnan(max_g), np.inf, max_g)
        dem = np.where(np.isnan(d_vr), np.nan, np.maximum(al.min_setpoint_pps, d_vr * al.demand_headroom))
        has_fwd = ~np.isnan(fwd_g)
        fwd_floor = np.maximum(al.min_setpoint_pps, np.where(has_fwd, fwd_g, 0.0))
        capped = has_fwd & ((sat_g == 1) | (sat_g == 3))
        dem = np.where(capped, np.where(np.isnan(dem), fwd_floor, np.minimum(dem, fwd_floor)), dem)
        lo = np.where(has_fwd & (sat_g == 2), np.minimum(np.maximum(lo, np.where(has_fwd, fwd_g, 0.0)), hi), lo)
        with np.errstate(invalid="ignore"):
            valid_claim = (np.isfinite(w) & (w > 0) & np.isfinite(lo) & (lo >= 0) & ~np.isnan(hi) & (hi >= lo)
                           & (np.isnan(dem) | (np.isfinite(dem) & (dem >= 0))))
        ok &= (valid_claim | ~claim).all(axis=1)
        ok &= np.isfinite(budget)
        upper = np.maximum(lo, np.where(np.isnan(dem), hi, np.minimum(hi, dem)))
        safe = claim & valid_claim
        sh = shares_pps(np.where(ok, budget, 0.0), np.where(safe, w, 1.0), np.where(safe, lo, 0.0),
                        np.where(safe, upper, 0.0), safe)
        b = np.maximum(budget, 0.0)
        # Each claim's share kept (its derived setpoint, if within the hysteresis) or taken; unsure: plan it.
        with np.errstate(invalid="ignore"):
            slack = MARGIN * (np.abs(sh) + np.abs(der_g) + b[:, None])  # (a share's rounding is the budget's)
            gap = np.abs(sh - der_g)
            keep = ~np.isnan(der_g) & (gap <= al.hysteresis * der_g - slack)
            take = np.isnan(der_g) | (gap > al.hysteresis * der_g + slack)
        ok &= (keep | take | ~claim).all(axis=1)
        kept_sum = np.where(claim, np.where(keep, der_g, sh), 0.0).sum(axis=1)
        limit = b * (1 + 1e-9)
        fits = kept_sum <= limit - MARGIN * (kept_sum + limit)
        spills = kept_sum > limit + MARGIN * (kept_sum + limit)
        ok &= fits | spills
        # The new derived setpoint, max(min_setpoint_pps, what is kept or taken), must be the old one: a kept
        # one is that if it is at least the minimum; a share taken only if it is below the minimum, the
        # minimum being the old one.
        with np.errstate(invalid="ignore"):
            below_min = (sh < al.min_setpoint_pps - MARGIN * (al.min_setpoint_pps + b[:, None])) & (der_g == al.min_setpoint_pps)
        same = np.where(fits[:, None] & keep, der_g >= al.min_setpoint_pps, below_min)
        ok &= (same | ~claim).all(axis=1)
        new_derived = der_g
    else:
        new_derived = der_g

    # Wanted states and the reconciliation: what the daemon holds is what is wanted, and was saved as such.
    base_sp = np.where(np.isnan(man_g), new_derived, man_g)
    # (punish_base_pps or base or 0.0), lowered
    pun_base = np.where(base_or_0 != 0, base_or_0, np.where(np.isnan(base_sp) | (base_sp == 0), 0.0, base_sp))
    sp = np.where(pun, np.maximum(al.min_setpoint_pps, pun_base * factor), base_sp)
    active = control_on[:, None] & ~np.isnan(sp)
    with np.errstate(invalid="ignore"):
        same_sp = np.abs(dsp_g - sp) <= SETPOINT_TOLERANCE * sp  # exact, as above
    holds_want = np.where(active, np.where(
        level_g >= PAUSE_LEVEL,
        (state_g == 2) & (wanted_g == 3),  # paused, and kept paused whatever its setpoint
        (state_g == 1) & ~np.isnan(dsp_g) & same_sp & (wanted_g == 2)) & np.isfinite(sp) & (wsp_g == sp),
        (state_g == 0) & (wanted_g == 1) & np.isnan(wsp_g))
    absent_ok = (wanted_g == 0) & np.isnan(wsp_g)
    ok &= (np.where(pres, holds_want, absent_ok) | ~valid).all(axis=1)
    quiet[:] = ok
    demand[ok] = host[ok]
    return quiet, demand

