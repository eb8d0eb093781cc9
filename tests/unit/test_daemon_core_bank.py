"""The core with its controller bank and array decisions decides exactly what the per-instance code
decided (kept here as the reference), stepping each controller alone."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtc.control import bank as bank_mod
from xtc.control import make_controller
from xtc.daemon.api import ApiError, Request
from xtc.daemon.api import SAMPLE_FIELDS
from xtc.daemon.core import DaemonCore, RestoreCap, SetCap, VrReading
from xtc.daemon.instances import saturation_step
from xtc.daemon.meter import Readings
from xtc.models import PAPER_MODEL


class _NoBank:
    @staticmethod
    def like(_proto):
        return None


def _quantise(cap: float, mode: str) -> float:
    return {"exact": cap, "xen": float(max(1, round(cap))), "quota": round(cap * 1000.0) / 1000.0}[mode]


def _scalar_period(core: DaemonCore, now_s: float, readings) -> list:
    """DaemonCore.period as it was written before the bank: one instance at a time (the reference)."""
    for name, r in readings.items():
        view = core.vrs.get(name)
        if view is None:
            continue
        view.forwarded_pps = r.forwarded_pps
        view.offered_pps = r.offered_pps
    actions = []
    for name, inst in core.instances.items():
        view = core.vrs.get(name)
        if view is None or not view.present:
            continue
        r = readings.get(name)
        if r is not None and r.counter_reset:
            inst.applied_cap_percent = None
        stepped = inst.state == "active" and r is not None and r.forwarded_pps is not None
        if stepped:
            try:
                inst.cap_percent = inst.controller.step(r.forwarded_pps, inst.setpoint_pps, r.offered_pps)
                saturation_step(inst, r.forwarded_pps)
            except ValueError as e:
                inst.actuation_error = f"measurement refused by the controller: {e}"
        elif inst.state != "active":
            inst.saturated_periods = 0
        if (core.reassert_period_s > 0 and inst.last_write_s is not None
                and now_s - inst.last_write_s >= core.reassert_period_s):
            inst.applied_cap_percent = None
        def unchanged() -> bool:
            return inst.applied_cap_percent is not None and math.isclose(inst.applied_cap_percent, inst.cap_percent, rel_tol=1e-9)

        if stepped and unchanged() and inst.cap_in_force_percent is not None:
            # not written: the controller is still told the cap in force (then its command may move)
            try:
                inst.controller.applied(inst.cap_in_force_percent)
            except ValueError as e:
                inst.actuation_error = f"cap in force refused by the controller: {e}"
            inst.cap_percent = inst.controller.cap_percent
        if not unchanged():
            actions.append(SetCap(name, inst.cap_percent))
    for name, cap in core.pending_restores.items():
        view = core.vrs.get(name)
        if view is not None and view.present:
            actions.append(RestoreCap(name, cap, core.pending_records.get(name)))
    return actions


def _as_readings(readings: dict, lists: dict) -> Readings:
    """``readings`` as the meter's arrays hand them over (the same names list for the same VRs)."""
    names = lists.setdefault(tuple(readings), list(readings))
    known = np.array([r.forwarded_pps is not None for r in readings.values()], dtype=bool)
    fwd = np.array([r.forwarded_pps or 0.0 for r in readings.values()], dtype=np.float64)
    off = np.array([r.offered_pps or 0.0 for r in readings.values()], dtype=np.float64)
    reset = np.array([r.counter_reset for r in readings.values()], dtype=bool)
    out = Readings(names, {n: k for k, n in enumerate(names)}, fwd, off, known, reset)
    assert dict(out.items()) == readings
    return out


def _reference_rows(core: DaemonCore) -> list:
    """The sample rows as :meth:`DaemonCore.describe` gives each VR (the rows' definition)."""
    views = (core.describe(n) for n in sorted(set(core.vrs) | set(core.instances)))
    return [[d[f] for f in SAMPLE_FIELDS] for d in views]


def _drive(core: DaemonCore, seed: int, kind: str, n_vrs: int = 12, periods: int = 40, scalar: bool = False,
           arrays: bool = False, rollbacks: bool = False) -> list:
    """Random requests, readings and actuator answers; returns everything the core said.

    With ``arrays``, the readings are what the meter can hand over (rates both known or both
    unknown) and reach the core as :class:`Readings` (the meter's arrays), unless ``scalar``.
    With ``rollbacks``, some requests are undone (:meth:`DaemonCore.checkpoint`, ``rollback``: a
    deep copy of the instance and its controller put back) and the controllers are sometimes
    replaced (:meth:`DaemonCore.replace_controllers`).
    """
    rng = random.Random(seed)
    lists: dict = {}
    names = [f"vr{k}" for k in range(n_vrs)]
    mode = {n: rng.choice(["exact", "xen", "quota"]) for n in names}
    core.set_present(frozenset(names))
    log: list = []
    for p in range(periods):
        now = float(p)
        for _ in range(rng.randint(0, 3)):
            vr = rng.choice(names)
            cmd = rng.choice(["activate", "activate", "setpoint", "pause", "resume", "deactivate"])
            sp = rng.uniform(1e3, 8e4) if cmd in ("activate", "setpoint") else None
            cp = core.checkpoint(vr) if rollbacks else None
            try:
                res, acts = core.handle(Request(cmd=cmd, vr=vr, setpoint_pps=sp), now, rng.choice([None, 30.0, 7.5]))
            except ApiError as e:
                log.append(("refused", e.code))
                continue
            if cp is not None and rng.random() < 0.3:
                core.rollback(cp)  # as when the state file could not be written
                log.append(("rolled back", cmd, json.dumps(core.to_state(), sort_keys=True)))
                continue
            log.append((cmd, json.dumps(res, sort_keys=True), acts))
            _answer(core, acts, mode, now, rng)
        if rng.random() < 0.3:  # a cap written long ago: due for re-assertion
            for inst in core.instances.values():
                if inst.last_write_s is not None and rng.random() < 0.3:
                    inst.last_write_s -= core.reassert_period_s
        if rollbacks and rng.random() < 0.05:  # a configuration reload
            core.replace_controllers(core.controller_factory)
            log.append(("replaced", json.dumps(core.to_state(), sort_keys=True)))
        if rng.random() < 0.1:  # a VR goes away or comes back
            core.set_present(frozenset(n for n in names if rng.random() < 0.9))
        readings = {}
        for n in names:
            u = rng.random()
            if u < 0.05:
                continue  # not measured
            if u < 0.1:
                readings[n] = VrReading(None, None, rng.random() < 0.5)
                continue
            inst = core.instances.get(n)
            sp = inst.setpoint_pps if inst else 2e4
            y = rng.choice([0.0, sp, sp * math.exp(rng.gauss(0, 0.2)), 1e9])
            off = rng.choice([0.0, y, y * 1.5] if arrays else [None, 0.0, y, y * 1.5])
            readings[n] = VrReading(y, off, rng.random() < 0.05)
        if arrays and not scalar:
            acts = core.period(now + 0.5, _as_readings(readings, lists))
        else:
            acts = (_scalar_period(core, now + 0.5, readings) if scalar else core.period(now + 0.5, readings))
        log.append(("period", acts))
        _answer(core, acts, mode, now + 0.5, rng)
        log.append(("state", json.dumps(core.to_state(), sort_keys=True)))
        log.append(("samples", json.dumps(core.sample_rows())))
        assert json.dumps(core.sample_rows()) == json.dumps(_reference_rows(core))
    return log


def _answer(core: DaemonCore, acts, mode, now: float, rng: random.Random) -> None:
    written = []
    for a in acts:
        if isinstance(a, SetCap):
            if rng.random() < 0.05:
                core.cap_failed(a.vr, "injected")
            else:
                written.append((a.vr, _quantise(a.cap_percent, mode[a.vr]), a.cap_percent))
        elif isinstance(a, RestoreCap):
            core.restored(a.vr)
    if rng.random() < 0.5:
        core.caps_written(written, now)
    else:
        for vr, got, cmd in written:
            core.cap_written(vr, got, now, commanded_percent=cmd)


@pytest.mark.parametrize("kind", ["xtc", "pi", "deadbeat"])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=20, deadline=None)
def test_core_with_bank_equals_core_without(kind, seed):
    def factory():
        return make_controller(PAPER_MODEL, kind)

    banked = DaemonCore(factory)
    got = _drive(banked, seed, kind)
    assert banked._bank is not None  # the bank did the stepping
    ref = DaemonCore(factory)
    saved = bank_mod.ControllerBank.like
    try:
        import xtc.daemon.core as core_mod

        core_mod.ControllerBank.like = _NoBank.like  # type: ignore[method-assign]
        want = _drive(ref, seed, kind, scalar=True)
    finally:
        core_mod.ControllerBank.like = saved  # type: ignore[method-assign]
    assert ref._bank is None
    assert got == want


@pytest.mark.parametrize("kind", ["xtc", "pi", "deadbeat"])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=20, deadline=None)
def test_core_on_the_meters_arrays_equals_the_per_instance_core(kind, seed):
    """The period on the meter's arrays (:class:`Readings`, the live instances' layout kept between
    periods) decides what the per-instance reference decides on the same readings as a dict."""
    def factory():
        return make_controller(PAPER_MODEL, kind)

    banked = DaemonCore(factory)
    got = _drive(banked, seed, kind, arrays=True)
    assert banked._bank is not None and banked._frame is not None
    ref = DaemonCore(factory)
    saved = bank_mod.ControllerBank.like
    try:
        import xtc.daemon.core as core_mod

        core_mod.ControllerBank.like = _NoBank.like  # type: ignore[method-assign]
        want = _drive(ref, seed, kind, scalar=True, arrays=True)
    finally:
        core_mod.ControllerBank.like = saved  # type: ignore[method-assign]
    assert got == want


@pytest.mark.parametrize("kind", ["xtc", "pi"])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=20, deadline=None)
def test_core_with_rolled_back_requests_and_reloads_equals_the_per_instance_core(kind, seed):
    """Checkpoints (deep copies of controllers whose state lives in the bank's rows), rollbacks
    and replaced controllers: the same as the per-instance reference."""
    def factory():
        return make_controller(PAPER_MODEL, kind)

    banked = DaemonCore(factory)
    got = _drive(banked, seed, kind, arrays=True, rollbacks=True, periods=30)
    assert banked._frame is not None
    ref = DaemonCore(factory)
    saved = bank_mod.ControllerBank.like
    try:
        import xtc.daemon.core as core_mod

        core_mod.ControllerBank.like = _NoBank.like  # type: ignore[method-assign]
        want = _drive(ref, seed, kind, scalar=True, arrays=True, rollbacks=True, periods=30)
    finally:
        core_mod.ControllerBank.like = saved  # type: ignore[method-assign]
    assert got == want


def test_layout_follows_controllers_states_and_presence_changed_in_place():
    """The live instances' layout kept between periods sees what is changed behind its back."""
    def factory():
        return make_controller(PAPER_MODEL, "xtc")

    cores = [DaemonCore(factory), DaemonCore(factory)]
    for c in cores:
        c.set_present(frozenset(["a", "b", "c"]))
        for vr in ("a", "b", "c"):
            c.handle(Request(cmd="activate", vr=vr, setpoint_pps=2e4), 0.0, 50.0)
    names = ["a", "b", "c"]
    odd = [make_controller(PAPER_MODEL, "xtc", cap_min_percent=3.0) for _ in cores]
    for p in range(1, 12):
        rd = {n: VrReading(1e4 * (1 + 0.1 * k + 0.01 * p), 3e4) for k, n in enumerate(names)}
        for j, c in enumerate(cores):
            if p == 3:
                odd[j].start(c.instances["b"].cap_percent)
                c.instances["b"].controller = odd[j]
            if p == 5:
                c.instances["c"].state = "paused"
            if p == 7:
                c.set_present(frozenset(["a", "b"]))
            if p == 9:
                c.set_present(frozenset(["a", "b", "c"]))
                c.instances["c"].state = "active"
        a = cores[0].period(float(p), _as_readings(rd, {}))
        b = _scalar_period(cores[1], float(p), rd)
        assert a == b
        for j, c in enumerate(cores):
            written = [(x.vr, x.cap_percent, x.cap_percent) for x in (a if j == 0 else b) if isinstance(x, SetCap)]
            c.caps_written(written, float(p))
        assert json.dumps(cores[0].to_state(), sort_keys=True) == json.dumps(cores[1].to_state(), sort_keys=True)
        assert cores[0].sample_rows() == cores[1].sample_rows()


def test_controllers_of_other_parameters_are_stepped_alone():
    """A controller the bank does not accept (e.g. restored from another factory) still steps."""
    core = DaemonCore(lambda: make_controller(PAPER_MODEL, "xtc"))
    core.set_present(frozenset(["a", "b"]))
    for vr in ("a", "b"):
        core.handle(Request(cmd="activate", vr=vr, setpoint_pps=2e4), 0.0, 50.0)
    odd = make_controller(PAPER_MODEL, "xtc", cap_min_percent=3.0)
    odd.start(50.0)
    core.instances["b"].controller = odd
    ref = make_controller(PAPER_MODEL, "xtc", cap_min_percent=3.0)
    ref.start(50.0)
    core.period(1.0, {"a": VrReading(1e4, None), "b": VrReading(1e4, None)})
    assert core.instances["b"].cap_percent == ref.step(1e4, 2e4, None)
    assert core.instances["b"].controller is odd


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=30, deadline=None)
def test_set_present_unchanged_is_a_no_op(seed):
    """set_present returns early when nothing changed since its last call: the same views,
    presence and instances as doing every step (the reference forgets the last call each time)."""
    rng = random.Random(seed)
    names = [f"vr{k}" for k in range(6)]
    cores = [DaemonCore(lambda: make_controller(PAPER_MODEL, "xtc")) for _ in range(2)]
    seen = frozenset(names)
    for step in range(60):
        if rng.random() < 0.2:
            seen = frozenset(n for n in names if rng.random() < 0.7)
        vr, cmd = rng.choice(names), rng.choice(["activate", "deactivate", "restored", "none", "none"])
        for j, c in enumerate(cores):
            if j == 1:
                c._present_last = None  # the reference: every step of set_present, every time
            c.set_present(set(seen))
            if cmd == "restored":
                c.restored(vr)
            elif cmd != "none":
                try:
                    c.handle(Request(cmd=cmd, vr=vr, setpoint_pps=2e4 if cmd == "activate" else None), float(step), 50.0)
                except ApiError:
                    pass
        a, b = cores
        assert sorted(a.vrs) == sorted(b.vrs)
        assert [a.describe(n) for n in sorted(a.vrs)] == [b.describe(n) for n in sorted(b.vrs)]
        assert json.dumps(a.to_state(), sort_keys=True) == json.dumps(b.to_state(), sort_keys=True)
        assert {n: i.applied_cap_percent for n, i in a.instances.items()} == \
            {n: i.applied_cap_percent for n, i in b.instances.items()}


@pytest.mark.parametrize("arrays", [False, True])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15, deadline=None)
def test_core_with_the_lag_probe_banked_equals_core_without(arrays, seed):
    """With ``lag_probe`` the bank steps the controllers (the law on arrays where the lag asks for
    nothing, the scalar law where it asks for the probe or the observer): the same decisions as the
    core without a bank."""
    def factory():
        return make_controller(PAPER_MODEL, "xtc", lag_probe=True)

    banked = DaemonCore(factory)
    got = _drive(banked, seed, "xtc", arrays=arrays)
    assert banked._bank is not None  # the bank did (some of) the stepping
    ref = DaemonCore(factory)
    saved = bank_mod.ControllerBank.like
    try:
        import xtc.daemon.core as core_mod

        core_mod.ControllerBank.like = _NoBank.like  # type: ignore[method-assign]
        want = _drive(ref, seed, "xtc", scalar=True, arrays=arrays)
    finally:
        core_mod.ControllerBank.like = saved  # type: ignore[method-assign]
    assert ref._bank is None
    assert got == want
