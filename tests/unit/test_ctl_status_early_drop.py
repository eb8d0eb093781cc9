"""``xtc ctl status`` shows early drop (issue 48): the table's EARLY column, and the list reply
(the table of all VRs) carries each VR's early drop as the one-VR status reply does."""

from __future__ import annotations

import json

from fakes.daemon import Clock, daemon_toml
from xtc_lab.sim.host import SimHost

from xtc.daemon.config import loads_config
from xtc.daemon.ctl import format_table
from xtc.daemon.service import DaemonService


def row(**kw):
    return {"vr": "vr1", "state": "active", "setpoint_pps": 20000.0, "forwarded_pps": 19800.0,
            "offered_pps": 90000.0, "cap_percent": 12.0, "original_cap_percent": None, **kw}


def early_column(table: str) -> str:
    head, _, line = table.splitlines()
    at = head.index("EARLY")
    return line[at - 2 : at + len("EARLY")].strip()


def test_the_table_shows_the_limit_in_place_on_without_a_limit_and_off():
    limited = {"on": True, "limit_pps": 26400.0, "limit_bytes_per_s": 2112000, "interfaces": ["vif1.0", "vif1.1"]}
    assert "EARLY" in format_table([row(early_drop=limited)]).splitlines()[0]
    assert early_column(format_table([row(early_drop=limited)])) == "26.4"
    assert early_column(format_table([row(early_drop={"on": True, "limit_pps": None, "interfaces": []})])) == "on"
    assert early_column(format_table([row(early_drop={"on": False, "limit_pps": None, "interfaces": []})])) == "-"
    assert early_column(format_table([row()])) == "-"  # a daemon that does not say: shown as off


def test_the_list_reply_carries_each_vrs_early_drop(tmp_path):
    cfg = loads_config(daemon_toml(tmp_path, 'backend = "sim"\ncontrol_period_s = 1.0\n',
                                   '[[sim.vr]]\nname = "vr1"\ninitial_cap_percent = 80.0\n'
                                   '[[sim.vr]]\nname = "vr2"\ninitial_cap_percent = 80.0\n'))
    clock = Clock()
    svc = DaemonService(cfg, SimHost.from_config(cfg, clock=clock), clock=clock, wall_clock=lambda: 0.0)
    svc.open()
    try:
        def ask(**doc):
            return json.loads(svc.handle_message([json.dumps({"v": 1, **doc}).encode()]))

        assert ask(cmd="activate", vr="vr1", setpoint_pps=30000, early_drop=True)["ok"]
        assert ask(cmd="activate", vr="vr2", setpoint_pps=30000, early_drop=False)["ok"]
        vrs = {v["vr"]: v for v in ask(cmd="list")["result"]["vrs"]}
        assert vrs["vr1"]["early_drop"] == ask(cmd="status", vr="vr1")["result"]["early_drop"]
        assert vrs["vr1"]["early_drop"]["on"] is True and vrs["vr2"]["early_drop"]["on"] is False
        assert early_column(format_table([vrs["vr1"]])) == "on"
    finally:
        svc.close()


def test_the_status_table_says_a_vr_was_turned_off_and_why():
    from xtc.daemon.ctl import format_table

    row = {"vr": "vr3", "state": "paused", "present": False, "setpoint_pps": 1000.0, "forwarded_pps": None,
           "offered_pps": None, "cap_percent": 5.0, "original_cap_percent": None,
           "vr_off": {"reason": "floods its neighbours", "since_unix_s": 1.0}}
    text = format_table([row])
    assert "turned off: floods its neighbours" in text and "VR missing" not in text
