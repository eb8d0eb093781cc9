"""XTC's law and the paper's PI, on numpy arrays: the one place the control laws are written.  Pure.

A :class:`ControllerBank` steps a list of controllers of one kind and tuning at once (the daemon's
period, 1000 VRs); a controller's own :meth:`~xtc.control.laws.XtcController.step` is the same law on
its one row (:meth:`ControllerBank.step_one`).  The state lives in the bank's named columns (:class:`Rows`).
Why the arithmetic is element by element and why this is one file: docs/design/control-law.md, "The bank".
"""

from __future__ import annotations

import math
from itertools import repeat
from typing import Any, Sequence

import numpy as np

from .bounded import FLOAT_MAX, BoundedController
from .columns import Attached, attach, new_columns
from .estimate import LagRows
from .laws import (EXACT_DECADES, LN10, DESCENT_FRACTION, NOISE_SMOOTHING,
                   OBSERVER_TARGET_BOUNDS, PERSIST_BAND_FRACTION, PROBE_DISAGREEMENT_DECADES, PROBE_LAG_MAX,
                   PROBE_WINDOW_PERIODS, SATURATION_REPEAT_FACTOR, TRANSIENT_END_FRACTION, TRANSIENT_PERIODS,
                   XtcController)
from .paper import PaperPI

__all__ = ["ControllerBank"]

_log10 = math.log10
SQRT2 = math.sqrt(2.0)
SQRT_PI = math.sqrt(math.pi)


def _pow10(x: np.ndarray) -> np.ndarray:
    """``10.0 ** x`` element by element with the C library's pow (what Python's ``**`` uses)."""
    n = len(x)
    return np.fromiter(map(pow, repeat(10.0, n), x.tolist()), dtype=np.float64, count=n)


def _log10_of(x: np.ndarray) -> np.ndarray:
    n = len(x)
    return np.fromiter(map(_log10, x.tolist()), dtype=np.float64, count=n)


def _log10_where(x: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``math.log10`` of ``x`` where ``where`` holds (NaN elsewhere); a value repeated across
    elements (a band at its floor) is computed once, which is the same number."""
    out = np.full(len(x), np.nan)
    sub = x[where]
    if len(sub):
        out[where] = _log10(sub[0].item()) if (sub == sub[0]).all() else _log10_of(sub)
    return out


class _Reuse:
    """An element-wise function of :mod:`math` (``_pow10``, ``_log10_of``) that recomputes only the
    elements whose input differs, bit for bit, from the same position of the previous call.

    The function is pure, so where the input is the same the output is the same number: the result
    is the function's, exactly (where inputs repeat: docs/design/control-law.md, "The bank").
    """

    __slots__ = ("f", "x", "y")

    def __init__(self, f: Any) -> None:
        self.f = f
        self.x = self.y = np.empty(0)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.array(x, dtype=np.float64)  # a copy: the caller's array may change
        y = self.y
        if len(x) != len(self.x):
            y = self.f(x)
        else:
            idx = np.flatnonzero(x.view(np.uint64) != self.x.view(np.uint64))
            if len(idx):
                y = y.copy()
                y[idx] = self.f(x[idx])
        self.x, self.y = x, y
        return y  # never written to in place (here or by the callers)


def _rates_ok(v: np.ndarray) -> np.ndarray:
    """Where a rate is what ``check_rate`` accepts: finite and >= 0 (pps)."""
    return (v >= 0.0) & (v <= FLOAT_MAX)


# ---------------------------------------------------------------------------------- rows
#: The law's state: (the controller's attribute, its column of :class:`Rows`, the value's type; None:
#: a float or None, kept with a flag column ``has_<column>``).  XTC's law keeps them all, the paper's
#: PI the first five and ``_e_prev`` (:data:`_PI_COLUMNS`).  The lag probe's transient: under way, its
#: age, the last setpoint and the periods since the activation or a setpoint move (``_lag_probe_in``).
_COLUMNS: tuple[tuple[str, str, Any], ...] = (
    ("_u", "u", float), ("_carry", "carry", float), ("_quant_decades", "quant", float), ("_u_force", "u_force", float),
    ("steps", "steps", int), ("_E_prev", "e_prev", None), ("_noise_log", "noise", float), ("_descent", "descent", bool),
    ("_transient", "transient", bool), ("_transient_age", "transient_age", int), ("_r_prev", "r_prev", None),
    ("_setpoint_age", "setpoint_age", int))
_PI_COLUMNS = _COLUMNS[:5] + (("_e_prev", "e_prev", None),)


class Rows:
    """The law's state of a list of controllers, as columns (:data:`_COLUMNS`; one row per controller),
    and for XTC's law their lag estimators' (:attr:`lag`, a :class:`~xtc.control.estimate.LagRows`).

    :meth:`ControllerBank.rows` *attaches* the controllers: each becomes a :class:`_XtcRow` or
    :class:`_PIRow`, whose state attributes are properties on its row (docs/design/control-law.md,
    "One law; where the state lives"); an XTC controller's estimator is attached to the same row of :attr:`lag`.
    """

    __slots__ = ("n", *(col for _, col, _ in _COLUMNS), "has_e_prev", "has_r_prev", "lag")

    def __init__(self, ctls: Sequence[Any], spec: tuple[tuple[str, str, Any], ...]) -> None:
        self.n = len(ctls)
        new_columns(self, spec, ctls)  # (the paper's PI: its columns only)
        self.lag: LagRows | None = None


class _XtcRow(Attached, XtcController):
    """An :class:`~xtc.control.laws.XtcController` whose state is a row of a :class:`Rows`."""

    _plain, _spec, _owned = XtcController, _COLUMNS, ("lag_estimator",)
    _state = tuple(name for name, _, _ in _spec)


class _PIRow(Attached, PaperPI):
    """A :class:`~xtc.control.paper.PaperPI` whose state is a row of a :class:`Rows`."""

    _plain, _spec = PaperPI, _PI_COLUMNS
    _state = tuple(name for name, _, _ in _spec)


_ROW_CLASS: dict[type, type[Attached]] = {XtcController: _XtcRow, PaperPI: _PIRow}
_ROW_TYPES = (_XtcRow, _PIRow)
#: ``at`` that means every row of the bank (the daemon steps all its VRs at once).
ALL_ROWS = slice(None)


def _plain_type(ctl: Any) -> type:
    t = type(ctl)
    return t._plain if t in _ROW_TYPES else t


def _subset(at: Any, idx: np.ndarray) -> np.ndarray:
    """Rows ``at`` (a slice of all rows or an index array) restricted to the positions ``idx``."""
    return idx if isinstance(at, slice) else np.asarray(at)[idx]


class _Lag:
    """The lag probe's answer for the controllers of one step (:meth:`ControllerBank._lag_probe_in`):
    where the observer steps (``observed``) and there the rate the cap in force settles to, the
    observer's next state (pps) and its lag; the probe candidate's move (decades, 0.0: none), the rate
    at rest before it (pps) and the estimators (None: quiet)."""

    __slots__ = ("observed", "probe_move", "y_settled", "x_next", "g", "rest", "estimators")

    def __init__(self, n: int) -> None:
        self.observed = np.zeros(n, dtype=bool)
        self.probe_move = np.zeros(n)
        self.y_settled = np.zeros(n)
        self.x_next = np.zeros(n)
        self.g = np.zeros(n)
        self.rest = np.zeros(n)
        self.estimators: list[Any] = [None] * n


class ControllerBank:
    """The law of one controller kind and tuning, applied to many controllers at once.

    Build one with :meth:`like` from a controller of the kind and tuning wanted; it then steps any
    list of controllers that :meth:`accepts`.  Nothing is kept between calls but the parameters
    and the last results of its element-wise ``log10`` / ``10 **`` (reused where the same inputs
    come again, which gives the same numbers).
    """

    def __init__(self, proto: BoundedController) -> None:
        self.cls = _plain_type(proto)
        self.caps = proto.caps
        # Results of the element-wise math of the last call, reused where inputs repeat (exact).
        self._log10_r, self._log10_want, self._log10_got = _Reuse(_log10_of), _Reuse(_log10_of), _Reuse(_log10_of)
        self._pow10_u_step, self._pow10_u, self._pow10_u_after = _Reuse(_pow10), _Reuse(_pow10), _Reuse(_pow10)
        self._u_min = proto._u_min
        self._u_max = proto._u_max
        self.params: tuple[Any, ...] = self._params_of(proto)
        if isinstance(proto, XtcController):
            self.tuning = proto.tuning

    @staticmethod
    def _params_of(ctl: Any) -> tuple[Any, ...]:
        if isinstance(ctl, XtcController):
            return (ctl.caps, ctl.tuning, ctl.kp, ctl.ki, ctl.saturation_elasticity)
        return (ctl.caps, ctl.gains, ctl.dead_zone_fraction, ctl.kind)

    @classmethod
    def like(cls, proto: Any) -> "ControllerBank | None":
        """A bank for controllers like ``proto`` (same class and parameters), or None if it has none."""
        return cls(proto) if _plain_type(proto) in _ROW_CLASS else None

    def accepts(self, ctl: Any) -> bool:
        """True if ``ctl`` has this bank's class and parameters (the bank steps it exactly)."""
        return _plain_type(ctl) is self.cls and self._params_of(ctl) == self.params

    def rows(self, ctls: Sequence[Any]) -> Rows | None:
        """The state of ``ctls`` (each accepted by :meth:`accepts`) as columns; attaches them.

        From then on each controller's state lives in its row (see :class:`Rows`), and
        :meth:`step` and :meth:`applied` given these rows work on the columns alone.  None (and
        nothing attached) when a controller, or an XTC controller's lag estimator, appears twice in ``ctls``.
        """
        n = len(ctls)
        if len(set(map(id, ctls))) != n or (self.cls is XtcController and len({id(c.lag_estimator) for c in ctls}) != n):
            return None
        rows = Rows(ctls, _COLUMNS if self.cls is XtcController else _PI_COLUMNS)
        if self.cls is XtcController:
            rows.lag = LagRows.attach([c.lag_estimator for c in ctls])
        attach(ctls, rows, _ROW_CLASS[self.cls])
        return rows

    def _own(self, ctls: Sequence[Any], rows: Rows | None, at: Any) -> tuple[Rows, Any]:
        """(rows, at) that hold the state of ``ctls``: the given ones, the rows they are all attached
        to, or new rows they are attached to now (:meth:`rows`; ValueError where a controller or its lag
        estimator appears twice in ``ctls``).  The bank reads and writes the state there only."""
        if rows is not None:
            return rows, at
        if ctls and type(ctls[0]) in _ROW_TYPES:  # all attached to the same rows: stepping them is stepping those
            rows = ctls[0].__dict__["_rows"]
            ds = [c.__dict__ for c in ctls]
            if all(d.get("_rows") is rows for d in ds):
                return rows, np.fromiter([d["_row"] for d in ds], dtype=np.intp, count=len(ds))
        rows = self.rows(ctls)
        if rows is None:
            raise ValueError("a controller (or its lag estimator) appears twice in the bank's list")
        return rows, ALL_ROWS

    # ------------------------------------------------------------------------------- step
    def step(self, ctls: Sequence[Any], forwarded_pps: np.ndarray, setpoint_pps: np.ndarray,
             offered_pps: np.ndarray | None = None, rows: Rows | None = None,
             at: Any = ALL_ROWS, cpu_percent: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``ctl.step(forwarded, setpoint, offered, cpu)`` (:meth:`xtc.control.Controller.step`) for every
        controller of ``ctls`` (each accepted by :meth:`accepts`: not checked here) at once.

        The rates and CPU readings are arrays, one element per controller, NaN where the scalar step's
        is None (``offered_pps`` and ``cpu_percent`` None: all unknown; ``cpu_percent`` is not checked).
        ``rows`` and ``at``: the controllers' rows (:meth:`rows`) and which of them ``ctls`` are, in order
        (all by default).  Returns the commanded caps (percent of one CPU) and where the step was taken:
        where a rate is not what the scalar step accepts (NaN, infinite, negative), nothing is changed
        and the cap is NaN (step that controller alone to get its error).
        """
        n = len(ctls)
        rows, at = self._own(ctls, rows, at)
        y = np.asarray(forwarded_pps, dtype=np.float64)
        r = np.asarray(setpoint_pps, dtype=np.float64)
        off = np.full(n, np.nan) if offered_pps is None else np.asarray(offered_pps, dtype=np.float64)
        ok = _rates_ok(y) & _rates_ok(r) & (np.isnan(off) | _rates_ok(off))
        cpu = None if cpu_percent is None else np.asarray(cpu_percent, dtype=np.float64)
        if ok.all():
            return self._law(ctls, y, r, off, rows, at, cpu), ok
        idx = np.flatnonzero(ok)
        caps = np.full(n, np.nan)
        caps[idx] = self._law([ctls[i] for i in idx.tolist()], y[idx], r[idx], off[idx], rows, _subset(at, idx),
                              None if cpu is None else cpu[idx])
        return caps, ok

    def step_one(self, ctl: Any, y: float, r: float, off: float = math.nan, cpu: float = math.nan) -> float:
        """``ctl.step`` on rates it has checked (pps; ``off`` and ``cpu`` NaN where unknown): the law on
        its one row, with none of :meth:`step`'s checks and list handling; the next cap."""
        rows = ctl.__dict__["_rows"] if type(ctl) in _ROW_TYPES else self.rows((ctl,))
        at = ALL_ROWS if rows.n == 1 else np.array((ctl.__dict__["_row"],))  # its own row: views, not copies
        ys, rs, offs, cpus = (np.array((v,), dtype=np.float64) for v in (y, r, off, cpu))
        return self._law((ctl,), ys, rs, offs, rows, at, cpus)[0].item()

    def _law(self, ctls: Sequence[Any], y: np.ndarray, r: np.ndarray, off: np.ndarray, rows: Rows, at: Any,
             cpu: np.ndarray | None) -> np.ndarray:
        """The bank's law on checked rates (pps; ``off`` and ``cpu`` NaN where unknown): the next caps."""
        if self.cls is not XtcController:
            return self._step_pi(y, r, rows, at)
        lag = self._lag_probe_in(ctls, y, r, off, rows, at) if self.tuning.lag_probe else None
        return self._step_xtc(y, r, off, rows, at, cpu, lag)

    def _lag_probe_in(self, ctls: Sequence[XtcController], y: np.ndarray, r: np.ndarray, off: np.ndarray,
                      rows: Rows, at: Any = ALL_ROWS) -> _Lag | None:
        """The lag probe's part of the step (``XtcTuning.lag_probe``), before the law: the estimators'
        update, the probe candidate, the transient (docs/design/control-law.md, "The probe" and "The bank":
        the quiet rows on whole columns, the others row by row).  Returns what the law needs of it
        (:class:`_Lag`), or None where no row is in a probe or a transient."""
        lag: _Lag | None = None
        fb = self.tuning.fine_band_fraction
        # The columns in the order of ``ctls`` (views where ``at`` is a slice: all read before any is written).
        log_cap, quant, rp_arr, has_rp, transient_arr, age_arr, window_arr = (
            rows.u_force[at], rows.quant[at], rows.r_prev[at], rows.has_r_prev[at],
            rows.transient[at], rows.transient_age[at], rows.setpoint_age[at])
        exact_arr = np.abs(quant) < EXACT_DECADES
        with np.errstate(invalid="ignore"):  # steady: the setpoint within the fine band of the last, the transient over
            steady = (~has_rp | (np.abs(r - rp_arr) <= fb * r)) & (~transient_arr | (age_arr >= TRANSIENT_PERIODS))
        est = rows.lag
        assert est is not None  # (XTC's rows have their estimators': :meth:`rows`)
        quiet = steady & est.quiet(at, log_cap, exact_arr)
        idx = np.flatnonzero(quiet)
        if len(idx):
            est.update_quiet(_subset(at, idx), y[idx], log_cap[idx], off[idx])
        busy = np.flatnonzero(~quiet).tolist()
        # Quiet rows: the transient over, its age and the periods since a setpoint move counted on.
        new_transient, new_age = np.zeros(len(ctls), dtype=bool), age_arr + 1
        new_window = np.minimum(window_arr + 1, PROBE_WINDOW_PERIODS)
        if busy:
            at_busy = _subset(at, np.array(busy, dtype=np.intp))
            plain = est.plain(at_busy)  # their state out of the columns in one pass, written back below
            cols = (y, r, log_cap, off, exact_arr, has_rp, rp_arr, transient_arr, age_arr, window_arr, rows.noise[at])
            for k, le, (yk, rk, cap, o, exact, has_rp_k, rp, transient, age, window, noise) in zip(
                    busy, plain, zip(*(c[busy].tolist() for c in cols))):
                noise *= LN10
                sampled = le.update(yk, cap, None if math.isnan(o) else o, noise)
                moved = has_rp_k and abs(rk - rp) > fb * rk
                if moved:
                    window = 0
                probe_move = le.probe_candidate(noise) if exact and window < PROBE_WINDOW_PERIODS else 0.0
                new_window[k] = min(window + 1, PROBE_WINDOW_PERIODS)
                if sampled or moved:
                    transient, age = True, 0
                elif transient and age >= TRANSIENT_PERIODS:
                    transient = False
                new_transient[k], new_age[k] = transient, age + 1
                observed = transient and le.confident and exact
                if observed or probe_move:
                    if lag is None:
                        lag = _Lag(len(ctls))
                    lag.observed[k], lag.probe_move[k], lag.rest[k] = observed, probe_move, le.probe_rest_pps
                    if observed:  # (the update has given the observer its next state)
                        lag.y_settled[k], lag.x_next[k], lag.g[k] = le.settled_pps, le.next_state_pps, le.lag
                    lag.estimators[k] = ctls[k].lag_estimator  # (the law arms a probe on it: after ``put``)
            est.put(at_busy, plain)
        rows.r_prev[at], rows.has_r_prev[at] = r, True
        rows.transient[at], rows.transient_age[at], rows.setpoint_age[at] = new_transient, new_age, new_window
        return lag

    def _step_xtc(self, y: np.ndarray, r: np.ndarray, off: np.ndarray, rows: Rows, at: Any = ALL_ROWS,
                  cpu: np.ndarray | None = None, lag: _Lag | None = None) -> np.ndarray:
        """XTC's law (:class:`~xtc.control.laws.XtcController`'s docstring) on checked rates, with the lag
        probe's answer ``lag`` (None: the law without the lag); the next caps."""
        t = self.tuning
        u, carry, quant, noise = rows.u[at], rows.carry[at], rows.quant[at], rows.noise[at]
        e_prev, has_prev = rows.e_prev[at], rows.has_e_prev[at]
        log_y = _log10_of(np.maximum(y, 1.0))
        # The rate the VR would have forwarded at the wanted cap (control-law.md, "Quantising actuators").
        log_y_wanted = log_y + quant
        y_wanted = np.where(y > 0, _pow10(log_y_wanted), y)
        E = self._log10_r(np.maximum(r, 1.0)) - log_y_wanted
        E_prev = np.where(has_prev, e_prev, E)
        # The rate the dead zone and the bands judge: the one measured, or in a probe's transient the
        # mean the next period will have at the cap in force (the observer's prediction).
        y_judged = y_wanted
        obs = lag.observed if lag is not None and lag.observed.any() else None
        if obs is not None:
            y_judged = np.where(obs, np.maximum(1.0, (1.0 - lag.g) * lag.y_settled + lag.g * lag.x_next), y_wanted)
        # Noise estimate from the change of the error (clipped: a real step must not inflate it),
        # only where there was a previous error.
        change = np.minimum(np.abs(E - E_prev), 3.0 * noise * SQRT2)
        sigma_sample = change * SQRT_PI / 2.0
        new_noise = np.maximum(noise + NOISE_SMOOTHING * (sigma_sample - noise), 1e-4)
        noise = np.where(has_prev, new_noise, noise)

        err = np.abs(r - y_judged)
        move = err >= t.dead_zone_fraction * r
        if move.any():
            du, descent = self._move(y, r, off, E, E_prev, has_prev, y_wanted, err, move, noise, rows, at, cpu, lag)
        else:  # every row inside the dead zone: u stays, no descent (what the move would give)
            du, descent = np.zeros(len(y)), np.zeros(len(y), dtype=bool)
        new_u, caps = self._stepped(u, du, move, carry)
        if obs is not None:
            # The transient ends where the next period's mean and the rate the new cap settles to are
            # both within transient_end_fraction of the setpoint.
            end = TRANSIENT_END_FRACTION
            for k in np.flatnonzero(obs).tolist():
                rk = r[k].item()
                moved = 10.0 ** (new_u[k].item() - u[k].item())
                if abs(rk - y_judged[k].item()) < end * rk and abs(rk - lag.y_settled[k].item() * moved) < end * rk:
                    rows.transient[k if isinstance(at, slice) else at[k]] = False
        rows.e_prev[at] = E
        rows.has_e_prev[at] = True
        rows.noise[at] = noise
        rows.descent[at] = descent
        rows.steps[at] += 1
        rows.u[at] = new_u  # inside the dead zone u stays: the same number
        return caps

    def _move(self, y: np.ndarray, r: np.ndarray, off: np.ndarray, E: np.ndarray, E_prev: np.ndarray,
              has_prev: np.ndarray, y_wanted: np.ndarray, err: np.ndarray, move: np.ndarray, noise: np.ndarray,
              rows: Rows, at: Any, cpu: np.ndarray | None, lag: _Lag | None) -> tuple[np.ndarray, np.ndarray]:
        """The step of XTC's law (decades; taken only where ``move``: outside the dead zone) and where a
        descent from saturation is under way, from :meth:`_step_xtc`'s errors (``err``: pps), judged rates
        and new noise estimate."""
        t, u, quant = self.tuning, rows.u[at], rows.quant[at]
        noise_band = t.noise_band_sigmas * (noise * LN10)
        band = np.maximum(t.fine_band_fraction, noise_band)
        # A disturbance inside the fine band (XtcController's docstring): dead-beat gains.
        # The two band logarithms only where the first three terms hold (elsewhere persist is
        # False whatever they are).
        exact = np.abs(quant) < EXACT_DECADES
        persist = has_prev & exact & (E * E_prev > 0.0)
        if persist.any():
            persist &= np.abs(E_prev) < _log10_where(1.0 + 2.0 * band, persist)
            persist &= np.minimum(np.abs(E), np.abs(E_prev)) >= _log10_where(
                1.0 + np.maximum(PERSIST_BAND_FRACTION, noise_band), persist)
        fine = (err < band * r) & ~persist
        if lag is not None:
            fine &= ~lag.observed
        u_force_rows = rows.u_force[at]
        kp, ki, e0 = self.params[2:5]
        not_limited = (off > 0) & (y >= t.unconstrained_fraction * off)  # NaN compares False
        du_beat = (kp + ki) * E - kp * E_prev
        if lag is not None and lag.observed.any():
            # The step from the rate the cap in force settles to (the lag's observer) to the settled
            # rate that puts the next period's *mean* at the setpoint.
            lo, hi = OBSERVER_TARGET_BOUNDS
            for k in np.flatnonzero(lag.observed & move & ~fine).tolist():
                yk, rk, ys = y[k].item(), r[k].item(), lag.y_settled[k].item()
                g, x = lag.g[k].item(), lag.x_next[k].item()
                r_to = min(hi * rk, max(lo * rk, (rk - g * x) / (1.0 - g)))
                du_beat[k] = _log10(max(r_to, 1.0)) - _log10(max(ys * y_wanted[k].item() / yk if yk > 0 else ys, 1.0))
        # Leaving saturation: at least the model's step downwards (XtcController's docstring).
        descent = np.zeros(len(y), dtype=bool)
        if e0 > 0.0:
            sat = not_limited
            was_descent = rows.descent[at]  # (read only: the new one is written after the step)
            u_top = self._u_max - EXACT_DECADES
            # Also at >= descent_fraction of the offered rate, from the top cap or on after such a
            # step; the cap in force is read only where the rest holds and it decides.
            def from_top(where: np.ndarray) -> np.ndarray:
                top = was_descent.copy()
                for k in np.flatnonzero(where & ~was_descent).tolist():
                    top[k] = u_force_rows[k] >= u_top
                return top

            below = r < y_wanted
            more = ~sat & (off > 0) & (y >= DESCENT_FRACTION * off) & below
            if more.any():
                sat = sat | (more & from_top(more))
            descent = sat & below
            if descent.any():
                f = np.where(was_descent & not_limited & exact, SATURATION_REPEAT_FACTOR, 1.0)
                du_beat = np.where(descent, np.minimum(du_beat, f * E / e0), du_beat)
                descent &= move & ~fine
            # The descent inside the fine band, from the top cap or on after such a step: the gentle
            # gain assumes elasticity 1 where it is near 0.  Not where the noise has widened the band.
            fd = fine & move & not_limited & below & (noise_band <= t.fine_band_fraction)
            if fd.any():
                fd &= from_top(fd)
                du_fine = np.where(fd, np.minimum(t.fine_gain * E, E / e0), t.fine_gain * E)
                du_beat = np.where(fine, du_fine, du_beat)
                fine = fine & ~fd
                descent |= fd
        du = np.where(fine, t.fine_gain * E, du_beat)
        if lag is not None:
            for k in np.flatnonzero((lag.probe_move != 0.0) & move).tolist():
                du[k] = self._probe_step(lag, k, du[k].item(), u[k].item(), y[k].item(), r[k].item(), E[k].item())
        du = np.maximum(-t.max_step_decades, np.minimum(t.max_step_decades, du))
        hold = (du > 0) & not_limited
        if cpu is not None and t.cap_bound_fraction > 0.0 and hold.any():
            # A cap that binds (the VR used cap_bound_fraction of the cap in force) overrules the guard;
            # the caps in force are read only where the guard holds a raise (NaN compares False).
            k = np.flatnonzero(hold)
            bound = (cpu[k] >= t.cap_bound_fraction * _pow10(u_force_rows[k])) & (cpu[k] < np.inf)
            hold[k[bound]] = False
        return np.where(hold, 0.0, du), descent

    def _probe_step(self, lag: _Lag, k: int, du: float, u: float, y: float, r: float, E: float) -> float:
        """The step in the period after a probe candidate's move (``lag_probe``): the law's ``du``, the
        lag's hedge, or 0 (the probe).  Arms the estimator's sample whenever it decides."""
        t = self.tuning
        lag.estimators[k].arm_probe()
        if lag.probe_move[k] * E < 0.0:
            return du  # the rate passed the setpoint: the law's move back, sampled all the same
        # The settled rate a lag of PROBE_LAG_MAX implies, and the move it asks, against the law's.
        c = PROBE_LAG_MAX
        f_lag = max((y - c * lag.rest[k].item()) / (1.0 - c), 1.0)
        lim = t.max_step_decades
        du_lag = max(-lim, min(lim, _log10(max(r, 1.0)) - _log10(f_lag)))
        du_law = max(-lim, min(lim, du))
        lo, hi = self._u_min, self._u_max
        if abs(min(hi, max(lo, u + du_lag)) - min(hi, max(lo, u + du_law))) < PROBE_DISAGREEMENT_DECADES:
            return du_lag
        return 0.0

    def _stepped(self, u: np.ndarray, du: np.ndarray, move: np.ndarray,
                 carry: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The end of a step: ``u + du`` within the log-cap range where ``move`` (``u`` elsewhere),
        and the caps it gives (plus ``carry``, within the caps' range)."""
        u = np.where(move, np.minimum(self._u_max, np.maximum(self._u_min, u + du)), u)
        return u, np.minimum(self.caps.cap_max_percent, np.maximum(self.caps.cap_min_percent, self._pow10_u_step(u) + carry))

    def _step_pi(self, y_pps: np.ndarray, r_pps: np.ndarray, rows: Rows, at: Any = ALL_ROWS) -> np.ndarray:
        kp, ki = self.params[1].kp, self.params[1].ki
        dz = self.params[2]
        u, carry, e_prev_v, has_prev = rows.u[at], rows.carry[at], rows.e_prev[at], rows.has_e_prev[at]
        y = y_pps / 1000.0
        r = r_pps / 1000.0
        e = r - y
        e_prev = np.where(has_prev, e_prev_v, e)
        move = np.abs(e) >= dz * r
        du = (kp + ki) * e - kp * e_prev
        u, caps = self._stepped(u, du, move, carry)
        rows.u[at] = u
        rows.e_prev[at] = e
        rows.has_e_prev[at] = True
        rows.steps[at] += 1
        return caps

    # ---------------------------------------------------------------------------- applied
    def applied(self, ctls: Sequence[Any], cap_in_force_percent: np.ndarray, rows: Rows | None = None,
                at: Any = ALL_ROWS) -> tuple[np.ndarray, np.ndarray]:
        """``ctl.applied(cap)`` for every controller at once (``rows`` and ``at`` as for :meth:`step`).

        Returns each controller's :attr:`cap_percent` afterwards and where the cap was taken: where it is
        not what ``check_cap`` accepts (finite, > 0) nothing is changed and the cap is NaN (call that
        controller's :meth:`applied` alone to get its error).
        """
        rows, at = self._own(ctls, rows, at)
        got = np.asarray(cap_in_force_percent, dtype=np.float64)
        done = (got > 0) & (got <= FLOAT_MAX)
        if not done.all():
            idx = np.flatnonzero(done)
            caps = np.full(len(ctls), np.nan)
            caps[idx] = self.applied([ctls[i] for i in idx.tolist()], got[idx], rows, _subset(at, idx))[0]
            return caps, done
        u, carry = rows.u[at], rows.carry[at]
        want = self._pow10_u(u)
        carry = carry + want - got
        limit = np.maximum(BoundedController.CARRY_LIMIT_PERCENT, BoundedController.CARRY_LIMIT_FRACTION * got)
        log_got = self._log10_got(got)
        restart = np.abs(carry) > limit
        u = np.where(restart, np.minimum(self._u_max, np.maximum(self._u_min, log_got)), u)
        carry = np.where(restart, 0.0, carry)
        quant = np.where(restart, 0.0, self._log10_want(want) - log_got)
        rows.carry[at] = carry
        rows.u_force[at] = log_got
        rows.quant[at] = quant
        rows.u[at] = u  # elsewhere than a restart u stays: the same number
        caps = np.minimum(self.caps.cap_max_percent, np.maximum(self.caps.cap_min_percent, self._pow10_u_after(u) + carry))
        return caps, done
