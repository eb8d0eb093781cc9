"""The manager commands of the policer's punishments (issue 48): ``early_drop`` (switch a running
instance's early drop), ``vr_off`` and ``vr_on``, through the daemon's service layer on the
simulated backend (fake clock).  The sim backend cannot turn a VR off: it refuses, and nothing
changes; the bookkeeping of an off VR is checked with a sim host given a recording
``power_off``/``power_on`` (the real one on a real LXC domain: tests/libvirt/test_vr_off_lxc.py)."""

from __future__ import annotations

import json
from typing import Any

from fakes.daemon import Clock, daemon_toml
from xtc_lab.sim.host import SimHost

from xtc.daemon.config import loads_config
from xtc.daemon.service import DaemonService
from xtc.host.errors import HostAdapterError

VRS = '[[sim.vr]]\nname = "vr1"\ninitial_cap_percent = 80.0\n[[sim.vr]]\nname = "vr2"\ninitial_cap_percent = 80.0\n'


class PowerSimHost(SimHost):
    """The sim host with a power switch that records what it was asked (for the daemon's bookkeeping)."""

    calls: list[tuple[str, str, Any]]
    fail = False

    def power_off(self, vr: str) -> dict[str, Any]:
        if self.fail:
            raise HostAdapterError(f"domain {vr!r}: refused")
        self.calls.append(("off", vr, None))
        return {"backend": "sim", "domain": vr}

    def power_on(self, vr: str, record: dict[str, Any]) -> None:
        if self.fail:
            raise HostAdapterError(f"domain {vr!r}: refused")
        self.calls.append(("on", vr, record))


def make(tmp_path, host_cls: type = SimHost, extra: str = "") -> tuple[DaemonService, Clock]:
    cfg = loads_config(daemon_toml(tmp_path, f'backend = "sim"\ncontrol_period_s = 1.0\n{extra}', VRS))
    clock = Clock()
    host = SimHost.from_config(cfg, clock=clock)
    host.__class__ = host_cls
    host.calls = []
    svc = DaemonService(cfg, host, clock=clock, wall_clock=lambda: 1_700_000_000.0)
    svc.open()
    return svc, clock


def ask(svc: DaemonService, **doc: Any) -> dict[str, Any]:
    doc.setdefault("v", 1)
    return json.loads(svc.handle_message([json.dumps(doc).encode()]))


def saved(tmp_path) -> dict[str, Any]:
    return json.loads((tmp_path / "state" / "state.json").read_text())


def test_early_drop_is_switched_for_a_running_instance_and_saved(tmp_path):
    svc, clock = make(tmp_path)
    try:
        svc.run_period(clock.t, 1.0)
        assert ask(svc, cmd="activate", vr="vr1", setpoint_pps=30000)["ok"]
        assert saved(tmp_path)["early_drop"]["vrs"]["vr1"]["on"] is False  # the default (daemon.early_drop off)
        # the sim backend's interfaces are not the host's: no limiter, so 'on' is refused, clearly
        assert svc.control.early_drop.limiter is None
        r = ask(svc, cmd="early_drop", vr="vr1", on=True)
        assert r["error"]["code"] == "unsupported" and "no limiter" in r["error"]["message"]
        assert ask(svc, cmd="early_drop", vr="vr1", on=False)["ok"]  # off needs none
        svc.control.early_drop.limiter = CountingLimiter()  # a fake for the logic from here on
        r = ask(svc, cmd="early_drop", vr="vr1", on=True)
        assert r["ok"] and r["result"]["early_drop"]["on"] is True
        assert saved(tmp_path)["early_drop"]["vrs"]["vr1"]["on"] is True
        # absent 'on': back to the daemon's daemon.early_drop (off here)
        r = ask(svc, cmd="early_drop", vr="vr1")
        assert r["ok"] and r["result"]["early_drop"]["on"] is False
        assert saved(tmp_path)["early_drop"]["vrs"]["vr1"]["on"] is False
    finally:
        svc.close()


def test_punishment_commands_refuse_bad_input_and_change_nothing(tmp_path):
    svc, clock = make(tmp_path)
    try:
        svc.run_period(clock.t, 1.0)
        assert ask(svc, cmd="activate", vr="vr1", setpoint_pps=30000)["ok"]
        before = (tmp_path / "state" / "state.json").read_text()
        for doc, code, words in (
            ({"cmd": "early_drop", "vr": "vr1", "on": "yes"}, "bad_field", "'on'"),
            ({"cmd": "early_drop", "vr": "vr1", "on": True, "rate": 5}, "bad_field", "unknown field 'rate'"),
            ({"cmd": "early_drop", "vr": "nope", "on": False}, "unknown_vr", "nope"),
            ({"cmd": "early_drop", "vr": "vr2", "on": False}, "bad_state", "no XTC instance"),
            ({"cmd": "vr_off", "vr": "vr1", "reason": "x" * 301}, "bad_field", "'reason'"),
            ({"cmd": "vr_off", "vr": "vr2"}, "bad_state", "no XTC instance"),
            ({"cmd": "vr_on", "vr": "vr1"}, "bad_state", "was not turned off"),
            ({"cmd": "vr_on"}, "bad_field", "missing field 'vr'"),
        ):
            r = ask(svc, **doc)
            assert not r["ok"] and r["error"]["code"] == code and words in r["error"]["message"], (doc, r)
        # the sim backend cannot turn a VR off: a clear refusal, nothing changed
        r = ask(svc, cmd="vr_off", vr="vr1", reason="test")
        assert r["error"]["code"] == "unsupported" and "sim backend cannot turn a VR off" in r["error"]["message"]
        assert ask(svc, cmd="status", vr="vr1")["result"]["state"] == "active"
        assert (tmp_path / "state" / "state.json").read_text() == before
    finally:
        svc.close()


def test_vr_off_pauses_records_the_reason_survives_a_restart_and_vr_on_starts_it_from_the_record(tmp_path):
    svc, clock = make(tmp_path, PowerSimHost)
    try:
        svc.run_period(clock.t, 1.0)
        assert ask(svc, cmd="activate", vr="vr1", setpoint_pps=30000)["ok"]
        svc.host.fail = True  # the backend fails: refused, nothing changed
        r = ask(svc, cmd="vr_off", vr="vr1", reason="misbehaving")
        assert r["error"]["code"] == "backend" and "refused" in r["error"]["message"]
        assert "vr_off" not in saved(tmp_path) and ask(svc, cmd="status", vr="vr1")["result"]["state"] == "active"
        svc.host.fail = False
        r = ask(svc, cmd="vr_off", vr="vr1", reason="misbehaving")
        assert r["ok"] and r["result"]["state"] == "paused"
        assert r["result"]["vr_off"] == {"reason": "misbehaving", "since_unix_s": 1_700_000_000.0}
        assert svc.host.calls == [("off", "vr1", None)]
        assert ask(svc, cmd="vr_off", vr="vr1")["ok"] and len(svc.host.calls) == 1  # off already: not again
        listed = {v["vr"]: v for v in ask(svc, cmd="list")["result"]["vrs"]}
        assert listed["vr1"]["vr_off"]["reason"] == "misbehaving" and "vr_off" not in listed["vr2"]
        assert saved(tmp_path)["vr_off"]["vr1"]["record"] == {"backend": "sim", "domain": "vr1"}
    finally:
        svc.close()
    # A restarted daemon still knows the VR is off and how to start it.
    svc, clock = make(tmp_path, PowerSimHost)
    try:
        assert ask(svc, cmd="status", vr="vr1")["result"]["vr_off"]["reason"] == "misbehaving"
        r = ask(svc, cmd="vr_on", vr="vr1")
        assert r["ok"] and "vr_off" not in r["result"] and r["result"]["state"] == "paused"
        assert svc.host.calls == [("on", "vr1", {"backend": "sim", "domain": "vr1"})]
        assert "vr_off" not in saved(tmp_path)
        assert ask(svc, cmd="resume", vr="vr1")["ok"]
    finally:
        svc.close()


def test_a_vr_off_whose_state_cannot_be_saved_is_undone(tmp_path, monkeypatch):
    svc, clock = make(tmp_path, PowerSimHost)
    try:
        svc.run_period(clock.t, 1.0)
        assert ask(svc, cmd="activate", vr="vr1", setpoint_pps=30000)["ok"]
        monkeypatch.setattr(svc, "_save", lambda force=False: "disk full")
        r = ask(svc, cmd="vr_off", vr="vr1", reason="misbehaving")
        assert r["error"]["code"] == "state_not_saved"
        assert [c[0] for c in svc.host.calls] == ["off", "on"]  # turned on again: nothing changed
        assert not svc.control.power.off and svc.core.instances["vr1"].state == "active"
    finally:
        monkeypatch.undo()
        svc.close()


class CountingLimiter:
    """A limiter fake for the logic: every interface it is on 'drops' 25,000 packets a period."""

    def __init__(self) -> None:
        self.on: dict[str, Any] = {}
        self.drops: dict[str, int] = {}

    def install(self, ifname, setting):
        created = ifname not in self.on
        self.on[ifname] = setting
        self.drops.setdefault(ifname, 0)
        return created

    def update(self, ifname, setting):
        return self.install(ifname, setting)

    def remove(self, ifname):
        self.drops.pop(ifname, None)
        return self.on.pop(ifname, None) is not None

    def adopt(self, ifname):
        return None

    def dropped_packets(self, ifname):
        return self.drops.get(ifname) if ifname in self.on else None

    def dropped_by_interface(self, ifnames):
        for i in self.on:
            self.drops[i] += 25_000
        return {i: self.drops[i] for i in ifnames if i in self.on}

    def close(self):
        pass


def test_a_limited_vr_is_reported_offered_what_it_was_handed_plus_what_its_limiter_dropped(tmp_path):
    """The policer judges misbehaviour from the reported offered rate: with early drop on, that is
    what the host handed the VR plus what the limiter dropped (else the ladder's limiter step would
    make the VR look as if it had backed off, and it would be restored at once); also while paused."""
    svc, clock = make(tmp_path)
    try:
        svc.control.early_drop.limiter = CountingLimiter()
        svc.run_period(clock.t, 1.0)
        assert ask(svc, cmd="activate", vr="vr1", setpoint_pps=10_000, early_drop=True)["ok"]
        for _ in range(8):
            clock.t += 1.0
            svc.run_period(clock.t, 1.0)
        assert svc.control.early_drop.limit_of("vr1") is not None
        n_ifs = len(svc.control.vrs["vr1"])
        for state_cmd in (None, "pause"):
            if state_cmd:
                assert ask(svc, cmd=state_cmd, vr="vr1")["ok"]
            clock.t += 1.0
            svc.run_period(clock.t, 1.0)
            reported = ask(svc, cmd="status", vr="vr1")["result"]
            dropped = svc.control.early_drop.dropped_pps["vr1"]
            assert dropped == 25_000 * n_ifs
            # the plant hands the VR its 100,000 p/s (it does not model the limiter): reported is that plus the drops
            assert 80_000 <= reported["offered_pps"] - dropped <= 120_000, reported
            assert svc.control.early_drop.limit_of("vr1") is not None  # held while paused
    finally:
        svc.close()
