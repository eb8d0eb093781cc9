"""The engine does not plan again a router whose plan inputs are those of its last plan when that plan
changed nothing and no policy timer runs; any change of measurement, policy or setting, and any
running timer, has it planned (against a stand-in daemon of xtc_lab.policer_fleet, over real sockets)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from procs import until, wait_for

from xtc_lab.policer_fleet import Fleet

MISBEHAVIOUR_OFF = {"enabled": False, "ratio": 1.5, "min_excess_pps": 5000.0, "hold_s": 3.0, "restore_hold_s": 5.0,
                    "step_factor": 0.5}


@pytest.fixture
def world(one_router_engine: Any) -> Any:
    return one_router_engine(2.0, 3)


def _commands(d: Any) -> int:
    return sum(d.commands.values())


def test_unchanged_inputs_are_not_planned_again_and_a_change_is(world: Any) -> None:
    fleet, store, eng, d, tick = world
    store.set_policy("misbehaviour", MISBEHAVIOUR_OFF, "test")
    store.add_router(d.name, d.endpoint, 1e7, "on", None, "test")  # room for every VR's demand
    tick(4)  # activations, then the daemon shows them, then a plan that changes nothing
    assert all(v.state == "active" for v in d.vrs.values())
    planned, skipped, sent = eng.planned, eng.plans_skipped, _commands(d)
    before = {n: store.get_vr(d.name, n) for n in d.vrs}
    tick(3)
    assert eng.planned == planned, "unchanged inputs were planned again"
    assert eng.plans_skipped == skipped + 3
    assert _commands(d) == sent
    after = {n: store.get_vr(d.name, n) for n in d.vrs}
    for n in d.vrs:  # the measurements are still recorded every cycle; the policy state is as it was
        assert after[n]["last_seen_unix_s"] >= before[n]["last_seen_unix_s"]
        assert {k: v for k, v in after[n].items() if k != "last_seen_unix_s"} == \
            {k: v for k, v in before[n].items() if k != "last_seen_unix_s"}

    # A measurement changes: planned again, and the new setpoint is pushed.
    v0 = d.vrs["vr0"]
    old_sp = v0.setpoint_pps
    v0.offered_pps *= 3
    tick(1)
    assert eng.planned > planned
    assert v0.setpoint_pps is not None and v0.setpoint_pps > 2 * old_sp

    # A policy changes in the store (the API's process): planned again, the manual setpoint pushed.
    tick(2)
    planned = eng.planned
    store.set_manual_setpoint(d.name, "vr1", 4321.0, "test")
    tick(1)
    assert eng.planned > planned
    assert d.vrs["vr1"].setpoint_pps == 4321.0

    # A setting changes: planned again, every derived setpoint follows.
    tick(2)
    planned = eng.planned
    store.set_policy("allocation", {"enabled": True, "target_fraction": 0.9, "min_setpoint_pps": 1000.0,
                                    "demand_headroom": 2.0, "hysteresis": 0.1}, "test")
    tick(1)
    assert eng.planned > planned
    assert d.vrs["vr2"].setpoint_pps == pytest.approx(2.0 * d.vrs["vr2"].offered_pps, rel=0.02)

    # The router's capacity changes: planned again.
    tick(2)
    planned = eng.planned
    store.update_router(d.name, {"capacity_pps": 2e7}, "test")
    tick(1)
    assert eng.planned > planned


def test_a_running_activation_timer_has_the_router_planned_at_its_hold(world: Any) -> None:
    # The inputs stay the same cycle after cycle while the hold runs: only the time moves.  A skip
    # that ignored the timer would keep the host off for ever; one that compared it otherwise than
    # the policy does would switch it a cycle late.
    fleet, store, eng, d, tick = world
    store.set_policy("misbehaviour", MISBEHAVIOUR_OFF, "test")
    store.set_policy("activation", {"enabled": True, "on_fraction": 0.9, "off_fraction": 0.7, "hold_s": 3.0}, "test")
    demand = sum(v.offered_pps for v in d.vrs.values())
    store.add_router(d.name, d.endpoint, demand / 0.95, "auto", None, "test")
    tick(1)
    since = store.router_state(d.name)[0].pending_since_s
    assert since is not None
    skipped = eng.plans_skipped
    while not store.get_router(d.name)["control_on"]:
        assert eng.clock() - since < 3.0, "not switched on when the hold was reached"
        tick(1)
    assert eng.clock() - since == 3.0, "switched on at the first cycle that reached the hold"
    assert eng.plans_skipped > skipped, "the cycles inside the hold were not planned"
    tick(1)
    assert all(v.state == "active" for v in d.vrs.values())


def test_a_running_misbehaviour_timer_has_the_router_planned_at_its_hold(world: Any) -> None:
    fleet, store, eng, d, tick = world
    store.set_policy("misbehaviour", {**MISBEHAVIOUR_OFF, "enabled": True}, "test")
    store.add_router(d.name, d.endpoint, 1e7, "on", None, "test")
    tick(4)
    v0 = d.vrs["vr0"]
    store.set_manual_setpoint(d.name, "vr0", v0.offered_pps / 4, "test")  # it forwards a quarter of what it is offered
    while store.get_vr(d.name, "vr0")["punishment_level"] == 0:
        since = store.router_state(d.name)[1]["vr0"].punish_bad_since_s
        assert since is None or eng.clock() - since < 3.0, "not punished when the hold was reached"
        tick(1)
    assert eng.clock() - since == 3.0, "punished at the first cycle that reached the hold"
    # Level 1, bad again: each further hold climbs a level, to the last (paused), where it stays.
    for level in (2, 3):
        since = store.router_state(d.name)[1]["vr0"].punish_bad_since_s
        while store.get_vr(d.name, "vr0")["punishment_level"] < level:
            assert eng.clock() - since < 3.0
            tick(1)
        assert eng.clock() - since == 3.0
    tick(1)
    assert v0.state == "paused"
    # Paused, its cap stays where it was; its traffic now backs off to what that cap lets through:
    # good behaviour, restored after restore_hold_s.
    tick(3)
    assert store.get_vr(d.name, "vr0")["punishment_level"] == 3, "restored while it still misbehaved"
    v0.offered_pps = v0.forwarded_pps()
    for _ in range(30):
        if store.get_vr(d.name, "vr0")["punishment_level"] == 0:
            break
        since = store.router_state(d.name)[1]["vr0"].punish_good_since_s
        assert since is None or eng.clock() - since < 5.0, "not restored when the hold was reached"
        tick(1)
    assert eng.clock() - since == 5.0, "restored at the first cycle that reached the hold"


def test_a_sample_that_differs_only_in_its_time_is_not_parsed_again() -> None:
    from xtc.daemon import api
    from xtc.policer.link import BadReply
    from xtc.policer.samples import parse_newer, parse_samples

    fleet = Fleet(1, vrs_per_router=4, dead_fraction=0.0, seed=5)
    rows = lambda: sorted(([inst.get(k) for k in api.SAMPLE_FIELDS]  # noqa: E731
                           for inst in (v.instance() for v in fleet.daemons[0].vrs.values())), key=lambda r: r[0])
    try:
        m1 = api.samples_message(1_763_850_000.25, 1.0, rows())
        vrs1, last = parse_newer(m1, None, 64)
        assert vrs1 == parse_samples(m1, 64) and last is not None
        m2 = api.samples_message(1_763_850_001.5e0, 1.0, rows())
        vrs2, last2 = parse_newer(m2, last, 64)
        assert vrs2 is vrs1 and last2 is last, "the same VRs at another time: not parsed again"
        # Anything else in the body changes: parsed (and validated) again.
        fleet.daemons[0].vrs["vr2"].offered_pps += 1
        m3 = api.samples_message(1_763_850_002.0, 1.0, rows())
        vrs3, last3 = parse_newer(m3, last2, 64)
        assert vrs3 == parse_samples(m3, 64) != vrs1
        m4 = api.samples_message(1_763_850_003.0, 2.0, rows())
        assert parse_newer(m4, last3, 64)[0] is not vrs3
        # A time that is not a plain JSON number is parsed whole (and refused); so is a longer body or a bad frame.
        for frames in ([api.SAMPLES_TOPIC, m3[1].replace(b'"t_unix_s":1763850002.0', b'"t_unix_s":NaN')],
                       [api.SAMPLES_TOPIC, m3[1].replace(b'"t_unix_s":1763850002.0', b'"t_unix_s":1763850002.0,"t_unix_s":1')],
                       [b"other", m3[1]], [api.SAMPLES_TOPIC, m3[1], b""]):
            with pytest.raises(BadReply):
                parse_newer(frames, last3, 64)
        with pytest.raises(BadReply):  # over the size bound, even when the rest matches
            parse_newer([api.SAMPLES_TOPIC, m3[1].replace(b"1763850002.0", b"1763850002." + b"0" * 100)], last3, 64,
                        max_bytes=len(m3[1]) + 50)
    finally:
        fleet.stop()


def test_a_stop_during_a_batch_lets_it_send_its_commands(world: Any) -> None:
    """``Engine.stop`` while the worker has a batch in hand: the batch ends (its plans are saved, so its
    commands go out) before the links close; the stop is not an engine failure (a graceful stop of a
    busy policer used to log "engine cycle failed" and exit with status 1)."""
    fleet, store, eng, d, tick = world
    store.add_router(d.name, d.endpoint, 1e7, "on", None, "test")
    saving, go_on = threading.Event(), threading.Event()
    save_plans = store.save_plans

    def slow_save(plans: Any) -> None:
        save_plans(plans)
        if any(p[0] == d.name for p in plans):
            saving.set()
            go_on.wait(5)

    store.save_plans = slow_save  # type: ignore[method-assign]
    eng.run_cycle()
    assert saving.wait(10), "no plan was saved"
    stopper = threading.Thread(target=eng.stop)
    stopper.start()
    time.sleep(0.3)  # stop() is under way while the batch is between its save and its sends
    go_on.set()
    stopper.join(15)
    assert not stopper.is_alive()
    assert eng.error is None, f"the stop failed the engine: {eng.error!r}"
    until(lambda: d.commands.get("activate", 0) >= len(d.vrs), 5, step_s=0.02)
    assert d.commands.get("activate", 0) == len(d.vrs), d.commands


def test_failures_are_recorded_in_a_batch_of_their_own(world: Any) -> None:
    """Replies that arrive while the worker is busy are taken failures first; a batch that starts with
    failures takes failures only, so a dead router's mark is committed in a small transaction of its
    own and does not wait for a batch of answering routers to be recorded and planned."""
    from xtc.daemon.api import OkReply
    from xtc.policer.link import LinkDown, strict_json

    fleet, store, eng, d, tick = world
    store.add_router(d.name, d.endpoint, 1e7, "on", None, "test")
    for ghost in ("ghost1", "ghost2"):
        store.add_router(ghost, "tcp://127.0.0.1:9", 1e7, "on", None, "test")
    routers = {r["name"]: r for r in store.engine_routers()}
    settings, now = store.settings(), eng.clock()
    listing = OkReply.model_validate(strict_json(d.handle(b'{"v": 1, "cmd": "list", "id": 1}'))).result
    batches: list[list[tuple[str, str | None]]] = []
    first_in, go_on = threading.Event(), threading.Event()
    record = store.record_outcomes

    def spy(outcomes: Any) -> Any:
        batches.append([(o.router, o.status) for o in outcomes])
        if len(batches) == 1:
            first_in.set()
            go_on.wait(5)
        return record(outcomes)

    store.record_outcomes = spy  # type: ignore[method-assign]
    eng._ensure_worker()
    eng._put(("list", routers[d.name], settings, now, [listing], time.monotonic()))
    assert first_in.wait(5), "the worker took the first reply"
    eng._put(("list", routers[d.name], settings, now, [listing], time.monotonic()))  # an answer, then two failures
    for ghost in ("ghost1", "ghost2"):
        eng._put(("list", routers[ghost], settings, now, [LinkDown("no answer within 300 ms")], time.monotonic()))
    go_on.set()
    wait_for(lambda: len(batches) >= 3, 10, lambda: f"3 batches: {batches}", step_s=0.01)
    assert batches[1] == [("ghost1", "unreachable"), ("ghost2", "unreachable")], batches
    # the answer after them (with, if it has arrived by then, the first batch's commands' reply)
    assert (d.name, "reachable") in batches[2] and all(st != "unreachable" for _, st in batches[2]), batches
    assert store.get_router("ghost1")["status"] == "unreachable" and eng.error is None
