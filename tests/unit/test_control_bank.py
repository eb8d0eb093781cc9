"""ControllerBank: the same caps and states as the scalar controllers, bit for bit."""

import copy
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xtc.models
from xtc.control import make_controller
from xtc.control.bank import ControllerBank
from xtc.control.laws import XtcTuning

PAPER = xtc.models.PAPER_MODEL


def _twins(kind, n, rng, **kw):
    if kind == "xtc-noprobe":  # the law without the lag probe (the default before 2026-11-25)
        kind, kw = "xtc", {**kw, "lag_probe": False}
    ref = []
    for _ in range(n):
        c = make_controller(PAPER, kind, **kw)
        c.start(rng.choice([100.0, 1.0, rng.uniform(1.0, 100.0), float(rng.randint(1, 100))]))
        ref.append(c)
    return ref, [copy.deepcopy(c) for c in ref]


def _same(a, b):
    """Equal JSON states, NaN equal to NaN, floats compared bit for bit (as repr)."""
    return json_repr(a.to_state()) == json_repr(b.to_state())


def json_repr(x):
    if isinstance(x, dict):
        return {k: json_repr(v) for k, v in x.items()}
    if isinstance(x, float):
        return repr(x)
    return x


def _rate(rng, r):
    u = rng.random()
    if u < 0.05:
        return 0.0
    if u < 0.10:
        return r  # at the setpoint: inside the dead zone
    if u < 0.15:
        return rng.uniform(0.0, 2.0)  # below 1 pps (log of max(y, 1))
    return r * math.exp(rng.gauss(0.0, rng.choice([0.01, 0.05, 0.3, 1.0])))


def _quantise(cap, mode):
    if mode == "exact":
        return cap
    if mode == "xen":
        return float(max(1, round(cap)))
    if mode == "quota":
        return round(cap * 1000.0) / 1000.0
    return 100.0  # somebody else set it: far from the command (anti-windup restart)


def _cpu(rng, ctl):
    """A CPU reading (percent of one CPU) for ``ctl``: unknown, or around the cap in force (the
    binding threshold, 0.8 of it, on both sides), or odd (negative, infinite)."""
    u = rng.random()
    if u < 0.2:
        return None
    if u < 0.25:
        return rng.choice([-1.0, math.inf, 0.0])
    return 10.0 ** ctl._u_force * rng.choice([rng.uniform(0.5, 1.1), 0.8, 0.85, 0.75])


def _run(kind, seed, n=40, periods=60, every=False, on_rows=False, cpu=False, **kw):
    """Scalar controllers against banked twins.  ``on_rows``: the twins' state lives in the bank's
    columns (:meth:`ControllerBank.rows`), re-attached to new rows now and then; the scalar calls
    on them (``start``, ``to_state``) go through their rows, and deep copies are compared too.
    ``cpu``: each step also gets the VR's CPU use (:func:`_cpu`; NaN in the bank where None)."""
    rng = random.Random(seed)
    ref, banked = _twins(kind, n, rng, **kw)
    bank = ControllerBank.like(ref[0])
    assert bank is not None and all(bank.accepts(c) for c in banked)
    rows = bank.rows(banked) if on_rows else None
    setpoints = [rng.choice([rng.uniform(1e3, 1e5), 5e3, 1.0, 0.5]) for _ in range(n)]
    modes = [rng.choice(["exact", "xen", "quota", "exact", "xen", "other"]) for _ in range(n)]
    for p in range(periods):
        for i in range(n):
            u = rng.random()
            if u < 0.03:
                setpoints[i] = rng.uniform(1e3, 1e5)  # setpoint change
            elif u < 0.05:  # pause / resume: bumpless restart
                cap = ref[i].cap_percent
                ref[i].start(cap)
                banked[i].start(cap)
        # a subset steps (the others are paused, unmeasured or reset this period)
        idx = [i for i in range(n) if every or rng.random() < 0.9]
        y = [_rate(rng, setpoints[i]) for i in idx]
        off = [rng.choice([None, 0.0, y[k] * rng.uniform(0.9, 1.5), y[k]]) for k in range(len(idx))]
        c = [_cpu(rng, ref[i]) for i in idx] if cpu else [None] * len(idx)
        want = [ref[i].step(y[k], setpoints[i], off[k], c[k]) for k, i in enumerate(idx)]
        if on_rows and rng.random() < 0.1:
            rows = bank.rows(banked)  # attached again: the state moves along
            assert all(bank.accepts(c) for c in banked)
        at = {} if rows is None or on_rows == "found" else \
            {"rows": rows, "at": slice(None) if every else np.array(idx, dtype=np.intp)}
        got, ok = bank.step([banked[i] for i in idx], np.array(y), np.array([setpoints[i] for i in idx]),
                            np.array([math.nan if o is None else o for o in off]), **at,
                            cpu_percent=np.array([math.nan if v is None else v for v in c]) if cpu else None)
        assert ok.all()
        assert [repr(v) for v in got.tolist()] == [repr(v) for v in want], (kind, seed, p)
        # the actuator's answer goes back to the controllers that wrote (and to some that did not)
        wrote = [i for i in range(n) if every or rng.random() < 0.7]
        in_force = [_quantise(ref[i].cap_percent, modes[i]) for i in wrote]
        for i, g in zip(wrote, in_force):
            ref[i].applied(g)
        at = {} if rows is None or on_rows == "found" else \
            {"rows": rows, "at": slice(None) if every else np.array(wrote, dtype=np.intp)}
        caps, done = bank.applied([banked[i] for i in wrote], np.array(in_force), **at)
        assert done.all()
        assert [repr(v) for v in caps.tolist()] == [repr(ref[i].cap_percent) for i in wrote]
        for i in range(n):
            assert _same(ref[i], banked[i]), (kind, seed, p, i, ref[i].to_state(), banked[i].to_state())
            assert repr(ref[i].cap_percent) == repr(banked[i].cap_percent)
        if on_rows:
            for i in rng.sample(range(n), 3):
                twin = copy.deepcopy(banked[i])  # a plain controller, the same state
                assert type(twin) is type(ref[i]) and _same(twin, ref[i])
                twin.step(1e4, 2e4, None)  # and its own: the attached one does not move
                assert _same(ref[i], banked[i])


@pytest.mark.parametrize("kind", ["xtc", "xtc-noprobe", "pi", "deadbeat"])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=25, deadline=None)
def test_bank_equals_scalar_controllers(kind, seed):
    _run(kind, seed)


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15, deadline=None)
def test_bank_equals_scalar_with_cap_bounds_and_period(seed):
    _run("xtc", seed, cap_min_percent=3.0, cap_max_percent=60.0, period_s=0.1)


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15, deadline=None)
def test_bank_equals_scalar_with_the_persistence_rule(seed):
    # off by default; the bank must follow the scalar law where a deployment switches it on
    _run("xtc", seed, tuning=XtcTuning(design_lag=PAPER.model.a, persist_band_fraction=0.05))


@pytest.mark.parametrize("kind", ["xtc", "xtc-noprobe", "pi"])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15, deadline=None)
def test_bank_equals_scalar_when_every_controller_steps_every_period(kind, seed):
    # the same list each call: the bank's reused logarithms and powers (inputs repeating from
    # the previous call at the same position) are taken, and must give the scalar numbers
    _run(kind, seed, every=True)


@pytest.mark.parametrize("kind", ["xtc", "xtc-noprobe", "pi", "deadbeat"])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15, deadline=None)
def test_bank_on_its_rows_equals_scalar_controllers(kind, seed):
    _run(kind, seed, on_rows=True)
    _run(kind, seed, on_rows="found")  # the rows not given: found from the controllers


@pytest.mark.parametrize("kind", ["xtc", "pi"])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10, deadline=None)
def test_bank_on_all_its_rows_equals_scalar_controllers(kind, seed):
    _run(kind, seed, every=True, on_rows=True)


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10, deadline=None)
def test_bank_on_its_rows_equals_scalar_with_the_descent_from_the_top_cap(seed):
    _run("xtc", seed, on_rows=True, tuning=XtcTuning(design_lag=PAPER.model.a, descent_fraction=0.9,
                                                     saturation_repeat_factor=2.0))


def test_attached_controllers_restore_and_copy_through_their_rows():
    rng = random.Random(5)
    ref, banked = _twins("xtc", 6, rng)
    bank = ControllerBank.like(ref[0])
    rows = bank.rows(banked)
    assert bank.rows([banked[0], banked[0]]) is None  # one object twice: not attached
    for a, b in zip(ref, banked):
        a.step(5e4, 4e4, 6e4)
        b.step(5e4, 4e4, 6e4)  # the scalar step on an attached controller
        assert _same(a, b)
        st_ = a.to_state()
        b.restore_state(st_)
        a.restore_state(st_)
        assert _same(a, b)
        assert type(b.to_state()["u"]) is float and type(b.to_state()["steps"]) is int
    assert rows.steps.tolist() == [c.steps for c in ref]
    shallow = copy.copy(banked[1])
    shallow.start(10.0)  # a plain copy: the attached one keeps its state
    assert _same(ref[1], banked[1]) and not _same(shallow, banked[1])


def test_reused_elementwise_math_is_the_function():
    from xtc.control.bank import _Reuse, _log10_of, _pow10

    rng = np.random.default_rng(3)
    for f, gen in ((_log10_of, lambda n: rng.uniform(1e-3, 1e6, n)), (_pow10, lambda n: rng.uniform(-3, 3, n))):
        r = _Reuse(f)
        x = gen(50)
        for _ in range(30):
            x = x.copy()
            k = rng.integers(0, 4)
            if k == 1:
                x[rng.integers(0, len(x), 5)] = gen(5)
            elif k == 2:
                x = gen(int(rng.integers(1, 60)))  # another length
            elif k == 3:
                x[0] = np.nextafter(x[0], np.inf)  # one bit apart
            if f is _pow10:
                x[-1] = -0.0 if rng.random() < 0.5 else 0.0
            saved = x.copy()
            assert r(x).tobytes() == f(saved).tobytes()
            x[:] = 7.0  # the caller changes its array afterwards: nothing kept changes
            assert r(saved).tobytes() == f(saved).tobytes()
            x = saved


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15, deadline=None)
def test_bank_equals_scalar_with_the_repeated_saturation_step(seed):
    # off by default (docs/results/2026-11-26-control-settling/control-settling.md, the descent from the uncapped start); the bank follows it
    _run("xtc", seed, tuning=XtcTuning(design_lag=PAPER.model.a, saturation_repeat_factor=2.0))


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15, deadline=None)
def test_bank_equals_scalar_with_the_descent_from_the_top_cap(seed):
    # off by default (docs/results/2026-11-26-control-settling/control-settling.md, the descent from the uncapped start); the bank steps it
    _run("xtc", seed, tuning=XtcTuning(design_lag=PAPER.model.a, descent_fraction=0.9, saturation_repeat_factor=2.0))


def test_bank_refuses_what_the_scalar_step_refuses():
    ref, banked = _twins("xtc", 3, random.Random(1))
    bank = ControllerBank.like(ref[0])
    before = [c.to_state() for c in banked]
    caps, ok = bank.step(banked, np.array([1e4, math.nan, 1e4]), np.array([2e4, 2e4, -1.0]), None)
    assert ok.tolist() == [True, False, False]
    assert math.isnan(caps[1]) and math.isnan(caps[2])
    assert caps[0] == ref[0].step(1e4, 2e4)
    assert [c.to_state() for c in banked[1:]] == before[1:]
    caps, done = bank.applied(banked, np.array([10.0, 0.0, math.inf]))
    assert done.tolist() == [True, False, False]


def test_no_bank_for_fixed_cap():
    assert ControllerBank.like(make_controller(PAPER, "fixed")) is None
    assert ControllerBank.like(make_controller(PAPER, "xtc", lag_probe=True)) is not None
    assert ControllerBank.like(make_controller(PAPER, "xtc")) is not None  # the default: the probe
    assert ControllerBank.like(make_controller(PAPER, "xtc", lag_probe=False)) is not None


def _lag_plant_run(seed, periods=90, n=30, on_rows=False):
    """Controllers with the lag probe on plants with a lag (rate = gain x cap in force, reached with
    a first-order lag of pole 0.3-0.6 per period, 1% noise, whole-percent or exact caps), setpoints
    moved now and then, scalar against bank.  Returns the share of steps the bank took on arrays
    (the others finished by the scalar law) and how many controllers probed."""
    rng = random.Random(seed)
    ref, banked = [], []
    for _ in range(n):
        c = make_controller(PAPER, "xtc", lag_probe=True)
        c.start(100.0)
        ref.append(c)
        banked.append(copy.deepcopy(c))
    bank = ControllerBank.like(ref[0])
    rows = bank.rows(banked) if on_rows else None
    quiet_steps = []
    lag_probe_in = bank._lag_probe_in

    def counted(*a):
        caps, quiet = lag_probe_in(*a)
        quiet_steps.append(int(quiet.sum()))
        return caps, quiet

    bank._lag_probe_in = counted
    gain = [rng.uniform(300.0, 2000.0) for _ in range(n)]
    pole = [rng.uniform(0.3, 0.6) for _ in range(n)]
    xen = [rng.random() < 0.3 for _ in range(n)]
    sp = [rng.uniform(0.05, 0.9) * 100.0 * gain[i] for i in range(n)]
    x = [100.0 * gain[i] for i in range(n)]  # the plant's state: settled, uncapped
    force = [100.0] * n
    total = 0
    for p in range(periods):
        for i in range(n):
            if rng.random() < 0.04:
                sp[i] = rng.uniform(0.05, 0.9) * 100.0 * gain[i]
        y, off = [], []
        for i in range(n):
            target = gain[i] * force[i]
            x_new = pole[i] * x[i] + (1.0 - pole[i]) * target
            y.append(max(0.0, 0.5 * (x[i] + x_new) * (1.0 + rng.gauss(0.0, 0.01))))  # the period's mean
            x[i] = x_new
            off.append(100.0 * gain[i])
        want = [ref[i].step(y[i], sp[i], off[i]) for i in range(n)]
        at = {} if rows is None else {"rows": rows, "at": slice(None)}
        got, ok = bank.step(banked, np.array(y), np.array(sp), np.array(off), **at)
        assert ok.all()
        total += n
        assert [repr(v) for v in got.tolist()] == [repr(v) for v in want], (seed, p)
        for i in range(n):
            force[i] = float(max(1, round(ref[i].cap_percent))) if xen[i] else ref[i].cap_percent
            ref[i].applied(force[i])
        at = {} if rows is None else {"rows": rows, "at": slice(None)}
        bank.applied(banked, np.array(force), **at)
        for i in range(n):
            assert _same(ref[i], banked[i]), (seed, p, i)
    return sum(quiet_steps) / total, sum(c.lag_estimator.probed for c in ref)


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=8, deadline=None)
def test_bank_steps_the_lag_probes_steady_state_exactly(seed):
    share, probed = _lag_plant_run(seed, on_rows=seed % 2 == 0)
    # not vacuous: the probes were taken, and the bank took most steps (the steady state)
    assert probed >= 8 and share >= 0.7, (share, probed)


def test_accepts_only_the_same_parameters():
    bank = ControllerBank.like(make_controller(PAPER, "xtc"))
    assert bank.accepts(make_controller(PAPER, "xtc"))
    assert not bank.accepts(make_controller(PAPER, "xtc", cap_min_percent=3.0))
    assert not bank.accepts(make_controller(PAPER, "xtc", dead_zone_fraction=0.05))
    assert not bank.accepts(make_controller(PAPER, "pi"))
    pi = ControllerBank.like(make_controller(PAPER, "pi"))
    assert not pi.accepts(make_controller(PAPER, "deadbeat"))


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15, deadline=None)
def test_bank_equals_scalar_without_the_fine_band_descent(seed):
    # on by default (docs/results/2026-11-26-control-settling/control-settling.md, the fine band's descent); the bank follows it switched off too
    _run("xtc", seed, tuning=XtcTuning(design_lag=PAPER.model.a, fine_band_descent=False))


@pytest.mark.parametrize("on", [True, False])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15, deadline=None)
def test_bank_equals_scalar_near_the_offered_rate(on, seed):
    # Setpoints 85-99% of the offered rate, starts at cap 100, rates at 90-100% of the offered rate
    # (the fine band's descent from the top cap and on while >= 97% is forwarded): bit for bit.
    rng = random.Random(seed)
    n = 30
    tuning = XtcTuning(design_lag=PAPER.model.a, fine_band_descent=on)
    ref = []
    for _ in range(n):
        c = make_controller(PAPER, "xtc", tuning=tuning)
        c.start(rng.choice([100.0, 100.0, rng.uniform(20.0, 100.0)]))
        ref.append(c)
    banked = [copy.deepcopy(c) for c in ref]
    bank = ControllerBank.like(ref[0])
    off = 100_000.0
    setpoints = [off * rng.uniform(0.85, 0.99) for _ in range(n)]
    knee = [rng.uniform(15.0, 45.0) for _ in range(n)]  # the cap at which the VR forwards its setpoint, about
    fired = 0
    for p in range(30):
        y = [min(off, off * min(1.0, (ref[i].cap_percent / knee[i]) ** 0.2) * (1.0 + rng.gauss(0.0, 0.012))) for i in range(n)]
        was = [c._descent for c in ref]
        want = [ref[i].step(y[i], setpoints[i], off) for i in range(n)]
        fired += sum(1 for i in range(n) if ref[i]._descent and abs(setpoints[i] - y[i]) < 0.1 * setpoints[i] and not was[i])
        got, ok = bank.step(banked, np.array(y), np.array(setpoints), np.full(n, off))
        assert ok.all()
        assert [repr(v) for v in got.tolist()] == [repr(v) for v in want], (seed, p)
        for i in range(n):
            ref[i].applied(ref[i].cap_percent)
        bank.applied(banked, np.array([c.cap_percent for c in ref]))
        for i in range(n):
            assert _same(ref[i], banked[i]), (seed, p, i)
    if on:
        assert fired > 0  # the fine band's descent from the top cap was exercised


@pytest.mark.parametrize("on_rows", [False, True])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15, deadline=None)
def test_bank_equals_scalar_with_cpu_readings(on_rows, seed):
    """The binding cap's rule (``cap_bound_fraction``) in the bank, on objects and on rows; with the lag
    probe (the default), random rates bring its probe and observer now and then, whose steps the scalar
    law finishes inside the bank."""
    _run("xtc", seed, on_rows=on_rows, cpu=True)
