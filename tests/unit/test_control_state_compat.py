"""A daemon state file written by main before the law became one (ba88027) restores on today's code,
and the controllers go on from it as main's did (tests/unit/data/daemon-state-main-ba88027.json:
three VRs on lag plants, saved mid-transient with the lag probe under way, and the caps main's
controllers commanded in the ten periods after, written with main's code)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from xtc.control import make_controller
from xtc.daemon.core import DaemonCore, SetCap, VrReading
from xtc.models import PAPER_MODEL

DOC = json.loads((Path(__file__).parent / "data" / "daemon-state-main-ba88027.json").read_text())
KINDS = {"xtc": ("xtc", {}), "xtc-noprobe": ("xtc", {"lag_probe": False}), "pi": ("pi", {})}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_state_file_from_main_restores_and_goes_on_as_main_did(kind):
    k, kw = KINDS[kind]
    rec = DOC[kind]
    c = DaemonCore(lambda: make_controller(PAPER_MODEL, k, **kw))
    assert c.load_state(copy.deepcopy(rec["state"])) == []  # no "controller state not reused"
    assert json.loads(json.dumps(c.to_state())) == rec["state"]
    plants = copy.deepcopy(rec["plants"])
    c.set_present(frozenset(plants))
    written = []
    for t in range(4, 14):
        readings = {}
        for vr, st in plants.items():
            f = st["gain"] * c.instances[vr].cap_percent
            m = (1 - st["g"]) * f + st["g"] * st["x"]
            st["x"] = st["p"] * st["x"] + (1 - st["p"]) * f
            readings[vr] = VrReading(m, 100000.0)
        for a in c.period(float(t), readings):
            if isinstance(a, SetCap):
                c.cap_written(a.vr, a.cap_percent, float(t))
        written.append([t] + [repr(c.instances[vr].cap_percent) for vr in sorted(plants)])
    assert written == rec["caps_after"]
