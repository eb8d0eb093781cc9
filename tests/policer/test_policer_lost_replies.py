"""A command whose reply is lost: the router is marked unreachable, and its next measurement tells
the audit log whether the daemon carried the command out (recorded once, as its own kind, with
``reply_lost``) or not (``command_unanswered``, and the plan sends it again, recorded on its own).
Against a stand-in daemon of xtc_lab.policer_fleet, over real sockets."""

from __future__ import annotations

from typing import Any

import pytest

from xtc.policer.store import Store

MISBEHAVIOUR_OFF = {"enabled": False, "ratio": 1.5, "min_excess_pps": 5000.0, "hold_s": 3.0, "restore_hold_s": 5.0,
                    "step_factor": 0.5}


@pytest.fixture
def world(one_router_engine: Any) -> Any:
    _, store, _, d, tick = one_router_engine(0.3, 5)
    store.set_policy("misbehaviour", MISBEHAVIOUR_OFF, "test")
    store.add_router(d.name, d.endpoint, 1e7, "on", None, "test")
    tick(4)
    assert all(v.state == "active" for v in d.vrs.values())
    return store, d, tick


def _actions(store: Store, vr: str) -> list[tuple[str, dict[str, Any]]]:
    return [(a["kind"], a["detail"]) for a in store.list_actions(vr=vr, limit=1000)
            if a["kind"] in ("setpoint", "command_unanswered", "command_refused")]


def test_a_command_carried_out_whose_reply_was_lost_is_recorded_once(world: Any) -> None:
    store, d, tick = world
    d.lose_replies = {"setpoint"}
    store.set_manual_setpoint(d.name, "vr1", 4321.0, "test")
    tick(1)
    assert d.vrs["vr1"].setpoint_pps == 4321.0  # carried out
    assert store.get_router(d.name)["status"] == "unreachable"
    assert _actions(store, "vr1") == []  # not known yet
    d.lose_replies = set()
    tick(3)
    assert store.get_router(d.name)["status"] == "reachable"
    assert _actions(store, "vr1") == [("setpoint", {"cmd": "setpoint", "setpoint_pps": 4321.0, "reply_lost": True})]
    assert d.commands["setpoint"] == 1  # not sent again


def test_a_command_not_carried_out_is_recorded_unanswered_and_sent_again(world: Any) -> None:
    store, d, tick = world
    d.drop_requests = {"setpoint"}
    store.set_manual_setpoint(d.name, "vr2", 3000.0, "test")
    tick(1)
    assert d.vrs["vr2"].setpoint_pps != 3000.0  # never carried out
    assert store.get_router(d.name)["status"] == "unreachable"
    d.drop_requests = set()
    tick(3)
    assert d.vrs["vr2"].setpoint_pps == 3000.0
    detail = {"cmd": "setpoint", "setpoint_pps": 3000.0}
    assert _actions(store, "vr2") == [
        ("command_unanswered", {**detail, "error": f"no answer from {d.endpoint} within 300 ms"}),
        ("setpoint", detail),
    ]
    assert d.commands["setpoint"] == 1  # the second request (the first was lost on the way)
