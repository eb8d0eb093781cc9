"""The compact samples format ``xtc-samples/3`` (issue 50): the daemon's encoder
(:func:`xtc.daemon.api.samples_message_v3`) and the policer's decoder (:func:`xtc.policer.rows.decode_v3`).
The same VRs, with the same values, as the JSON format gives them (:func:`~xtc.policer.samples.parse_samples`
of the /2 message of the same rows), on seeded random fleets; every bad message refused with one
:class:`~xtc.policer.link.BadReply` (never another exception), whatever its bytes.  Pure, no sockets."""

from __future__ import annotations

import json
import math
import random
import struct
from typing import Any

import numpy as np
import pytest
from fakes.engine_run import json_samples, run_engine
from fakes.sample_rows import changing_rows

from xtc.daemon import api
from xtc.policer.link import BadReply
from xtc.policer.rows import SampleRows, V3Memory, decode_v3
from xtc.policer.samples import parse_samples

MAX_BYTES = 1 << 20
KEYS = ("vr", "state", "present", "setpoint_pps", "forwarded_pps", "offered_pps", "cap_percent", "saturated")


def _row(rng: random.Random, i: int) -> list[Any]:
    num = lambda: rng.choice([None, 0, 7, rng.uniform(0, 1e6), float(rng.randrange(10**6)), 1e300])
    return [f"vr{i}.{rng.randrange(100)}", rng.choice(["inactive", "active", "paused"]),
            rng.choice([True, False, None]), num(), num(), num(), num(), num(),
            rng.choice([None, None, "EPERM"]), rng.choice([None, "cap_max", "cap_min", "cap_slack"])]


def _rows(rng: random.Random, n: int) -> list[list[Any]]:
    return sorted((_row(rng, i) for i in range(n)), key=lambda r: r[0])


def _as_v2(frames: list[bytes]) -> list[dict[str, Any]]:
    vrs, _ = decode_v3(frames, 4096, MAX_BYTES)
    assert isinstance(vrs, SampleRows)
    return [{k: v[k] for k in KEYS} for v in vrs]


def test_the_compact_format_gives_the_json_formats_values_on_random_fleets() -> None:
    rng = random.Random(50)
    for _ in range(300):
        rows = _rows(rng, rng.choice([0, 1, 2, 16, 33]))
        v2 = parse_samples(api.samples_message(1.5, 1.0, rows), 4096)
        m3 = api.samples_message_v3(1.5, 1.0, rows)
        got = _as_v2(m3)
        assert got == v2
        for k in ("setpoint_pps", "forwarded_pps", "offered_pps", "cap_percent"):
            assert all(v[k] is None or type(v[k]) is float for v in got)
        vrs, _ = decode_v3(m3, 4096, MAX_BYTES)  # the live table's columns as arrays: the same values
        f, o, c, sat = vrs.arrays or (np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0, np.uint8))
        for arr, col in ((f, vrs.forwarded_pps), (o, vrs.offered_pps), (c, vrs.cap_percent)):
            assert arr.dtype == float and [None if math.isnan(x) else x for x in arr.tolist()] == list(col)
        assert [api.V3_SATURATED[k] for k in sat.tolist()] == list(vrs.saturated)
        head = json.loads(m3[1])
        errors = {r[0]: r[8] for r in rows if r[8] is not None}
        assert head.get("actuation_errors", {}) == errors and head["vrs"] == len(rows)
        assert len(m3) == 3 and len(m3[2]) == 44 * len(rows) + sum(len(r[0]) + 1 for r in rows)


def test_a_non_finite_value_from_the_daemon_is_sent_missing_as_json_sends_it_null() -> None:
    rows = [["vr1", "active", True, 1000.0, math.nan, math.inf, 5.0, None, None, None]]
    got = _as_v2(api.samples_message_v3(1.0, 1.0, rows))
    assert got[0]["forwarded_pps"] is None and got[0]["offered_pps"] is None and got[0]["setpoint_pps"] == 1000.0


def test_unchanged_names_and_codes_are_not_decoded_again_and_a_change_is() -> None:
    rng = random.Random(3)
    rows = _rows(rng, 16)
    first, mem = decode_v3(api.samples_message_v3(1.0, 1.0, rows), 64, MAX_BYTES)
    same, mem = decode_v3(api.samples_message_v3(1.5, 1.0, rows), 64, MAX_BYTES, mem)
    assert same is first  # the same message but for its time: the very same VRs
    for r in rows:
        if r[4] is not None:
            r[4] = r[4] * 1.05  # the rates move, nothing else
    again, mem2 = decode_v3(api.samples_message_v3(2.0, 1.0, rows), 64, MAX_BYTES, mem)
    assert again.names is first.names and again.state is first.state and mem2.codes is mem.codes
    assert again.forwarded_pps != first.forwarded_pps
    rows[0][1] = "paused" if rows[0][1] != "paused" else "active"
    rows[1][0] = rows[1][0] + "x"
    m = api.samples_message_v3(3.0, 1.0, rows)
    third, _ = decode_v3(m, 64, MAX_BYTES, mem2)
    assert [{k: v[k] for k in KEYS} for v in third] == [{k: v[k] for k in KEYS} for v in parse_samples(
        api.samples_message(3.0, 1.0, rows), 64)]


def _good(n: int = 3) -> list[bytes]:
    rows = [[f"vr{i}", "active", True, 1000.0, 900.0, 1200.0, 5.0, None, None, None] for i in range(n)]
    return api.samples_message_v3(1.0, 1.0, rows)


def _header(**change: Any) -> bytes:
    doc = {"schema": api.SAMPLES_SCHEMA_V3, "t_unix_s": 1.0, "period_s": 1.0, "layout": api.V3_LAYOUT, "vrs": 3}
    doc.update(change)
    return json.dumps({k: v for k, v in doc.items() if v is not _GONE}).encode()


_GONE = object()


def _nums(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def _with(i: int, frame: bytes) -> list[bytes]:
    """The good message with one part replaced: 1 the header, 2 the names, 3 the codes, 4 the numbers."""
    m = _good()
    n = json.loads(m[1])["vrs"]
    nums, codes, names = m[2][:40 * n], m[2][40 * n:44 * n], m[2][44 * n:]
    parts = {1: m[1], 2: names, 3: codes, 4: nums}
    parts[i] = frame
    return [m[0], parts[1], parts[4] + parts[3] + parts[2]]


def _part(i: int) -> bytes:
    """A part of the good message (as :func:`_with` numbers them)."""
    m = _good()
    return {1: m[1], 2: m[2][132:], 3: m[2][120:132], 4: m[2][:120]}[i]


BAD: list[tuple[str, list[bytes], str]] = [
    ("no frames", [], "0 frame(s)"),
    ("the /2 body in /3's place", [api.SAMPLES_TOPIC, b"{}"], "2 frame(s)"),
    ("a frame too many", [*_good(), b""], "4 frame(s)"),
    ("another topic", [b"sample", *_good()[1:]], "frame(s)"),
    ("header not JSON", _with(1, b"\xff{"), "not strict JSON"),
    ("header with NaN", _with(1, _header(t_unix_s=_GONE)[:-1] + b',"t_unix_s":NaN}'), "not strict JSON"),
    ("header with a key twice", _with(1, _header()[:-1] + b',"vrs":3}'), "duplicate key"),
    ("header a list", _with(1, b"[]"), "schema"),
    ("schema /2", _with(1, _header(schema=api.SAMPLES_SCHEMA)), "schema"),
    ("layout unknown", _with(1, _header(layout=2)), "layout"),
    ("layout a string", _with(1, _header(layout="1")), "layout"),
    ("layout missing", _with(1, _header(layout=_GONE)), "layout"),
    ("layout true", _with(1, _header(layout=True)), "layout"),
    ("VR count missing", _with(1, _header(vrs=_GONE)), "VRs"),
    ("VR count negative", _with(1, _header(vrs=-1)), "VRs"),
    ("VR count a float", _with(1, _header(vrs=3.0)), "VRs"),
    ("too many VRs", api.samples_message_v3(1.0, 1.0, [[f"v{i}", "active", True, 1.0, 1.0, 1.0, 1.0, None, None, None]
                                                      for i in range(9)]), "0 to 8"),
    ("period zero", _with(1, _header(period_s=0)), "period_s"),
    ("period negative", _with(1, _header(period_s=-1.0)), "period_s"),
    ("period a string", _with(1, _header(period_s="1")), "period_s"),
    ("period beyond a float", _with(1, _header(period_s=int("1" + "0" * 400))), "period_s"),
    ("no time", _with(1, _header(t_unix_s=_GONE)), "t_unix_s"),
    ("a huge header", _with(1, _header(pad="x" * 5000)), "bytes"),
    ("errors not an object", _with(1, _header(actuation_errors=["x"])), "actuation_errors"),
    ("an error not a string", _with(1, _header(actuation_errors={"vr0": 5})), "actuation_errors"),
    ("an error of a VR not listed", _with(1, _header(actuation_errors={"vr9": "x"})), "does not list"),
    ("VR count above the body", _with(1, _header(vrs=5)), "expected"),
    ("VR count one above the body", _with(1, _header(vrs=4)), "expected"),
    ("VR count one below the body", _with(1, _header(vrs=2)), "names"),
    ("codes cut", _with(3, _part(3)[:-1]), "code"),
    ("numbers cut", _with(4, _part(4)[:-8]), "expected"),
    ("numbers longer", _with(4, _part(4) + b"\0" * 8), "names"),
    ("a name missing", _with(2, b"vr0\nvr1\n"), "names"),
    ("names without the last newline", _with(2, b"vr0\nvr1\nvr2"), "names"),
    ("a bad name", _with(2, b"vr0\nvr 1\nvr2\n"), "names"),
    ("an empty name", _with(2, b"vr0\n\nvr2\n"), "names"),
    ("a name with NUL", _with(2, b"vr0\nv\x00\nvr2\n"), "names"),
    ("a name of 65 characters", _with(2, b"vr0\n" + b"v" * 65 + b"\nvr2\n"), "names"),
    ("names not UTF-8", _with(2, b"vr0\n\xff\nvr2\n"), "UTF-8"),
    ("a VR twice", _with(2, b"vr0\nvr1\nvr0\n"), "twice"),
    ("a state code unknown", _with(3, b"\x01\x01\x03" + _part(3)[3:]), "code"),
    ("a presence code unknown", _with(3, _part(3)[:3] + b"\x01\x02\x01" + _part(3)[6:]), "code"),
    ("a saturation code unknown", _with(3, _part(3)[:6] + b"\x00\x04\x00" + _part(3)[9:]), "code"),
    ("a missing bit unknown", _with(3, _part(3)[:9] + b"\x00\x20\x00"), "code"),
    ("a NaN rate", _with(4, _nums([1000.0] * 3 + [math.nan] + [900.0] * 11)), "NaN, infinite or negative"),
    ("an infinite rate", _with(4, _nums([1000.0] * 6 + [math.inf] + [900.0] * 8)), "NaN, infinite or negative"),
    ("a negative rate", _with(4, _nums([1000.0] * 4 + [-1.0] + [900.0] * 10)), "NaN, infinite or negative"),
    ("a negative infinity", _with(4, _nums([1000.0] * 14 + [-math.inf])), "NaN, infinite or negative"),
    ("a NaN where the value is missing", _with(4, _nums([900.0] * 14 + [math.nan])), "NaN, infinite or negative"),
]


@pytest.mark.parametrize(("what", "frames", "says"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_message_is_refused_with_the_reason(what: str, frames: list[bytes], says: str) -> None:
    decode_v3(_good(), 8, MAX_BYTES)  # (the good one is good)
    with pytest.raises(BadReply) as e:
        decode_v3(frames, 8, MAX_BYTES)
    assert says in str(e.value) and len(str(e.value)) < 400, (what, str(e.value))
    assert "\n" not in str(e.value) and "\x00" not in str(e.value)
    # with a router's memory of a good message too (the names or codes frames equal to its): refused the same
    _, mem = decode_v3(_good(), 8, MAX_BYTES)
    with pytest.raises(BadReply):
        decode_v3(frames, 8, MAX_BYTES, mem)


def test_a_message_larger_than_allowed_is_refused() -> None:
    m = _good()
    with pytest.raises(BadReply, match="bytes"):
        decode_v3(m, 8, sum(map(len, m[1:])) - 1)
    decode_v3(m, 8, sum(map(len, m[1:])))


def test_any_bytes_give_a_valid_message_or_one_bad_reply_never_another_error() -> None:
    """Random corruptions of every frame (bytes flipped, cut, added), with and without a router's memory:
    each either decodes to valid columns (known states and flags, finite numbers that are not negative)
    or is refused with :class:`BadReply`."""
    rng = random.Random(9)
    base = api.samples_message_v3(1.0, 1.0, _rows(rng, 16))
    _, mem = decode_v3(base, 64, MAX_BYTES)
    took = refused = 0
    for _ in range(3000):
        m = list(base)
        i = rng.randrange(1, 3)
        b = bytearray(m[i])
        for _ in range(rng.choice([1, 1, 2, 5])):
            op = rng.randrange(3)
            if op == 0 and b:
                b[rng.randrange(len(b))] = rng.randrange(256)
            elif op == 1 and b:
                del b[rng.randrange(len(b))]
            else:
                b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
        m[i] = bytes(b)
        try:
            vrs, _ = decode_v3(m, 64, MAX_BYTES, rng.choice([None, mem]))
        except BadReply:
            refused += 1
            continue
        took += 1
        assert set(vrs.state) <= {"inactive", "active", "paused"} and set(vrs.saturated) <= set(api.V3_SATURATED)
        assert all(type(p) is bool for p in vrs.present)
        for col in (vrs.setpoint_pps, vrs.forwarded_pps, vrs.offered_pps, vrs.cap_percent):
            assert all(x is None or (type(x) is float and math.isfinite(x) and x >= 0) for x in col)
        assert len(set(vrs.names)) == len(vrs.names) == len(vrs.state)
    assert took > 100 and refused > 1000, (took, refused)


def _decoded(frames: list[bytes], mem: V3Memory | None) -> Any:
    """The VRs as dictionaries, or the refusal's message."""
    try:
        vrs, _ = decode_v3(frames, 8, MAX_BYTES, mem)
    except BadReply as e:
        return str(e)
    return [{k: v[k] for k in KEYS} for v in vrs]


def test_a_message_with_the_last_ones_header_but_for_its_time_decodes_as_it_does_alone() -> None:
    """The header equal to the last valid one's but for its time is not decoded again: what the message
    gives, or the reason it is refused, is the same with the router's memory as without it."""
    rows = [[f"vr{i}", "active", True, 1000.0, 900.0, 1200.0, 5.0, None, None, None] for i in range(3)]
    rows[1][8] = "EPERM"  # an actuation error in the header, of vr1
    _, mem = decode_v3(api.samples_message_v3(1.0, 1.0, rows), 8, MAX_BYTES)
    assert mem.head_rest is not None  # the daemon's header: the pattern takes its time
    cases = {
        "rates moved": {4: 950.0, 5: 1250.5},
        "a rate -0.0 (not negative)": {4: -0.0},
        "a rate whose top byte is 0x7F, finite": {5: 2.0 ** 1023},
        "a NaN rate": {4: math.nan},
        "a negative rate": {5: -3.0},
    }
    for what, change in cases.items():
        changed = [list(r) for r in rows]
        for j, v in change.items():
            changed[2][j] = v
        frames = api.samples_message_v3(2.0 + len(what), 1.0, changed)
        if what.startswith(("a NaN", "a negative")):  # (the encoder writes what is not finite as missing)
            n = len(rows)
            nums = bytearray(frames[2][:40 * n])
            struct.pack_into("<d", nums, 8 * ((j - 3) * n + 2), v)
            frames = [frames[0], frames[1], bytes(nums) + frames[2][40 * n:]]
        alone, with_mem = _decoded(frames, None), _decoded(frames, mem)
        assert with_mem == alone, what
        assert isinstance(alone, str) == what.startswith(("a NaN", "a negative")), (what, alone)
    # The same header, but the VR its error names is gone: refused with the memory as without.
    renamed = [list(r) for r in rows]
    renamed[1][0] = "vr7"
    renamed[1][8] = None
    frames = api.samples_message_v3(9.0, 1.0, renamed)
    frames = [frames[0], api.samples_message_v3(9.0, 1.0, rows)[1], frames[2]]
    assert _decoded(frames, None) == _decoded(frames, mem)
    assert "does not list" in _decoded(frames, mem)


def test_memory_of_a_message_is_kept_only_from_a_valid_one() -> None:
    m = _good()
    _, mem = decode_v3(m, 8, MAX_BYTES)
    assert isinstance(mem, V3Memory) and mem.names == ("vr0", "vr1", "vr2")


def test_a_sample_recorded_from_the_compact_format_is_recorded_as_from_json(tmp_path: Any) -> None:
    """The store writes, keeps live (the arrays written as slices) and audits the same from an
    ``xtc-samples/3`` message as from the ``xtc-samples/2`` message of the same rows, through appearances,
    changes, rates that move, a VR gone, and snapshots."""
    from xtc.policer.rows import decode_rows
    from xtc.policer.store import ExchangeOutcome, Store

    rng = random.Random(3)
    stores = [Store(f"sqlite:///{tmp_path}/{k}.db", clock=lambda: 1700000000.0) for k in ("v3", "v2")]
    for s in stores:
        s.add_router("r1", "tcp://127.0.0.1:1", 1e6, "auto", None, "test")
    mem = None
    for step, rows in changing_rows(_rows(rng, 16)):
        v3, mem = decode_v3(api.samples_message_v3(1.0, 1.0, rows), 64, MAX_BYTES, mem)
        v2 = decode_rows(api.samples_message(1.0, 1.0, rows), 64, MAX_BYTES)
        assert v3.arrays is not None and v2 is not None and v2.arrays is None
        for s, vrs in zip(stores, (v3, v2)):
            s.record_outcomes([ExchangeOutcome("r1", "reachable", None, vrs=vrs)])
            if step % 2:
                s.snapshot()
        kept = [s.router_states(["r1"])["r1"][1] for s in stores]
        assert kept[0] == kept[1]
        assert stores[0].live.vrs("r1") == stores[1].live.vrs("r1")
        assert [stores[0].live.vr("r1", n) for n in v3.names] == [stores[1].live.vr("r1", n) for n in v3.names]
    for s in stores:
        s.snapshot()
    a, b = (s.list_vrs("r1") for s in stores)
    assert a == b and len(a) == 16
    assert [x["kind"] for x in stores[0].list_actions("r1")] == [x["kind"] for x in stores[1].list_actions("r1")]


def _compact_samples(rows: list[list[Any]], k: int, memory: Any) -> tuple[Any, Any]:
    """The rows as ``xtc-samples/3``, decoded as the link pool decodes them."""
    return decode_v3(api.samples_message_v3(1.7e9 + k, 1.0, rows), 64, MAX_BYTES, memory)


def test_an_engine_fed_the_compact_format_decides_sends_and_audits_what_one_fed_json_does(tmp_path: Any) -> None:
    """The same fleet's samples, as ``xtc-samples/3`` and as ``/2``: the same plans, commands (in the same
    order), rows, live measurements and audit log."""
    (a, eng_a, links_a), (b, eng_b, links_b) = (run_engine(tmp_path, tag, 40, decode, same_every=5)
                                                         for tag, decode in (("3", _compact_samples), ("2", json_samples)))
    assert eng_a.planned == eng_b.planned and eng_a.plans_skipped == eng_b.plans_skipped > 0
    assert eng_a.plans_quiet == eng_b.plans_quiet > 0
    assert len(links_a.sent) > 100 and links_a.sent == links_b.sent
    assert a.list_routers() == b.list_routers()
    assert a.list_vrs() == b.list_vrs()
    acts = a.list_actions(limit=100000)
    assert len(acts) > 100 and acts == b.list_actions(limit=100000)
    assert {x["kind"] for x in acts} >= {"activate", "setpoint", "punish"}
    for name in ("r00", "r07"):
        assert a.router_state(name) == b.router_state(name)
        assert a.live.vrs(name) == b.live.vrs(name)
