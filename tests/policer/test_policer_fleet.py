"""The policer against a fleet of stand-in daemons (xtc_lab.policer_fleet): 300 routers, 10 % dead."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import wait_for
from pydantic import TypeAdapter

from xtc.daemon.api import ErrorReply, Instance, OkReply
from xtc.policer.engine import Engine
from xtc.policer.link import LinkPool, strict_json
from xtc.policer.store import Store
from xtc_lab.policer_fleet import Fleet

pytestmark = [pytest.mark.slow, pytest.mark.exclusive]  # times and rates: run alone


def test_fake_daemon_answers_the_manager_api() -> None:
    fleet = Fleet(2, vrs_per_router=3, dead_fraction=0.0)
    d = fleet.daemons[0]
    rep = strict_json(d.handle(b'{"v": 1, "cmd": "list", "id": 7}'))
    assert rep["id"] == 7
    for v in OkReply.model_validate(rep).result["vrs"]:
        Instance.model_validate(v)
    rep = strict_json(d.handle(b'{"v": 1, "cmd": "setpoint", "vr": "vr0", "setpoint_pps": 5}'))
    assert ErrorReply.model_validate(rep).error.code == "bad_state"
    rep = strict_json(d.handle(b'{"v": 1, "cmd": "activate", "vr": "vr0", "setpoint_pps": 5000}'))
    assert Instance.model_validate(OkReply.model_validate(rep).result).setpoint_pps == 5000
    for raw, code in ((b'{"v": 1, "cmd": "status", "vr": "nope"}', "unknown_vr"), (b'{"v": 2, "cmd": "ping"}', "bad_version"),
                      (b'{"v": 1, "cmd": "activate", "vr": "vr1", "setpoint_pps": 0}', "bad_field"), (b"nan", "bad_json")):
        assert ErrorReply.model_validate(strict_json(d.handle(raw))).error.code == code
    TypeAdapter(list[dict]).validate_python(fleet.routers())
    fleet.stop()


def test_a_paused_stand_in_vr_keeps_its_cap_where_it_was() -> None:
    # The daemon leaves a paused instance's cap where it is: the stand-in forwards what it forwarded
    # when paused, whatever setpoint it is given meanwhile, and follows its setpoint again on resume.
    # (Forwarding everything it is offered while paused made a punished VR look well-behaved: the
    # policer restored it, punished it again, and so on for ever.)
    fleet = Fleet(1, vrs_per_router=1, dead_fraction=0.0)
    d = fleet.daemons[0]
    v = d.vrs["vr0"]
    v.offered_pps = 9000.0

    def measured() -> float:
        rep = OkReply.model_validate(strict_json(d.handle(b'{"v": 1, "cmd": "status", "vr": "vr0"}')))
        return Instance.model_validate(rep.result).forwarded_pps

    d.handle(b'{"v": 1, "cmd": "activate", "vr": "vr0", "setpoint_pps": 3000}')
    assert measured() == 3000.0
    d.handle(b'{"v": 1, "cmd": "pause", "vr": "vr0"}')
    d.handle(b'{"v": 1, "cmd": "setpoint", "vr": "vr0", "setpoint_pps": 1000}')
    assert measured() == 3000.0  # held, not 9,000 offered nor the new 1,000
    d.handle(b'{"v": 1, "cmd": "resume", "vr": "vr0"}')
    assert measured() == 1000.0
    d.handle(b'{"v": 1, "cmd": "deactivate", "vr": "vr0"}')
    assert measured() == 9000.0
    fleet.stop()


def test_a_stand_in_vrs_sample_row_is_its_instance_in_the_samples_order() -> None:
    # The fleet builds its samples' rows without the instance's dictionary; they must say the same.
    from xtc.daemon.api import SAMPLE_FIELDS

    fleet = Fleet(1, vrs_per_router=1, dead_fraction=0.0)
    d = fleet.daemons[0]
    v = d.vrs["vr0"]
    v.offered_pps = 9000.0
    seen = []
    for cmd in (b'{"v": 1, "cmd": "status", "vr": "vr0"}', b'{"v": 1, "cmd": "activate", "vr": "vr0", "setpoint_pps": 3000}',
                b'{"v": 1, "cmd": "pause", "vr": "vr0"}', b'{"v": 1, "cmd": "setpoint", "vr": "vr0", "setpoint_pps": 1234.5}',
                b'{"v": 1, "cmd": "resume", "vr": "vr0"}', b'{"v": 1, "cmd": "deactivate", "vr": "vr0"}'):
        d.handle(cmd)
        inst = v.instance()
        assert v.sample_row() == [inst.get(k) for k in SAMPLE_FIELDS]
        seen.append(v.state)
    assert seen == ["inactive", "active", "paused", "paused", "active", "inactive"]
    fleet.stop()


def test_300_routers_10_percent_dead(tmp_path: Path) -> None:
    # The fleet runs in a process of its own, as the routers are other machines: the policer's
    # threads do not share an interpreter with 300 stand-in daemons.
    period_s = 1.0
    routers_file = tmp_path / "fleet.json"
    fleet = subprocess.Popen([sys.executable, "-m", "xtc_lab.policer_fleet", "--routers", "300", "--vrs", "16",
                              "--dead", "0.1", "--out", str(routers_file)], stdout=subprocess.PIPE, text=True)
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    links = LinkPool(0.8 * period_s)
    eng = Engine(store, links, period_s=period_s)

    def window() -> dict:
        fleet.send_signal(signal.SIGUSR1)
        assert fleet.stdout is not None
        return json.loads(fleet.stdout.readline())["window"]

    try:
        def started() -> bool:
            if routers_file.exists():
                return True
            assert fleet.poll() is None, "the fleet did not start"  # it exited
            return False

        wait_for(started, 120, "the fleet to start (its routers file)")
        routers = json.loads(routers_file.read_text())
        for r in routers:
            store.add_router(r["name"], r["endpoint"], r["capacity_pps"], "on", None, "test")
        dead = {r["name"] for r in routers if r["mode"] == "dead"}
        assert len(dead) == 30
        t0 = time.monotonic()
        eng.start()
        marked_at: dict[str, float] = {}
        while time.monotonic() - t0 < 2 * period_s + 0.2:
            for r in store.list_routers():
                if r["name"] in dead and r["status"] == "unreachable":
                    marked_at.setdefault(r["name"], time.monotonic() - t0)
            time.sleep(0.05)
        assert set(marked_at) == dead, f"{len(dead - set(marked_at))} dead routers not marked within 2 periods"
        # Steady state over 5 periods.  A stall of a busy host can stretch one window: the same
        # measurement is repeated, up to 3 windows, and one window must meet the bounds (all printed).
        first = window()["ok"]["commands"]  # everything up to now: the activations
        gaps = []
        for _ in range(3):
            time.sleep(5 * period_s)
            stats = window()
            gaps.append(stats["ok"]["max_gap_s"])
            print(stats, f"dead marked within {max(marked_at.values()):.2f} s")
            ok = stats["ok"]
            if ok["never_polled"] == 0 and ok["max_gap_s"] <= 1.5 * period_s and ok["lists"] >= 270 * 4:
                break
        assert ok["never_polled"] == 0
        assert ok["max_gap_s"] <= 1.5 * period_s, f"every healthy router polled every period (windows: {gaps})"
        assert ok["lists"] >= 270 * 4
        pushed = sum(c.get("activate", 0) + c.get("setpoint", 0) for c in (first, ok["commands"]))
        assert pushed >= 270 * 16, "setpoints pushed to every VR of the healthy routers"
        assert links.socket_errors == 0 and eng.error is None
        statuses = {r["name"]: r["status"] for r in store.list_routers()}
        assert all(statuses[n] == "reachable" for n in statuses if n not in dead)
        vrs = store.list_vrs()
        assert len(vrs) == 270 * 16
        assert sum(v["state"] == "active" for v in vrs) == 270 * 16, "every VR of the healthy routers activated"
    finally:
        eng.stop()
        store.close()
        fleet.terminate()
        try:
            fleet.wait(30)
        except subprocess.TimeoutExpired:
            fleet.kill()


def test_a_router_registered_between_cycles_is_reached_at_once(db_url: str) -> None:
    """A router registered between two cycles is sent its first ``list`` within a tenth of a period
    (:meth:`Engine.contact_new`), not at the next cycle: a live one is measured at once, a dead one
    marked about a tenth of a period plus the links' timeout after its registration.  Before, the
    mark came at the next cycle plus the timeout: here 1.0 s + 0.3 s after a registration just after a
    cycle, against a bound of 0.8 s.  On a busy host the dead registration is repeated with another
    router, up to three times; the bound is not widened.  Each new router gets one such ``list``."""
    period_s, timeout_s = 1.0, 0.3
    fleet = Fleet(6, vrs_per_router=2, dead_fraction=0.0).start()
    store = Store(db_url)
    eng = Engine(store, LinkPool(timeout_s), period_s=period_s, max_vrs_per_router=8)
    by_name = {d.name: d for d in fleet.daemons}
    routers = {r["name"]: r for r in fleet.routers()}

    def register(name: str) -> None:
        r = routers[name]
        store.add_router(name, r["endpoint"], r["capacity_pps"], "on", None, "test")

    def just_after_a_cycle() -> None:
        c = eng.cycles
        wait_for(lambda: eng.cycles != c, 5 * period_s, "the engine's next cycle", step_s=0.005)

    try:
        register("r00000")
        eng.start()
        just_after_a_cycle()
        # A live router registered just after a cycle: listed and measured well before the next one.
        just_after_a_cycle()
        t_reg = time.monotonic()
        register("r00001")
        wait_for(lambda: store.get_router("r00001")["status"] == "reachable", t_reg + 0.8 * period_s - time.monotonic(),
                 "a live new router measured before the next cycle", step_s=0.01)
        live_s = time.monotonic() - t_reg
        assert len(by_name["r00001"].list_times) >= 1
        # Dead from its registration: marked within a tenth of a period + the timeout (+ the worker's turn).
        took = []
        for name in ("r00002", "r00003", "r00004"):
            by_name[name].silent = True
            just_after_a_cycle()
            t_reg = time.monotonic()
            register(name)
            wait_for(lambda n=name: store.get_router(n)["status"] == "unreachable", t_reg + 3 * period_s - time.monotonic(),
                     f"{name} marked", step_s=0.01)
            took.append(round(time.monotonic() - t_reg, 3))
            if took[-1] <= 0.8 * period_s:
                break
        print(f"live router measured {live_s:.3f} s after its registration; dead ones marked after {took} s")
        assert took[-1] <= 0.8 * period_s, f"a router dead from its registration marked within 0.8 s: {took}"
        assert "within 300 ms" in store.get_router(name)["last_error"]
        assert 2 <= eng.first_contacts <= 4  # one each, at most; none to the router the first cycle reached
        assert eng.error is None
    finally:
        eng.stop()
        store.close()
        fleet.stop()
