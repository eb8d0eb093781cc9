"""A sample message decoded straight into columns (:mod:`xtc.policer.rows`): the same messages accepted, with
the same values, as the per-VR validator (:func:`~xtc.policer.samples.parse_samples`), on seeded random
messages and on every mutation of them the hostile-peer tests try; pure, no sockets."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from fakes.sample_rows import changing_rows

from xtc.daemon import api
from xtc.policer.link import DEFAULT_MAX_REPLY_BYTES, BadReply
from xtc.policer.rows import SampleRows, decode_rows
from xtc.policer.samples import parse_newer, parse_samples

FIELDS = list(api.SAMPLE_FIELDS)
BIG_INT = int("1" + "0" * 400)  # an integer JSON number beyond a float


def _row(rng: random.Random, i: int) -> list[Any]:
    num = lambda: rng.choice([None, 0, 7, rng.uniform(0, 1e6), float(rng.randrange(10**6))])
    return [f"vr{i}.{rng.randrange(100)}", rng.choice(["inactive", "active", "paused"]),
            rng.choice([True, False, None]), num(), num(), num(), num(), num(),
            rng.choice([None, "EPERM"]), rng.choice([None, "cap_max", "cap_min", "cap_slack"])]


def _doc(rng: random.Random, n: int) -> dict[str, Any]:
    return {"schema": api.SAMPLES_SCHEMA, "t_unix_s": 1.0, "period_s": 1.0, "fields": list(FIELDS),
            "vrs": [_row(rng, i) for i in range(n)]}


BAD_VALUES = [True, "1", [1], {"a": 1}, -1e999, 1e999, BIG_INT, "bogus", "bad name!", "a\nb", "", "x" * 300, 3.5, None]


def _mutations(rng: random.Random, doc: dict[str, Any]) -> list[Any]:
    """Messages one change away from ``doc``: a value replaced in one row, a row cut, repeated or not a
    list, a member of the document changed or missing."""
    out: list[Any] = []
    rows = doc["vrs"]
    for _ in range(12):
        if not rows:
            break
        d = json.loads(json.dumps(doc))
        r = rng.randrange(len(rows))
        d["vrs"][r][rng.randrange(len(FIELDS))] = rng.choice(BAD_VALUES)
        out.append(d)
    if rows:
        for change in (lambda d: d["vrs"].append(d["vrs"][0]), lambda d: d["vrs"][0].pop(),
                       lambda d: d["vrs"].__setitem__(0, "row"), lambda d: d["vrs"][0].append(1)):
            d = json.loads(json.dumps(doc))
            change(d)
            out.append(d)
    for key, val in (("schema", "xtc-samples/1"), ("schema", "xtc-samples/9"), ("period_s", 0), ("period_s", True),
                     ("period_s", BIG_INT), ("fields", [*FIELDS, "vr"]), ("fields", FIELDS[:3]), ("fields", "vr"),
                     ("vrs", {}), ("fields", [*FIELDS, 5]), ("period_s", None)):
        d = json.loads(json.dumps(doc))
        d[key] = val
        out.append(d)
    return out


def _same(frames: list[bytes], max_vrs: int = 32) -> str:
    """decode_rows agrees with parse_samples on ``frames``: 'ok' (both take it, the same VRs), 'bad' (both
    refuse it: the fast path says None) or 'slow' (only the per-VR path takes it)."""
    try:
        want = parse_samples(frames, max_vrs)
    except BadReply:
        want = None
    got = decode_rows(frames, max_vrs, DEFAULT_MAX_REPLY_BYTES)
    if got is None:
        return "bad" if want is None else "slow"
    assert want is not None, f"the fast path took a message the validator refuses: {frames[1][:300]!r}"
    assert got == want and got.dicts() == want
    for k in ("setpoint_pps", "forwarded_pps", "offered_pps", "cap_percent"):  # floats, as parse_samples gives
        assert all(x is None or type(x) is float for x in getattr(got, k))
    return "ok"


def test_the_columns_are_the_validators_rows_on_random_messages_and_their_mutations() -> None:
    rng = random.Random(50)
    seen = {"ok": 0, "bad": 0, "slow": 0}
    for _ in range(300):
        doc = _doc(rng, rng.choice([0, 1, 2, 16, 33]))
        seen[_same([api.SAMPLES_TOPIC, json.dumps(doc).encode()])] += 1
        for d in _mutations(rng, doc):
            seen[_same([api.SAMPLES_TOPIC, json.dumps(d).encode()])] += 1
    # Both paths saw many of each; only the older format (xtc-samples/1) goes the per-VR way when valid.
    assert seen["ok"] > 300 and seen["bad"] > 1000, seen
    assert seen["slow"] <= 300, seen


def test_a_name_holding_the_separator_is_refused() -> None:
    doc = _doc(random.Random(1), 2)
    doc["vrs"][1][0] = "a\nb"
    assert decode_rows([api.SAMPLES_TOPIC, json.dumps(doc).encode()], 8, DEFAULT_MAX_REPLY_BYTES) is None


def test_an_integer_beyond_a_float_is_a_bad_message_not_a_crash() -> None:
    """A hostile daemon's 400-digit integer: one clear BadReply (it raised OverflowError out of
    parse_samples before, which ended the sample streams' thread)."""
    row = ["vr0", "active", True, 1000.0, BIG_INT, 1200.0, 1.5, None, None, None]
    for doc in ({"schema": api.SAMPLES_SCHEMA, "t_unix_s": 1.0, "period_s": 1.0, "fields": FIELDS, "vrs": [row]},
                {"schema": api.SAMPLES_SCHEMA, "t_unix_s": 1.0, "period_s": BIG_INT, "fields": FIELDS, "vrs": []}):
        frames = [api.SAMPLES_TOPIC, json.dumps(doc).encode()]
        with pytest.raises(BadReply):
            parse_samples(frames, 8)
        with pytest.raises(BadReply):
            parse_newer(frames, None, 8)


def test_parse_newer_gives_the_columns_and_the_same_list_for_a_message_equal_but_for_its_time() -> None:
    rng = random.Random(7)
    rows = [_row(rng, i) for i in range(16)]
    m1 = api.samples_message(1763850001.0, 1.0, rows)
    m2 = api.samples_message(1763850002.0, 1.0, rows)
    vrs1, last = parse_newer(m1, None, 64)
    assert isinstance(vrs1, SampleRows) and vrs1 == parse_samples(m1, 64)
    vrs2, _ = parse_newer(m2, last, 64)
    assert vrs2 is vrs1
    assert SampleRows.from_dicts(parse_samples(m1, 64)) == vrs1
    assert vrs1.names == tuple(r[0] for r in rows)


def test_a_sample_recorded_from_its_columns_is_recorded_as_from_its_rows(tmp_path: Any, monkeypatch: Any) -> None:
    """The store writes, keeps live and audits the same from a sample's columns as from the same VRs as
    dictionaries (a 'list' reply's shape), through appearances, changes and a VR gone; a sample whose
    measurements only moved goes the columns' short way."""
    import xtc.policer.store as store_mod
    from xtc.policer.store import ExchangeOutcome, Store

    short = []
    moved = store_mod._measurements_moved
    monkeypatch.setattr(store_mod, "_measurements_moved", lambda rows, c, *more: short.append(moved(rows, c, *more))
                        or short[-1])

    rng = random.Random(3)
    stores = [Store(f"sqlite:///{tmp_path}/{k}.db", clock=lambda: 1700000000.0) for k in ("cols", "dicts")]
    for s in stores:
        s.add_router("r1", "tcp://127.0.0.1:1", 1e6, "auto", None, "test")
    for _, rows in changing_rows([_row(rng, i) for i in range(16)]):
        frames = [api.SAMPLES_TOPIC, json.dumps({"schema": api.SAMPLES_SCHEMA, "t_unix_s": 1.0, "period_s": 1.0,
                                                 "fields": FIELDS, "vrs": rows}).encode()]
        cols, _ = parse_newer(frames, None, 64)
        assert isinstance(cols, SampleRows)
        for s, vrs in zip(stores, (cols, parse_samples(frames, 64))):
            s.record_outcomes([ExchangeOutcome("r1", "reachable", None, vrs=vrs)])
            s.snapshot()
        # the rows the engine plans from, kept between measurements (read once, then following them)
        kept = [s.router_states(["r1"])["r1"][1] for s in stores]
        assert kept[0] == kept[1]
    a, b = ([{k: v for k, v in vr.items()} for vr in s.list_vrs("r1")] for s in stores)
    assert a == b and len(a) == 16
    assert stores[0]._recorded["r1"][1] is stores[0]._states["r1"][1]  # the last one went the columns' way
    assert [x["kind"] for x in stores[0].list_actions("r1")] == [x["kind"] for x in stores[1].list_actions("r1")]
    assert stores[0].live.vrs("r1") == stores[1].live.vrs("r1")
    assert sum(x is not None for x in short) == 4, short  # steps 1, 3, 5 and 6; not 2 (a VR gone) nor 4 (a state)


def test_the_columns_are_the_validators_rows_on_messages_as_a_daemon_writes_them() -> None:
    """The same agreement on bodies written as a daemon writes them (orjson, compact: what the fast path
    decodes with orjson), their mutations, and such bodies with a member written twice (which the strict
    reading refuses and orjson alone would take, the last one winning)."""
    rng = random.Random(51)
    seen = {"ok": 0, "bad": 0, "slow": 0}
    for _ in range(200):
        doc = _doc(rng, rng.choice([0, 1, 2, 16, 33]))
        body = api.encode(doc)
        seen[_same([api.SAMPLES_TOPIC, body])] += 1
        for d in _mutations(rng, doc):
            seen[_same([api.SAMPLES_TOPIC, api.encode(d)])] += 1
        for key in ("schema", "period_s", "fields", "vrs", "t_unix_s"):
            twice = body[:-1] + b"," + api.encode({key: doc[key]})[1:]
            assert _same([api.SAMPLES_TOPIC, twice]) == "bad", f"{key} twice taken"
            seen["bad"] += 1
    assert seen["ok"] > 200 and seen["bad"] > 1500, seen
    assert seen["slow"] <= 200, seen
