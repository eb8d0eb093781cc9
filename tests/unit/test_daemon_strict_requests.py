"""Loose request semantics the adversarial probe found (issue 13, low 13): each is refused now (the
loose requests themselves are cases of ``test_daemon_api.test_bad_requests``)."""

from __future__ import annotations

import json

import pytest

from xtc.daemon.api import parse_request

from fakes.daemon import daemon_toml
from unit.test_daemon_service import ask, drive, make


def parse(raw: bytes):
    return parse_request(raw, 65536, 1e8)


def test_the_smallest_setpoint_and_integer_version_still_pass():
    assert parse(b'{"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": 1}').setpoint_pps == 1.0


@pytest.fixture()
def lowered(tmp_path):
    """``(service, clock)``: vr1 held at 50 kp/s; the config file lowers the maximum setpoint to 40 kp/s."""
    svc, clock = make(tmp_path)
    try:
        assert ask(svc, cmd="activate", vr="vr1", setpoint_pps=50000)["ok"]
        svc.config_path = tmp_path / "xtcd.toml"
        svc.config_path.write_text(daemon_toml(tmp_path, 'backend = "sim"\ncontrol_period_s = 1.0\nmax_setpoint_pps = 40000',
                                               '[[sim.vr]]\nname = "vr1"\ninitial_cap_percent = 80.0'))
        yield svc, clock
    finally:
        svc.close()


def test_reload_lowering_max_setpoint_below_a_live_setpoint_is_refused(lowered):
    """Chosen: refuse (naming the VR) rather than clamp; the operator lowers the setpoint first."""
    svc, clock = lowered
    assert svc.reload() is False
    assert svc.cfg.daemon.max_setpoint_pps == 1e8 and svc.core.max_setpoint_pps == 1e8
    assert ask(svc, cmd="status", vr="vr1")["result"]["setpoint_pps"] == 50000
    # Once the setpoint is below the new maximum, the same file is taken.
    assert ask(svc, cmd="setpoint", vr="vr1", setpoint_pps=30000)["ok"]
    assert svc.reload() is True
    assert svc.core.max_setpoint_pps == 40000
    assert ask(svc, cmd="setpoint", vr="vr1", setpoint_pps=45000)["error"]["code"] == "bad_field"
    drive(svc, clock, 2)


def test_reload_refusal_names_the_vr(lowered, caplog):
    svc, _ = lowered
    with caplog.at_level("ERROR", logger="xtc.daemon"):
        assert svc.reload() is False
    text = "\n".join(str(getattr(r, "xtc_fields", {})) for r in caplog.records)
    assert "daemon.max_setpoint_pps" in text and "'vr1'" in text and "50000" in text, text


def test_a_change_that_cannot_be_saved_is_refused_and_undone(tmp_path, monkeypatch):
    """In-process twin of the full-disk process test: the save fails, the core is as before."""
    import xtc.daemon.service as service
    from xtc.service.state import StateFileError

    svc, clock = make(tmp_path, vrs='[[sim.vr]]\nname = "vr1"\ninitial_cap_percent = 80.0\n'
                                   '[[sim.vr]]\nname = "vr2"\ninitial_cap_percent = 60.0\n')
    try:
        assert ask(svc, cmd="activate", vr="vr1", setpoint_pps=30000)["ok"]
        drive(svc, clock, 3)
        before = json.dumps(svc.core.to_state(), sort_keys=True)
        caps_before = dict(svc.host.caps)

        def full(path, doc):
            raise StateFileError(f"cannot write state file {path}: No space left on device")

        monkeypatch.setattr(service, "save_state", full)
        for doc in ({"cmd": "setpoint", "vr": "vr1", "setpoint_pps": 12345},
                    {"cmd": "activate", "vr": "vr2", "setpoint_pps": 20000},
                    {"cmd": "pause", "vr": "vr1"},
                    {"cmd": "deactivate", "vr": "vr1"}):
            rep = ask(svc, **doc)
            assert rep["ok"] is False and rep["error"]["code"] == "state_not_saved", rep
            msg = rep["error"]["message"]
            assert "state.json" in msg and "No space left on device" in msg and "nothing was changed" in msg
            assert json.dumps(svc.core.to_state(), sort_keys=True) == before
            assert svc.host.caps == caps_before
        assert ask(svc, cmd="ping")["ok"]  # reads still answer
        monkeypatch.undo()
        assert ask(svc, cmd="activate", vr="vr2", setpoint_pps=20000)["ok"]
        assert json.loads((tmp_path / "state" / "state.json").read_text())["instances"]["vr2"]["setpoint_pps"] == 20000
    finally:
        svc.close()
