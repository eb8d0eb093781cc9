"""The engine's live measurements in numpy arrays (xtc.policer.live.LiveTable): what goes in comes out,
through new blocks, garbage and compaction, against a plain dict as the model."""

from __future__ import annotations

import math
import random

from xtc.policer.live import SATURATION_CODES, LiveTable


def _vrs(t: LiveTable, router: str) -> dict:
    return {n: t.vr(router, n) for n in t.names(router)}


def test_a_measurement_comes_back_with_missing_values_as_none() -> None:
    t = LiveTable(4)
    t.put("r1", 10.0, ["vr0", "vr1", "vr2"], [1.0, None, math.inf], [2.0, 3.0, math.nan], [None, 0.5, 1.5],
          ["cap_max", None, "bogus"])
    assert t.vr("r1", "vr0") == {"forwarded_pps": 1.0, "offered_pps": 2.0, "cap_percent": None, "saturated": "cap_max",
                                 "last_seen_unix_s": 10.0}
    assert t.vr("r1", "vr1") == {"forwarded_pps": None, "offered_pps": 3.0, "cap_percent": 0.5, "saturated": None,
                                 "last_seen_unix_s": 10.0}
    assert t.vr("r1", "vr2")["forwarded_pps"] is None and t.vr("r1", "vr2")["offered_pps"] is None
    assert t.vr("r1", "vr2")["saturated"] is None  # not a value the daemon gives: not stored as one
    assert t.vr("r1", "nope") is None and t.vr("r2", "vr0") is None
    assert t.vrs("r1") == {"vr0": (1.0, 2.0, "cap_max"), "vr1": (None, 3.0, None), "vr2": (None, None, None)}
    assert t.touch("r1", 11.0) and t.seen_unix_s("r1") == 11.0 and t.vr("r1", "vr0")["forwarded_pps"] == 1.0
    assert not t.touch("r2", 11.0)
    # A validated sample's columns (finite numbers or None, tuples): the same flags again, and other flags over
    # the same VRs, come back as they went in.
    for sat in (("cap_min", None, "cap_slack"), ("cap_min", None, "cap_slack"), (None, "cap_max", None)):
        t.put("r1", 12.0, ("vr0", "vr1", "vr2"), (4.0, None, 6.0), (5.0, 5.5, None), (None, 1.0, 2.0), sat, finite=True)
        assert t.vrs("r1") == {"vr0": (4.0, 5.0, sat[0]), "vr1": (None, 5.5, sat[1]), "vr2": (6.0, None, sat[2])}
        assert t.vr("r1", "vr1")["cap_percent"] == 1.0 and t.vr("r1", "vr0")["cap_percent"] is None
    t.put("r3", 12.0, (), (), (), (), (), finite=True)
    assert t.vrs("r3") == {} and t.seen_unix_s("r3") == 12.0
    # The key of a router's live values: the same while the plan's measurements (forwarded, offered, saturated)
    # and the VRs are the same, whoever writes them; another when one of them moves.
    k0 = t.key("r1")
    t.put("r1", 13.0, ["vr0", "vr1", "vr2"], [4.0, None, 6.0], [5.0, 5.5, None], [7.0, 1.0, 2.0], [None, "cap_max", None])
    assert t.key("r1") == k0 and t.vr("r1", "vr0")["cap_percent"] == 7.0  # (a cap alone is not a plan input)
    assert t.touch("r1", 14.0) and t.key("r1") == k0
    t.put("r1", 15.0, ("vr0", "vr1", "vr2"), (4.0, None, 6.0), (5.0, 5.5, None), (None, 1.0, 2.0),
          (None, "cap_max", None), finite=True, moved=False)
    assert t.key("r1") == k0
    for change in ([4.5, None, 6.0], [5.0, 5.5, None]), ([4.0, None, 6.0], [5.0, 5.5, 1.0]):
        t.put("r1", 16.0, ["vr0", "vr1", "vr2"], *change, [None] * 3, [None, "cap_max", None])
        assert t.key("r1") != k0
        k0 = t.key("r1")
    t.put("r1", 16.0, ["vr0", "vr1", "vr2"], [4.0, None, 6.0], [5.0, 5.5, 1.0], [None] * 3, [None, None, None])
    assert t.key("r1") != k0
    k0 = t.key("r1")
    t.put("r1", 16.0, ["vr1", "vr0", "vr2"], [4.0, None, 6.0], [5.0, 5.5, 1.0], [None] * 3, [None, None, None])
    assert t.key("r1") != k0 and t.key("r1")[0] == ("vr1", "vr0", "vr2")
    t.drop("r1")
    t.put("r1", 16.0, ["vr1", "vr0", "vr2"], [4.0, None, 6.0], [5.0, 5.5, 1.0], [None] * 3, [None, None, None])
    assert t.key("r1") != k0 and t.key("r9") is None
    # A router's demand at its last plan: kept until the next, gone with the router.
    assert t.demand_pps("r1") is None
    t.set_demand("r1", 99.5)
    assert t.demand_pps("r1") == 99.5
    t.set_demand("r1", math.nan)
    assert t.demand_pps("r1") is None
    t.set_demand("r1", 7.0)
    t.drop("r1")
    assert t.demand_pps("r1") is None


def test_many_routers_changing_their_vr_sets_keep_their_values() -> None:
    rng = random.Random(7)
    t = LiveTable(8)
    model: dict[str, tuple[float, dict]] = {}
    for step in range(3000):
        r = f"r{rng.randrange(60)}"
        if rng.random() < 0.1:
            t.drop(r)
            model.pop(r, None)
            continue
        names = [f"vr{j}" for j in rng.sample(range(40), rng.randrange(0, 20))]
        vals = [(rng.choice([None, rng.uniform(0, 1e6)]), rng.uniform(0, 1e6), rng.choice([None, 1.5]),
                 rng.choice(SATURATION_CODES)) for _ in names]
        t.put(r, float(step), names, [v[0] for v in vals], [v[1] for v in vals], [v[2] for v in vals],
              [v[3] for v in vals])
        model[r] = (float(step), {n: v for n, v in zip(names, vals)})
        assert t.rows <= t._end <= len(t.forwarded_pps)
    assert sorted(t.routers()) == sorted(model)
    assert t.rows == sum(len(v[1]) for v in model.values())
    for r, (seen, vrs) in model.items():
        assert t.seen_unix_s(r) == seen
        assert _vrs(t, r) == {n: {"forwarded_pps": v[0], "offered_pps": v[1], "cap_percent": v[2], "saturated": v[3],
                                  "last_seen_unix_s": seen} for n, v in vrs.items()}
    # The snapshot's columns: every VR of the routers asked for, in their order, the others left out.
    asked = sorted(model)[:5] + ["not-held"]
    heads, cols = t.columns(asked)
    assert heads == [(model[r][0], r) for r in asked if r in model]
    rows = list(zip(*cols))
    assert rows == [(v[0], v[1], v[2], v[3], model[r][0], r, n) for r in asked if r in model
                    for n, v in model[r][1].items()]
    assert t.columns([]) == ([], [[], [], [], [], [], [], []])
