"""The daemon's pure decision logic: instance states, actions, retries, persistence."""

from __future__ import annotations

import json
import math
import random

import pytest

from xtc.models import PAPER_MODEL
from xtc.control import make_controller
from xtc.daemon import api
from xtc.daemon.api import ApiError, Request
from xtc.daemon.core import DaemonCore, RestoreCap, SetCap, StateError, VrReading
from xtc.daemon.loop import PUNISHMENT_COMMANDS


def factory():
    return make_controller(PAPER_MODEL, "xtc")


def core_with(*vrs: str, **kw) -> DaemonCore:
    c = DaemonCore(factory, **kw)
    c.set_present(frozenset(vrs))
    return c


def req(cmd, vr=None, sp=None):
    return Request(cmd=cmd, vr=vr, setpoint_pps=sp)


def activate(c, vr, sp, cap, now=0.0):
    res, acts = c.handle(req("activate", vr, sp), now, cap)
    for a in acts:
        c.cap_written(a.vr, a.cap_percent, now)
    return res, acts


def test_activation_is_bumpless_and_records_the_original():
    c = core_with("vr1")
    res, acts = c.handle(req("activate", "vr1", 20000.0), 0.0, 37.0)
    assert res["state"] == "active" and res["original_cap_percent"] == 37.0
    assert acts == [SetCap("vr1", pytest.approx(37.0))]
    assert c.dirty
    # The original is in the persisted state before any cap is written.
    assert c.to_state()["instances"]["vr1"]["original_cap_percent"] == 37.0


def test_unlimited_original_starts_from_the_top_and_is_restored_as_unlimited():
    c = core_with("vr1")
    _, acts = activate(c, "vr1", 20000.0, None)
    assert acts[0].cap_percent == pytest.approx(100.0)
    _, acts = c.handle(req("deactivate", "vr1"), 1.0)
    assert acts == [RestoreCap("vr1", None)]
    assert c.pending_restores == {"vr1": None}
    c.restored("vr1")
    assert c.pending_restores == {}


def test_period_steps_only_active_instances_and_writes_only_changes():
    c = core_with("vr1", "vr2")
    activate(c, "vr1", 20000.0, 100.0)
    activate(c, "vr2", 20000.0, 100.0)
    c.handle(req("pause", "vr2"), 0.5)
    acts = c.period(1.0, {"vr1": VrReading(90000.0, 100000.0), "vr2": VrReading(90000.0, 100000.0)})
    assert [a.vr for a in acts] == ["vr1"]
    assert acts[0].cap_percent < 100.0
    c.cap_written("vr1", acts[0].cap_percent, 1.0)
    assert c.instances["vr2"].cap_percent == 100.0
    # Inside the dead zone: no new write.
    acts = c.period(2.0, {"vr1": VrReading(20000.0, 100000.0), "vr2": VrReading(90000.0, 100000.0)})
    assert acts == []


def test_no_measurement_holds_the_cap():
    c = core_with("vr1")
    activate(c, "vr1", 20000.0, 50.0)
    assert c.period(1.0, {"vr1": VrReading(None, None)}) == []
    assert c.period(2.0, {}) == []
    assert c.instances["vr1"].cap_percent == pytest.approx(50.0)


def test_failed_write_is_retried_next_period_and_reported():
    c = core_with("vr1")
    c.handle(req("activate", "vr1", 20000.0), 0.0, 50.0)
    c.cap_failed("vr1", "libvirtd gone")
    assert c.describe("vr1")["actuation_error"] == "libvirtd gone"
    acts = c.period(1.0, {"vr1": VrReading(None)})
    assert acts == [SetCap("vr1", pytest.approx(50.0))]
    c.cap_written("vr1", 50.0, 1.0)
    assert c.describe("vr1")["actuation_error"] is None
    assert c.period(2.0, {"vr1": VrReading(None)}) == []


def test_counter_reset_and_reassertion_rewrite_the_cap():
    c = core_with("vr1", reassert_period_s=10.0)
    activate(c, "vr1", 20000.0, 50.0)
    assert c.period(1.0, {"vr1": VrReading(None, None, counter_reset=True)}) == [SetCap("vr1", pytest.approx(50.0))]
    c.cap_written("vr1", 50.0, 1.0)
    assert c.period(5.0, {}) == []
    assert c.period(11.0, {}) == [SetCap("vr1", pytest.approx(50.0))]


def test_vr_that_vanishes_keeps_its_instance_and_gets_its_cap_back_on_return():
    c = core_with("vr1")
    activate(c, "vr1", 20000.0, 50.0)
    c.set_present(frozenset())
    assert c.describe("vr1")["present"] is False
    assert c.period(1.0, {}) == []
    c.set_present(frozenset({"vr1"}))
    assert c.period(2.0, {}) == [SetCap("vr1", pytest.approx(50.0))]


def test_restore_of_missing_vr_waits_for_it():
    c = core_with("vr1")
    activate(c, "vr1", 20000.0, 70.0)
    c.handle(req("deactivate", "vr1"), 1.0)
    c.set_present(frozenset())
    assert c.period(2.0, {}) == []
    assert "vr1" in c.pending_restores
    c.set_present(frozenset({"vr1"}))
    assert c.period(3.0, {}) == [RestoreCap("vr1", 70.0)]


def test_reactivation_before_restore_keeps_the_true_original():
    c = core_with("vr1")
    activate(c, "vr1", 20000.0, 70.0)
    c.period(1.0, {"vr1": VrReading(90000.0, 100000.0)})
    c.handle(req("deactivate", "vr1"), 2.0)  # restore not yet done
    res, _ = c.handle(req("activate", "vr1", 30000.0), 3.0, 12.0)
    assert res["original_cap_percent"] == 70.0
    assert c.pending_restores == {}


@pytest.mark.parametrize(
    "setup, bad, code",
    [
        ([], req("activate", "ghost", 1000.0), "unknown_vr"),
        ([], req("pause", "ghost"), "unknown_vr"),
        ([], req("status", "ghost"), "unknown_vr"),
        ([], req("pause", "vr1"), "bad_state"),
        ([], req("setpoint", "vr1", 5.0), "bad_state"),
        ([], req("resume", "vr1"), "bad_state"),
        (["activate"], req("activate", "vr1", 1000.0), "bad_state"),
        (["activate"], req("resume", "vr1"), "bad_state"),
        (["activate", "pause"], req("pause", "vr1"), "bad_state"),
    ],
)
def test_refused_requests_change_nothing(setup, bad, code):
    c = core_with("vr1")
    if "activate" in setup:
        activate(c, "vr1", 20000.0, 50.0)
    if "pause" in setup:
        c.handle(req("pause", "vr1"), 0.1)
    before = json.dumps(c.to_state(), sort_keys=True)
    listing = c.handle(req("list"), 0.2)[0]
    with pytest.raises(ApiError) as ei:
        c.handle(bad, 1.0, 42.0)
    assert ei.value.code == code
    assert json.dumps(c.to_state(), sort_keys=True) == before
    assert c.handle(req("list"), 0.2)[0] == listing


def test_resume_is_bumpless_from_the_held_cap():
    c = core_with("vr1")
    activate(c, "vr1", 20000.0, 100.0)
    for k in range(5):
        for a in c.period(float(k), {"vr1": VrReading(60000.0, 100000.0)}):
            c.cap_written(a.vr, a.cap_percent, float(k))
    held = c.instances["vr1"].cap_percent
    c.handle(req("pause", "vr1"), 6.0)
    c.handle(req("resume", "vr1"), 7.0)
    assert c.instances["vr1"].controller.cap_percent == pytest.approx(held)
    assert c.period(8.0, {"vr1": VrReading(20000.0, 100000.0)}) == []


def test_state_round_trip_resumes_instances_setpoints_originals():
    c = core_with("vr1", "vr2", "vr3")
    activate(c, "vr1", 20000.0, 80.0)
    activate(c, "vr2", 30000.0, None)
    c.handle(req("pause", "vr2"), 1.0)
    activate(c, "vr3", 10000.0, 60.0)
    c.handle(req("deactivate", "vr3"), 1.0)
    for a in c.period(2.0, {"vr1": VrReading(90000.0, 100000.0)}):
        if isinstance(a, SetCap):
            c.cap_written(a.vr, a.cap_percent, 2.0)
    doc = json.loads(json.dumps(c.to_state()))
    d = DaemonCore(factory)
    assert d.load_state(doc) == []
    assert d.to_state() == c.to_state()
    assert d.describe("vr2")["state"] == "paused"
    assert d.pending_restores == {"vr3": 60.0}
    # Not yet seen by the backend: nothing is written until it is.
    assert d.period(3.0, {}) == []
    d.set_present(frozenset({"vr1", "vr2", "vr3"}))
    acts = d.period(3.0, {})
    assert RestoreCap("vr3", 60.0) in acts and {a.vr for a in acts} == {"vr1", "vr2", "vr3"}


def test_state_with_other_controller_kind_restarts_from_the_saved_cap():
    c = core_with("vr1")
    activate(c, "vr1", 20000.0, 40.0)
    d = DaemonCore(lambda: make_controller(PAPER_MODEL, "pi"))
    notes = d.load_state(c.to_state())
    assert len(notes) == 1 and "not reused" in notes[0]
    assert d.instances["vr1"].cap_percent == pytest.approx(40.0)


def test_a_state_file_whose_previous_error_is_nan_restarts_the_controller_from_the_saved_cap():
    """A NaN previous error (a hand-edited or damaged state file: JSON's NaN) was taken as it was, and
    every cap after it was NaN; now the controller state is not reused and the VR's caps stay finite."""
    c = core_with("vr1")
    activate(c, "vr1", 20000.0, 40.0)
    for a in c.period(1.0, {"vr1": VrReading(30000.0, 100000.0)}):
        c.cap_written(a.vr, a.cap_percent, 1.0)
    doc = json.loads(json.dumps(c.to_state()))
    doc["instances"]["vr1"]["controller"]["E_prev_decades"] = math.nan
    saved_cap = doc["instances"]["vr1"]["cap_percent"]
    d = core_with("vr1")
    notes = d.load_state(json.loads(json.dumps(doc)))
    assert len(notes) == 1 and "not reused" in notes[0] and "E_prev_decades" in notes[0]
    assert d.instances["vr1"].cap_percent == pytest.approx(saved_cap)
    caps = [a.cap_percent for a in d.period(2.0, {"vr1": VrReading(25000.0, 100000.0)}) if isinstance(a, SetCap)]
    assert caps and all(math.isfinite(x) and 1.0 <= x <= 100.0 for x in caps)


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda s: s.update(schema="other"), "xtc-daemon-state/1"),
        (lambda s: s["instances"]["vr1"].update(state="dancing"), "state must be"),
        (lambda s: s["instances"]["vr1"].update(setpoint_pps=-1), "setpoint"),
        (lambda s: s["instances"]["vr1"].pop("original_cap_percent"), "original_cap_percent"),
        (lambda s: s["instances"]["vr1"].update(original_cap_percent=0), "cap > 0"),
        (lambda s: s["instances"]["vr1"].update(cap_percent=None), "cap_percent"),
        (lambda s: s.update(pending_restores={"x": "big"}), "pending restore"),
    ],
)
def test_bad_state_refused_and_nothing_changes(mutate, words):
    c = core_with("vr1")
    activate(c, "vr1", 20000.0, 40.0)
    doc = json.loads(json.dumps(c.to_state()))
    mutate(doc)
    d = core_with("vr9")
    with pytest.raises(StateError, match=words):
        d.load_state(doc)
    assert d.instances == {} and d.pending_restores == {}


def test_replace_controllers_is_bumpless():
    c = core_with("vr1")
    activate(c, "vr1", 20000.0, 33.0)
    c.replace_controllers(lambda: make_controller(PAPER_MODEL, "deadbeat"))
    assert c.instances["vr1"].controller.kind == "deadbeat"
    assert c.instances["vr1"].cap_percent == pytest.approx(33.0)


def test_fuzz_random_requests_keep_invariants():
    """Thousands of random (valid-shaped) requests: only ApiError, caps always within 1..100."""
    rng = random.Random(1234)
    c = core_with("vr1", "vr2", "vr3")
    names = ["vr1", "vr2", "vr3", "ghost"]
    caps = {"vr1": 50.0, "vr2": None, "vr3": 100.0}
    for k in range(3000):
        cmd = rng.choice([c for c in api.COMMANDS if c not in PUNISHMENT_COMMANDS + api.LINK_COMMANDS])  # the loop's, the socket's
        vr = rng.choice(names)
        sp = rng.choice([1.0, 5000.0, 20000.0, 1e6])
        r = Request(cmd, vr if "vr" in api.COMMANDS[cmd] else None, sp if "setpoint_pps" in api.COMMANDS[cmd] else None)
        try:
            _, acts = c.handle(r, float(k), caps.get(vr))
        except ApiError as e:
            assert e.code in ("unknown_vr", "bad_state")
            continue
        for a in acts:
            if isinstance(a, SetCap):
                assert 1.0 <= a.cap_percent <= 100.0 and math.isfinite(a.cap_percent)
                c.cap_written(a.vr, a.cap_percent, float(k))
            else:
                c.restored(a.vr)
        if k % 10 == 0:
            for a in c.period(float(k), {n: VrReading(rng.uniform(0, 1e5), 1e5) for n in caps}):
                if isinstance(a, SetCap):
                    assert 1.0 <= a.cap_percent <= 100.0
        for n, inst in c.instances.items():
            assert inst.original_cap_percent == caps[n]


def test_sample_rows_are_the_descriptions_without_the_record():
    """Active, paused, saturated, inactive, pending-restore and vanished VRs: each row is
    describe() without original_record, values in SAMPLE_FIELDS order."""
    c = core_with("a", "b", "c", "d", "e")
    activate(c, "a", 20e3, 30.0)
    activate(c, "b", 20e3, None)
    activate(c, "d", 20e3, 40.0)
    c.handle(req("pause", "b"), 1.0)
    c.handle(req("deactivate", "d"), 1.0)
    c.instances["a"].saturated_periods = 7
    c.instances["a"].actuation_error = "boom"
    c.period(2.0, {"a": VrReading(1000.0, 5000.0), "c": VrReading(3.0, None, True)})
    c.set_present({"a", "b", "d"})
    got = c.sample_rows()
    want = [[c.describe(n)[k] for k in api.SAMPLE_FIELDS] for n in sorted(c._names())]
    assert got == want
    assert {r[0] for r in got} >= {"a", "b", "d"}
    assert got[0][api.SAMPLE_FIELDS.index("saturated")] == "cap_max"
    c.instances["a"].saturated_periods = -5
    assert c.sample_rows()[0][api.SAMPLE_FIELDS.index("saturated")] == "cap_min"
    c.instances["a"].saturated_periods = 4
    assert c.sample_rows()[0][api.SAMPLE_FIELDS.index("saturated")] is None
    c.instances["a"].saturated_periods = 9
    c.handle(req("pause", "a"), 3.0)
    assert c.sample_rows()[0][api.SAMPLE_FIELDS.index("saturated")] is None