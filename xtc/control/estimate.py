"""The lag of a VR's rate, measured from the lag probe's move (:class:`LagEstimator`), and many
estimators' state as columns (:class:`LagRows`).  Pure."""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping, Sequence

import numpy as np

from .columns import Attached, attach, new_columns, put_columns

__all__ = ["LagEstimator", "LagRows", "observed", "pole_of_lag"]


@functools.lru_cache(maxsize=4096)
def pole_of_lag(lag: float) -> float:
    """The pole ``p = exp(-T / tau)`` of the lag whose first period misses the fraction ``lag``.

    ``lag = (tau / T)(1 - exp(-T / tau))`` (a period's mean of a first-order response); solved for
    ``tau`` by bisection.  Dimensionless, 0 <= lag < 1.  Remembered (80 bisection steps take about
    80 us; every estimator's reset and every sample asks for the model's lag or a grid lag again).
    """
    if not (0.0 <= lag < 1.0):
        raise ValueError(f"lag must be within 0..1, got {lag}")
    if lag <= 1e-9:
        return 0.0
    lo, hi = -12.0, 12.0  # log(tau / T)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        tau = math.exp(mid)
        if tau * (1.0 - math.exp(-1.0 / tau)) < lag:
            lo = mid
        else:
            hi = mid
    return math.exp(-1.0 / math.exp(0.5 * (lo + hi)))


#: The estimator's constants (dimensionless unless said; no configuration sets them; what each guards:
#: docs/design/control-law.md, "The lag estimator").
#:
#: Periods of history an estimator keeps.
_HIST = 4
#: Smallest change of ``log10(cap in force)`` that can show the lag, decades.
MIN_MOVE_DECADES = 0.1
#: The cap's change in the period before the move is at most this fraction of the move (about rest);
#: for a probe the period also counts as rest when its rate moved by at most PROBE_REST_FRACTION.
REST_FRACTION = 0.25
PROBE_REST_FRACTION = 0.05
#: The residual and the third period's prediction are also judged within this many standard deviations
#: of the controller's noise estimate (when wider than :data:`FIT_FRACTION`, :data:`VERIFY_FRACTION`).
NOISE_SIGMAS = 4.0
#: Largest lag believed; a sample beyond ``[0, LAG_MAX]`` is not used.
LAG_MAX = 0.8
#: A grid of lags 0..LAG_MAX, and the sample's residual's coefficients on them (1 - g, g (1 - p), g p: as
#: arrays, :meth:`LagEstimator._candidates` takes the residual on all of them at once).
_GRID_LAG_LIST = [i / 200.0 for i in range(201) if i / 200.0 <= LAG_MAX]
_GRID_G, _GRID_P = np.array(_GRID_LAG_LIST), np.array([pole_of_lag(g) for g in _GRID_LAG_LIST])
_GRID_ONE_MINUS_LAG, _GRID_LAG_OPEN, _GRID_LAG_POLE = 1.0 - _GRID_G, _GRID_G * (1.0 - _GRID_P), _GRID_G * _GRID_P
#: A period whose rate is at least this fraction of the offered rate is offered-limited (no sample uses it).
UNCONSTRAINED_FRACTION = 0.97
#: A residual within this fraction of the rate counts as explained.
FIT_FRACTION = 0.03
#: The third period must be predicted within this fraction of its rate.
VERIFY_FRACTION = 0.1
#: The settled rate is at least this fraction of the rate measured.
SETTLED_FLOOR_FRACTION = 0.1
#: A probe candidate's first-period change must exceed this many standard deviations of the difference
#: of two noisy samples.
PROBE_NOISE_SIGMAS = 2.0


def _pick(cond: bool, a: float, b: float) -> float:
    """``numpy.where`` of one element."""
    return a if cond else b


def observed(rate_pps: Any, x: Any, g: Any, p: Any, where: Any) -> tuple[Any, Any]:
    """The observer's step, of one estimator (floats, ``where`` :func:`_pick`) or of many (arrays,
    ``where`` :func:`numpy.where`): from a period's rate and the state ``x`` at its start (pps), with
    lag ``g`` and pole ``p``, the rate the cap in force settles to and the state at the next period's
    start (pps).  The settled rate is within a factor 1 - g of the rate measured (what a move from rest
    can leave still to come) and at least :data:`SETTLED_FLOOR_FRACTION` of it."""
    floor, rise = rate_pps * SETTLED_FLOOR_FRACTION, (rate_pps - g * x) / (1.0 - g)
    high = where(rise > floor, rise, floor)
    top = rate_pps / (1.0 - g)
    settled = where(high < top, high, top)
    return settled, p * x + (1.0 - p) * settled


class LagEstimator:
    """The lag of a VR's measured rate, from its response to the lag probe's move, and its observer.  Pure.

    The lag ``g`` is the fraction of a cap move that the first period's mean misses (the model file's
    pole ``a`` is this ``g``).  One sample per activation, the probe's, gives it (:meth:`update`);
    until then, and after :meth:`reset`, :attr:`lag` is the model's (``fallback_lag``: dimensionless,
    0 <= fallback_lag < 1) and :attr:`confident` is False.  Every period the observer gives
    :attr:`settled_pps`, the rate the cap in force settles to, which the law steps from.  The plant's
    equations, the sample, its guards and the observer: docs/design/control-law.md, "The lag estimator".
    """

    def __init__(self, fallback_lag: float):
        if not (0.0 <= fallback_lag < 1.0):
            raise ValueError(f"fallback_lag must be within 0..1, got {fallback_lag}")
        self.fallback_lag = float(fallback_lag)
        self.reset()

    def reset(self) -> None:
        """Forget every sample (a new activation)."""
        # (rate pps, log10 cap, rate / offered or 0 if unknown), oldest first
        self._hist: tuple[tuple[float, float, float], ...] = ()
        self.lag = self.fallback_lag
        self._pole = pole_of_lag(self.lag)
        #: The observer's forwarding rate at the next period's start, and the rate the cap in force
        #: settles to (pps; None and 0.0 before the first period).
        self.next_state_pps: float | None = None
        self.settled_pps = 0.0
        self._pending: tuple[tuple[float, ...], float, float, tuple[float, ...]] | None = None
        self._check: tuple[Any, ...] | None = None
        self.samples = 0
        #: A probe was taken in this activation (one at most), and its sample is due in the next period.
        self.probed = False
        self._probe_armed = False
        #: The rate at rest before the probe candidate's move, packets/s.
        self.probe_rest_pps = 0.0

    @property
    def confident(self) -> bool:
        """True once a sample has been taken (the estimate is then the data's)."""
        return self.samples > 0

    def update(self, rate_pps: float, log_cap: float, offered_pps: float | None = None,
               noise_fraction: float = 0.0) -> bool:
        """Feed one period: the rate measured (pps), ``log10`` of the cap in force during it (percent of
        one CPU), the rate offered (pps; None: unknown, the period counts as not limited) and the relative
        standard deviation of one period's rate sample (the controller's estimate).  True if the period
        completed a sample."""
        frac = rate_pps / offered_pps if offered_pps is not None and offered_pps > 0 else 0.0
        h = self._hist = self._hist[1 - _HIST:] + ((rate_pps, log_cap, frac),)
        lag_before = self.lag
        self._verify(h, noise_fraction)
        sample = self._sample(h, noise_fraction)
        if sample is not None:
            g, x = sample
            self.lag, self._pole = g, pole_of_lag(g)
            self.samples += 1
        else:
            if self.lag != lag_before:  # a sample undone: the state for the model's lag, from this period's rate
                self.next_state_pps = None
            x = rate_pps if self.next_state_pps is None else self.next_state_pps
        self.settled_pps, self.next_state_pps = observed(rate_pps, x, self.lag, self._pole, _pick)
        return sample is not None

    def probe_candidate(self, noise_fraction: float = 0.0) -> float:
        """The newest period's move if it is the first after a large move from rest whose rate moved the
        same way beyond the noise, with no sample yet and no probe taken: one more period at a cap the
        controller chooses for it (:meth:`arm_probe`) then gives a sample with one root.  0.0 otherwise.

        Sets :attr:`probe_rest_pps` (the rate before the move).  Decades.
        """
        h = self._hist
        if self.samples or self.probed or self._pending is not None or len(h) < 2:
            return 0.0
        found = self._move_from_rest(h[-3:] if len(h) >= 3 else (h[0],) + h)
        m0, m1 = h[-2][0], h[-1][0]
        if found is None or abs(found[1]) < PROBE_NOISE_SIGMAS * 1.4142135623730951 * noise_fraction * max(m0, m1):
            return 0.0
        self.probe_rest_pps = m0
        return found[0]

    def arm_probe(self) -> None:
        """The controller took the probe: the next period completes the sample (whatever the move then)."""
        self.probed = True
        self._probe_armed = True

    @staticmethod
    def _move_from_rest(h: tuple[tuple[float, float, float], ...]) -> tuple[float, float] | None:
        """(move, decades; first period's change of rate, pps) of a move from rest that can show the lag
        (its guards: docs/design/control-law.md, "The lag estimator"): ``h`` starts with the period
        before, the one at rest and the move's first.  None otherwise."""
        (m_b, u_b, _), (m0, u0, _), (m1, u1, fr1) = h[:3]
        move, d1 = u1 - u0, m1 - m0
        at_rest = abs(u0 - u_b) <= REST_FRACTION * abs(move) or abs(m0 - m_b) <= PROBE_REST_FRACTION * m0
        if abs(move) < MIN_MOVE_DECADES or not at_rest or fr1 >= UNCONSTRAINED_FRACTION or m0 <= 0 or d1 * move <= 0:
            return None
        return move, d1

    def _sample(self, h: tuple[tuple[float, float, float], ...], noise_fraction: float) -> tuple[float, float] | None:
        """A lag sample completed by the newest period: (lag, x(g) at this period's start) or None."""
        pend, self._pending = self._pending, None
        if pend is not None:
            # Two lags explained the move's first two periods: the third decides.
            roots, m0, d1, moves = pend
            third = self._third(h, roots, m0, d1, moves, noise_fraction)
            return None if third is None or third[2] else third[:2]
        if len(h) < 3:
            return None
        # Three periods since activation: the cap was at rest before the first (it was the VR's own).
        periods = h[-4:] if len(h) >= 4 else (h[0],) + h
        (m0, _, _), (_, u1, _), (m2, u2, fr2) = periods[1:]
        # A probe's follow-up was chosen for the sample, and its first period was judged when it was taken.
        probe, self._probe_armed = self._probe_armed and not self.samples, False
        if not probe:
            return None
        found = self._move_from_rest(periods)
        if found is None or fr2 >= UNCONSTRAINED_FRACTION:
            return None
        d1 = found[1]
        moves = (u2 - u1,)
        roots = self._roots(m0, d1, m2, moves[0], max(FIT_FRACTION, NOISE_SIGMAS * noise_fraction) * m2)
        if len(roots) == 1:
            self._check = (roots[0], m0, d1, moves, self.lag, self.samples)
            return roots[0], self._predict(roots[0], m0, d1, moves)[1]
        if roots:
            self._pending = (tuple(roots), m0, d1, moves)
        return None

    def _verify(self, h: tuple[tuple[float, float, float], ...], noise_fraction: float) -> None:
        """The period after a sample taken from two periods: does the lag predict it?  Else undone."""
        chk, self._check = self._check, None
        if chk is None:
            return
        g, m0, d1, moves, lag, samples = chk
        third = self._third(h, (g,), m0, d1, moves, noise_fraction)
        if third is not None and third[2]:
            self.lag, self._pole, self.samples = lag, pole_of_lag(lag), samples

    def _third(self, h: tuple[tuple[float, float, float], ...], lags: tuple[float, ...], m0: float, d1: float,
               moves: tuple[float, ...], noise_fraction: float) -> tuple[float, float, bool] | None:
        """The newest period, a move's third: of ``lags`` the one that predicts its rate best, the state at
        its start (pps) and whether it misses the rate; None where it is offered-limited."""
        m3, u3, fr3 = h[-1]
        if fr3 >= UNCONSTRAINED_FRACTION:
            return None
        moves = moves + (u3 - h[-2][1],)
        best = min(lags, key=lambda g: abs(self._predict(g, m0, d1, moves)[0] - m3))
        pred, x = self._predict(best, m0, d1, moves)
        return best, x, abs(pred - m3) > max(VERIFY_FRACTION, NOISE_SIGMAS * noise_fraction) * m3

    @staticmethod
    def _predict(g: float, m0: float, d1: float, moves: tuple[float, ...]) -> tuple[float, float]:
        """For lag ``g``: the rate predicted for the newest period and the state at its start.

        ``m0`` the rate at rest before the move, ``d1`` its first period's change (pps), ``moves``
        the cap's moves since (decades), each taken as proportional (elasticity 1).
        """
        p = pole_of_lag(g)
        f = m0 + d1 / (1.0 - g)
        x = m0
        for mv in moves:
            x = p * x + (1.0 - p) * f
            f *= 10.0 ** mv
        return (1.0 - g) * f + g * x, x

    def _roots(self, m0: float, d1: float, m2: float, move2: float, tol_pps: float) -> list[float]:
        """The lags that explain the sample (docs/design/control-law.md, "The lag estimator"), one per group.

        The sample's residual ``h(g)`` (pps) on a grid of lags: its zeros, and its extrema within
        ``tol_pps`` of zero (the residual often only touches zero at the true lag); candidates
        within 0.06 of each other are one group (their mean).
        """
        groups: list[list[float]] = []
        for c in sorted(self._candidates(m0, d1, m2, move2, tol_pps)):
            if groups and c - groups[-1][-1] <= 0.06:
                groups[-1].append(c)
            else:
                groups.append([c])
        return [sum(gr) / len(gr) for gr in groups]

    @staticmethod
    def _candidates(m0: float, d1: float, m2: float, move2: float, tol_pps: float) -> list[float]:
        """:meth:`_roots`' candidates, each lag once: the residual on the whole grid at once (numpy)."""
        rho = 10.0 ** move2
        with np.errstate(all="ignore"):  # (Python's float arithmetic, element by element: the same numbers)
            f1 = m0 + d1 / _GRID_ONE_MINUS_LAG
            stop = np.flatnonzero(f1 <= 0.0)  # the grid ends before the first f1 <= 0
            n = int(stop[0]) if len(stop) else len(f1)
            h = (f1 * (_GRID_ONE_MINUS_LAG * rho + _GRID_LAG_OPEN) + _GRID_LAG_POLE * m0 - m2)[:n]
            pos = h >= 0.0
            zeros = (np.flatnonzero(pos[1:] != pos[:-1]) + 1).tolist()  # a sign change between i - 1 and i
            near = (np.flatnonzero(np.abs(h[1:-1]) <= tol_pps) + 1).tolist()  # |h| within tol_pps, at 1..n-2
        g, hs = _GRID_LAG_LIST, h.tolist() if zeros or near else ()
        cands = [g[i - 1] + (g[i] - g[i - 1]) * hs[i - 1] / (hs[i - 1] - hs[i]) for i in zeros]
        # An extremum of |h| within tol_pps of zero with no sign change around it.
        cands += [g[i] for i in near if (hs[i] >= 0.0) == (hs[i - 1] >= 0.0) == (hs[i + 1] >= 0.0)
                  and abs(hs[i]) <= abs(hs[i - 1]) and abs(hs[i]) <= abs(hs[i + 1])]
        return cands

    def to_state(self) -> dict[str, Any]:
        """JSON-serialisable state."""
        return {"hist": [list(x) for x in self._hist], "lag": self.lag, "weight": float(self.samples), "samples": self.samples,
                "x_next_pps": self.next_state_pps, "probed": self.probed, "probe_armed": self._probe_armed,
                "probe_rest_pps": self.probe_rest_pps}

    def restore_state(self, s: Mapping[str, Any]) -> None:
        """Restore :meth:`to_state`'s output (a malformed one resets the estimator)."""
        try:
            hist = tuple((float(m), float(u), float(fr)) for m, u, fr in s["hist"])
            lag, weight, samples = float(s["lag"]), float(s["weight"]), int(s["samples"])
            if len(hist) > _HIST or not (0.0 <= lag <= LAG_MAX or lag == self.fallback_lag) \
                    or not all(math.isfinite(v) for x in hist for v in x) or not (weight >= 0.0 and math.isfinite(weight)):
                raise ValueError
            x = None if s.get("x_next_pps") is None else float(s["x_next_pps"])
            rest = float(s.get("probe_rest_pps", 0.0))
            if not (x is None or math.isfinite(x)) or not (math.isfinite(rest) and rest >= 0.0):
                raise ValueError
            self._hist, self.lag, self.samples = hist, lag, samples
            self._pole, self.next_state_pps = pole_of_lag(lag), x
            self.probed, self._probe_armed = s.get("probed") is True, s.get("probe_armed") is True
            self.probe_rest_pps = rest
        except (KeyError, TypeError, ValueError, OverflowError):  # (int() of an infinite count overflows)
            self.reset()


# ---------------------------------------------------------------------------------- rows
#: The estimator's state in columns (:class:`LagRows`): (attribute, column, kind), as
#: :func:`~xtc.control.columns.column_property` takes them.  The history has two columns of its own.
_LAG_COLUMNS: tuple[tuple[str, str, Any], ...] = (
    ("fallback_lag", "fallback", float), ("lag", "lag", float), ("_pole", "pole", float),
    ("next_state_pps", "x_next", None), ("settled_pps", "settled", float), ("samples", "samples", int),
    ("probed", "probed", bool), ("_probe_armed", "armed", bool), ("probe_rest_pps", "rest", float),
    ("_pending", "pending", object), ("_check", "check", object))
_LAG_NAMES = (*(name for name, _, _ in _LAG_COLUMNS), "_hist")


class LagRows:
    """The state of a list of lag estimators as columns, one row each (:data:`_LAG_COLUMNS`; ``hist``:
    each row's history right-aligned, newest last, of which the last ``hist_len`` periods are kept).

    :meth:`attach` makes each estimator a :class:`_LagRow`, whose state attributes are properties on
    its row; the controllers' bank attaches an XTC controller's estimator to the row of its controller.
    :meth:`quiet` and :meth:`update_quiet` are the estimator's update on whole columns, for the periods
    where nothing but its history and observer can move; elsewhere the bank calls the estimator's
    :meth:`~LagEstimator.update`.
    """

    __slots__ = ("n", "hist", "hist_len", "has_x_next", *(col for _, col, _ in _LAG_COLUMNS))

    @classmethod
    def attach(cls, estimators: Sequence[LagEstimator]) -> LagRows:
        """Columns holding the state of ``estimators`` (each once), which are attached to them."""
        n = len(estimators)
        if len(set(map(id, estimators))) != n:
            raise ValueError("a lag estimator appears twice in the list to attach")
        rows = cls.__new__(cls)
        rows.n = n
        new_columns(rows, _LAG_COLUMNS, estimators)
        rows.hist, rows.hist_len = np.zeros((n, _HIST, 3)), np.zeros(n, dtype=np.intp)
        for k, est in enumerate(estimators):
            rows.put_hist(k, est._hist)
        attach(estimators, rows, _LagRow)
        return rows

    def get_hist(self, k: int) -> tuple[tuple[float, float, float], ...]:
        """Row ``k``'s history, oldest first (:attr:`LagEstimator._hist`)."""
        n = int(self.hist_len[k])
        return tuple(map(tuple, self.hist[k, _HIST - n:].tolist())) if n else ()

    def put_hist(self, k: int, h: tuple[tuple[float, float, float], ...]) -> None:
        """Row ``k``'s history set to ``h`` (at most :data:`_HIST` periods, oldest first)."""
        if h:
            self.hist[k, _HIST - len(h):] = h
        self.hist_len[k] = len(h)

    def plain(self, idx: np.ndarray) -> list[LagEstimator]:
        """Plain estimators holding the state of the rows ``idx`` (an index array), read in one pass:
        for a loop of whole updates, cheaper than through the attached estimators' properties
        (:meth:`put` writes them back)."""
        values = []
        for _, col, kind in _LAG_COLUMNS:
            got = getattr(self, col)[idx].tolist()
            if kind is None:
                got = [v if h else None for v, h in zip(got, getattr(self, "has_" + col)[idx].tolist())]
            values.append(got)
        hists, lens = self.hist[idx].tolist(), self.hist_len[idx].tolist()
        values.append([tuple(map(tuple, h[_HIST - n:])) if n else () for h, n in zip(hists, lens)])
        out = []
        for one in zip(*values):
            est = LagEstimator.__new__(LagEstimator)
            est.__dict__.update(zip(_LAG_NAMES, one))
            out.append(est)
        return out

    def put(self, idx: np.ndarray, estimators: Sequence[LagEstimator]) -> None:
        """The state of plain ``estimators`` written to the rows ``idx`` (from :meth:`plain`)."""
        put_columns(self, _LAG_COLUMNS, idx, estimators)
        for k, est in zip(idx.tolist(), estimators):
            self.put_hist(k, est._hist)

    def quiet(self, at: Any, log_cap: np.ndarray, exact: np.ndarray) -> np.ndarray:
        """Where a period at ``log_cap`` (``log10`` of the cap in force during it) can neither complete
        nor verify a sample and leaves :meth:`~LagEstimator.probe_candidate` at 0.0, of the rows ``at``
        (``exact``: the cap in force was the one wanted; only then is a probe candidate asked for).
        Where it holds, :meth:`update_quiet` does what :meth:`LagEstimator.update` does."""
        with np.errstate(invalid="ignore"):
            near = np.abs(log_cap - self.hist[at, _HIST - 1, 1]) < MIN_MOVE_DECADES
        idle = (self.samples[at] != 0) | self.probed[at] | ~exact | (self.hist_len[at] == 0) | near
        return idle & np.equal(self.check[at], None) & np.equal(self.pending[at], None) & ~self.armed[at]

    def update_quiet(self, idx: np.ndarray, rate_pps: np.ndarray, log_cap: np.ndarray, offered_pps: np.ndarray) -> None:
        """:meth:`LagEstimator.update` of the rows ``idx`` (an index array) where :meth:`quiet` holds: the
        history and the observer (:func:`observed`, the estimator's own) move.  ``offered_pps`` NaN where
        unknown; the same numbers, element by element, as each estimator's own update."""
        with np.errstate(all="ignore"):  # (inf where Python gives inf: the same numbers, no warning)
            frac = np.where(offered_pps > 0, rate_pps / offered_pps, 0.0)
            h = self.hist[idx]
            h[:, :-1] = h[:, 1:]
            h[:, -1, 0], h[:, -1, 1], h[:, -1, 2] = rate_pps, log_cap, frac
            self.hist[idx] = h
            self.hist_len[idx] = np.minimum(self.hist_len[idx] + 1, _HIST)
            x = np.where(self.has_x_next[idx], self.x_next[idx], rate_pps)
            self.settled[idx], self.x_next[idx] = observed(rate_pps, x, self.lag[idx], self.pole[idx], np.where)
            self.has_x_next[idx] = True


class _LagRow(Attached, LagEstimator):
    """A :class:`LagEstimator` whose state is a row of a :class:`LagRows`; a copy is a plain one."""

    _plain, _spec, _state = LagEstimator, _LAG_COLUMNS, _LAG_NAMES
    _hist = property(lambda self: self._rows.get_hist(self._row), lambda self, h: self._rows.put_hist(self._row, h))
