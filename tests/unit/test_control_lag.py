"""The lag estimate (xtc.control.estimate.LagEstimator) outside the probe (tests/unit/test_control_lag_probe.py)."""

import copy
import math
import random

import numpy as np
import pytest

import xtc.models
from xtc.control import make_controller
from xtc.control.estimate import LagEstimator, pole_of_lag
from xtc.control.laws import XtcTuning
from xtc_lab.bench import control_bench as cb
from xtc_lab.sim.metrics import settling_periods
from xtc_lab.sim.plant import averaged_pole
from xtc_lab.sim.run import run_loop

PAPER = xtc.models.PAPER_MODEL
A = PAPER.model.a


@pytest.mark.parametrize("tau_s", [0.05, 0.0915, 0.37, 0.5, 1.0])
def test_pole_of_lag_inverts_the_period_mean(tau_s):
    g = averaged_pole(tau_s)
    assert pole_of_lag(g) == pytest.approx(math.exp(-1.0 / tau_s), abs=1e-6)


def _periods(caps, tau_s, kpps_per_percent=3.27, offered=100e3, noise=0.0, seed=0, sub=100):
    """Period means of a first-order VR (rate proportional to the cap, capped by the offered rate)."""
    rng = random.Random(seed)
    x = min(offered, kpps_per_percent * 1e3 * caps[0])
    out = []
    for cap in caps:
        target = min(offered, kpps_per_percent * 1e3 * cap)
        acc = 0.0
        for _ in range(sub):
            x += (target - x) * (1.0 - math.exp(-1.0 / sub / tau_s))
            acc += x
        out.append(acc / sub * (1.0 + noise * rng.gauss(0.0, 1.0)))
    return out


def _feed(est, caps, rates, offered=100e3, noise=0.0):
    for cap, m in zip(caps, rates):
        est.update(m, math.log10(cap), offered, noise)


@pytest.mark.parametrize("tau_s", [0.37, 0.5])
@pytest.mark.parametrize("caps", [[100.0, 10.0, 1.7, 3.0, 3.0], [100.0, 10.0, 3.4, 3.1, 5.0], [15.0, 1.5, 1.0, 1.0]])
def test_no_sample_without_the_probe(tau_s, caps):
    """Samples come from the probe alone: a move from rest the controller did not arm says nothing
    (the samples from any move were removed with ``lag_estimate``: docs/design/control-law.md)."""
    est = LagEstimator(A)
    _feed(est, caps, _periods(caps, tau_s))
    assert not est.confident and est.lag == A


def test_state_round_trip():
    est = LagEstimator(A)
    caps = [100.0, 10.0, 1.7]
    _feed(est, caps, _periods(caps, 0.5))
    twin = LagEstimator(A)
    twin.restore_state(est.to_state())
    for cap, m in zip([3.0, 3.0], [10e3, 9.9e3]):
        assert est.update(m, math.log10(cap), 100e3) == twin.update(m, math.log10(cap), 100e3)
        assert (est.lag, est.settled_pps) == (twin.lag, twin.settled_pps)
    twin.restore_state({"hist": "junk"})
    assert twin.lag == A and not twin.confident
    for bad in (math.inf, -math.inf, math.nan):  # a state file's JSON may hold Infinity or NaN for the count
        twin.restore_state({**est.to_state(), "samples": 2})
        assert twin.confident
        twin.restore_state({**est.to_state(), "samples": bad})
        assert twin.lag == A and not twin.confident


def test_a_state_written_with_the_removed_gain_estimator_still_loads():
    """State files written before 2026-11-26 have an ``estimator`` key (the removed GainEstimator):
    it is ignored, and the controller continues as from the same state without it.  (Not as ``c``
    itself: a round trip in the middle of the probe's transient is not exact, on main as well.)"""
    c = make_controller(PAPER)
    c.start(100.0)
    for y, cap in zip([99.9e3, 61.7e3, 21.2e3], [100.0, 10.0, 1.7]):
        c.applied(cap)
        c.step(y, 10e3, 100e3)
    state = c.to_state()
    assert "estimator" not in state
    old = {**state, "estimator": {"theta": [0.09, 0.9], "P": [[1.0, 0.0], [0.0, 10.0]], "prev": None,
                                  "dY_prev": 0.0, "updates": 0, "age": 10**9}}
    d, e = make_controller(PAPER), make_controller(PAPER)
    d.restore_state(old)
    e.restore_state(state)
    assert d.to_state() == e.to_state() == state
    assert d.step(10.2e3, 10e3, 100e3) == e.step(10.2e3, 10e3, 100e3)


def _estimators(n, seed):
    """``n`` estimators in states a period of the probe can leave: histories of 0-4 periods after moves
    of the cap from rest, some probes armed, samples taken, pending or checked (plain objects); and
    for some, the next period (rate, cap) that completes their probe's sample (else None)."""
    rng = random.Random(seed)
    out, nexts = [], []
    for k in range(n):
        est = LagEstimator(A)
        if k % 5 == 2:  # a probe armed after a move from rest: the next period completes its sample
            caps = [rng.choice([10.0, 30.0])] * 2 + [rng.choice([3.0, 100.0])] * 2
            rates = _periods(caps, rng.choice([0.2, 0.5]))
            for cap, m in zip(caps[:3], rates[:3]):
                est.update(m, math.log10(cap), 1e6)
            est.arm_probe()
            out.append(est)
            nexts.append((rates[3], caps[3]))
            continue
        cap = rng.choice([100.0, 30.0, 10.0])
        rate = 3.27e3 * cap
        for _ in range(rng.randrange(0, 7)):
            if rng.random() < 0.3:
                est.arm_probe()
            cap = cap * rng.choice([1.0, 1.0, 1.05, 0.3, 3.0])
            rate = rate * (1.0 + 0.8 * (rng.random() - 0.5)) if rng.random() < 0.9 else rate
            est.update(rate, math.log10(cap), rng.choice([None, 0.0, 1.2 * rate, rate, 50e3]), rng.choice([0.0, 0.02]))
        if k % 7 == 3:
            est.restore_state({**est.to_state(), "samples": -1})  # a count no activation makes: truthy as ever
        if k % 11 == 5 and est._hist:  # two lags explained a probe's first two periods: the third decides
            est._pending = ((0.2, 0.5), est._hist[-1][0], -0.3 * est._hist[-1][0], (-0.5,))
        if k % 13 == 6:  # a state file's estimator with a history and no observer state yet
            est.restore_state({**est.to_state(), "x_next_pps": None})
        out.append(est)
        nexts.append(None)
    return out, nexts


def _record(est):
    return est.to_state(), est.settled_pps, est.next_state_pps, est._check, est._pending, est.lag


@pytest.mark.parametrize("seed", range(6))
def test_the_columns_quiet_update_is_each_estimators_update_where_quiet(seed):
    """:class:`LagRows`' update on whole columns, where :meth:`LagRows.quiet` holds, leaves every
    estimator as its own :meth:`LagEstimator.update` does (the same numbers, bit for bit), with no
    sample and no probe candidate; and an attached estimator's own update is a plain one's."""
    from xtc.control.estimate import LagRows

    plain, nexts = _estimators(300, seed)
    attached = [copy.deepcopy(e) for e in plain]
    rows = LagRows.attach(attached)
    assert all(_record(a) == _record(p) for a, p in zip(attached, plain))
    rng = np.random.default_rng(seed)
    n = len(plain)
    log_cap = np.array([e._hist[-1][1] if e._hist else 1.0 for e in plain]) + rng.choice([0.0, 0.01, -0.3, 0.5], n)
    rate = rng.uniform(1e3, 2e5, n)
    offered = rng.choice([np.nan, 0.0, 1e5, 3e5], n)
    exact = rng.random(n) < 0.7
    for k, nxt in enumerate(nexts):
        if nxt is not None:
            rate[k], log_cap[k], offered[k], exact[k] = nxt[0], math.log10(nxt[1]), 1e6, True
    quiet = rows.quiet(slice(None), log_cap, exact)
    assert 0 < quiet.sum() < n  # both kinds of rows in the test
    idx = np.flatnonzero(quiet)
    rows.update_quiet(idx, rate[idx], log_cap[idx], offered[idx])
    busy = np.flatnonzero(~quiet)[::2]  # the bank's way for the busy rows: plain copies, written back
    copies = dict(zip(busy.tolist(), rows.plain(busy)))
    for k in range(n):
        off = None if math.isnan(offered[k]) else float(offered[k])
        if quiet[k]:
            assert plain[k].update(float(rate[k]), float(log_cap[k]), off, 0.02) is False
            assert not exact[k] or plain[k].probe_candidate(0.02) == 0.0
        else:  # a plain copy's update, or the attached estimator's own (through its row)
            assert copies.get(k, attached[k]).update(float(rate[k]), float(log_cap[k]), off, 0.02) == \
                plain[k].update(float(rate[k]), float(log_cap[k]), off, 0.02)
    assert all(type(c) is LagEstimator for c in copies.values())
    rows.put(busy, list(copies.values()))
    assert any(c._check is not None for c in copies.values())  # samples taken and to be checked among them
    for k in range(n):
        assert _record(attached[k]) == _record(plain[k]), k


def test_attached_estimators_copy_as_plain_ones_and_attach_once():
    from xtc.control.estimate import LagRows

    ests = _estimators(5, 1)[0]
    before = [_record(e) for e in ests]
    LagRows.attach(ests)
    copies = [copy.copy(e) for e in ests] + [copy.deepcopy(e) for e in ests]
    assert all(type(c) is LagEstimator for c in copies)
    assert [_record(c) for c in copies] == before * 2
    ests[0].reset()  # the copies are their own
    assert _record(copies[0]) == before[0] and _record(ests[0]) == _record(LagEstimator(A))
    moved = LagRows.attach(ests[:2])  # attached again elsewhere: the state goes along
    assert _record(ests[1]) == before[1] and ests[1]._rows is moved
    with pytest.raises(ValueError, match="appears twice"):
        LagRows.attach([ests[2], ests[2]])


def _candidates_by_the_loop(m0, d1, m2, move2, tol_pps):
    """The sample's candidate lags as the estimator found them one grid lag at a time (their definition: the
    residual's sign changes, and its extrema within ``tol_pps`` of zero)."""
    from xtc.control.estimate import LAG_MAX

    rho = 10.0 ** move2
    pts = []
    for g, p in ((i / 200.0, pole_of_lag(i / 200.0)) for i in range(191)):  # the estimator's grid of lags
        f1 = m0 + d1 / (1.0 - g)
        if g > LAG_MAX or f1 <= 0.0:
            break
        pts.append((g, f1 * ((1.0 - g) * rho + g * (1.0 - p)) + g * p * m0 - m2))
    cands = []
    for i in range(1, len(pts)):
        (g0, h0), (g1, h1) = pts[i - 1], pts[i]
        if (h1 >= 0.0) != (h0 >= 0.0):
            cands.append(g0 + (g1 - g0) * h0 / (h0 - h1))
        elif i + 1 < len(pts) and abs(h1) <= tol_pps and abs(h1) <= abs(h0) and abs(h1) <= abs(pts[i + 1][1]) \
                and (pts[i + 1][1] >= 0.0) == (h1 >= 0.0):
            cands.append(g1)
    return cands


def test_the_samples_roots_on_the_whole_grid_at_once_are_the_loops_bit_for_bit():
    """``_roots`` takes the residual on every grid lag at once (numpy): the same candidate lags as the loop over
    the grid, bit for bit, on samples near a lag's and far from any, with NaN, infinite and non-positive inputs."""
    rng = random.Random(7)
    est = LagEstimator(A)
    found = 0
    for _ in range(5000):
        m0 = rng.choice([rng.uniform(1e3, 2e5)] * 6 + [0.0, -5.0, math.nan, 1e308])
        d1 = rng.uniform(-1.5, 1.5) * m0 if rng.random() < 0.9 else rng.choice([math.nan, math.inf, -math.inf, 0.0])
        move2 = rng.uniform(-1.2, 1.2)
        g = rng.uniform(0.0, 0.8)
        p = pole_of_lag(round(g * 200) / 200)
        f1 = m0 + d1 / (1.0 - g) if m0 == m0 else 0.0
        m2 = (f1 * ((1.0 - g) * 10.0 ** move2 + g * (1.0 - p)) + g * p * m0 + rng.gauss(0.0, 0.02) * abs(f1)
              if rng.random() < 0.8 else rng.uniform(-1e5, 3e5))
        tol = rng.choice([0.0, 0.03 * abs(m2), 1e9, math.nan])
        want, got = _candidates_by_the_loop(m0, d1, m2, move2, tol), est._candidates(m0, d1, m2, move2, tol)
        assert np.array_equal(np.sort(got), np.sort(want), equal_nan=True), (m0, d1, m2, move2, tol)
        found += bool(want)
    assert found > 500  # roots found in a good share of them
