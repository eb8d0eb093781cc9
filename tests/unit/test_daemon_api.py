"""Manager API schema: request validation, replies, the committed JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtc.daemon import api
from xtc.daemon.api import ApiError, parse_request

MAX = 4096
MAXSP = 1e7
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "manager-api.schema.json"


def parse(doc, max_bytes=MAX):
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return parse_request(raw, max_bytes, MAXSP)


def test_good_requests():
    r = parse({"v": 1, "cmd": "activate", "vr": "vr1", "setpoint_pps": 20000, "id": 7})
    assert (r.cmd, r.vr, r.setpoint_pps, r.id) == ("activate", "vr1", 20000.0, 7)
    assert parse({"v": 1, "cmd": "list"}).vr is None
    assert parse({"v": 1, "cmd": "setpoint", "vr": "x", "setpoint_pps": 1.5}).setpoint_pps == 1.5


@pytest.mark.parametrize(
    "raw, code, words",
    [
        (b"{not json", "bad_json", "JSON"),
        (b"\xff\xfe", "bad_json", "UTF-8"),
        (b"[1, 2]", "bad_json", "object"),
        (b'{"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": NaN}', "bad_json", "NaN"),
        (b'{"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": Infinity}', "bad_json", "Infinity"),
        ({"cmd": "list"}, "bad_version", "missing 'v'"),
        ({"v": 2, "cmd": "list"}, "bad_version", "must be 1"),
        ({"v": True, "cmd": "list"}, "bad_version", "must be 1"),
        ({"v": 1}, "unknown_command", "missing 'cmd'"),
        ({"v": 1, "cmd": "reboot"}, "unknown_command", "'reboot'"),
        ({"v": 1, "cmd": 3}, "unknown_command", "3"),
        ({"v": 1, "cmd": "activate", "vr": "a"}, "bad_field", "missing field 'setpoint_pps'"),
        ({"v": 1, "cmd": "pause"}, "bad_field", "missing field 'vr'"),
        ({"v": 1, "cmd": "pause", "vr": 5}, "bad_field", "'vr' must be a string"),
        ({"v": 1, "cmd": "pause", "vr": ""}, "bad_field", "'vr' must be 1..64"),
        ({"v": 1, "cmd": "pause", "vr": "x" * 65}, "bad_field", "'vr' must be 1..64"),
        ({"v": 1, "cmd": "pause", "vr": "a", "force": True}, "bad_field", "unknown field 'force'"),
        ({"v": 1, "cmd": "list", "vr": "a"}, "bad_field", "unknown field 'vr'"),
        ({"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": -5}, "bad_field", "at least 1 packet/s"),
        ({"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": 0}, "bad_field", "at least 1 packet/s"),
        ({"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": 1e9}, "bad_field", "at most"),
        ({"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": 10**400}, "bad_field", "at most"),
        ({"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": "20000"}, "bad_field", "must be a number"),
        ({"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": True}, "bad_field", "must be a number"),
        ({"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": None}, "bad_field", "must be a number"),
        ({"v": 1, "cmd": "list", "id": [1]}, "bad_field", "'id'"),
        ({"v": 1, "cmd": "list", "id": "x" * 200}, "bad_field", "'id'"),
        # Loose semantics the adversarial probe found (issue 13, low 13).
        # The last key used to win: the request said two things.
        (b'{"v": 1, "cmd": "setpoint", "vr": "vr1", "setpoint_pps": 100, "setpoint_pps": 9e7}', "bad_json",
         "duplicate key 'setpoint_pps'"),
        (b'{"v": 1, "cmd": "list", "cmd": "ping"}', "bad_json", "duplicate key 'cmd'"),
        (b'{"v": 1, "cmd": "status", "vr": "a", "x": {"k": 1, "k": 2}}', "bad_json", "duplicate key 'k'"),
        # The version is the integer 1, not a float equal to it.
        (b'{"v": 1.0, "cmd": "list"}', "bad_version", "'v' must be 1, got 1.0"),
        (b'{"v": true, "cmd": "list"}', "bad_version", "got True"),
        # A setpoint below one packet per second is no setpoint.
        (b'{"v": 1, "cmd": "activate", "vr": "a", "setpoint_pps": 5e-324}', "bad_field", "at least 1 packet/s"),
        (b'{"v": 1, "cmd": "setpoint", "vr": "a", "setpoint_pps": 0.999}', "bad_field", "at least 1 packet/s"),
    ],
)
def test_bad_requests(raw, code, words):
    with pytest.raises(ApiError) as ei:
        parse(raw)
    assert ei.value.code == code
    assert words in ei.value.message


def test_oversized_message_refused_before_parsing():
    doc = {"v": 1, "cmd": "list", "id": "x"}
    raw = json.dumps(doc).encode() + b" " * MAX
    with pytest.raises(ApiError) as ei:
        parse_request(raw, MAX, MAXSP)
    assert ei.value.code == "too_large"
    assert str(len(raw)) in ei.value.message


def test_deeply_nested_json_is_a_clean_error():
    with pytest.raises(ApiError) as ei:
        parse_request(b"[" * 100000, 10**6, MAXSP)
    assert ei.value.code == "bad_json"


def test_error_reply_echoes_the_id():
    try:
        parse({"v": 1, "cmd": "nope", "id": "abc"})
    except ApiError as e:
        rep = json.loads(api.error_reply(e))
    assert rep == {"v": 1, "id": "abc", "ok": False, "error": {"code": "unknown_command", "message": rep["error"]["message"]}}


def test_encode_writes_non_finite_as_null():
    assert json.loads(api.encode({"a": float("nan"), "b": [float("inf"), 1.0]})) == {"a": None, "b": [None, 1.0]}


def test_samples_message_round_trip():
    rows = [["vr7", "active", True, 2e4, 5.0, None, 12.5, None, None, "cap_min"],
            ["vr8", "inactive", False, None, None, None, None, 40.0, "boom", None]]
    topic, body = api.samples_message(100.5, 1.0, rows)
    assert topic == b"samples"
    doc = json.loads(body)
    assert doc["schema"] == "xtc-samples/2" and doc["fields"] == list(api.SAMPLE_FIELDS) and doc["vrs"] == rows
    got = api.decode_samples(body)
    assert got[0] == {"vr": "vr7", "state": "active", "present": True, "setpoint_pps": 2e4, "forwarded_pps": 5.0,
                      "offered_pps": None, "cap_percent": 12.5, "original_cap_percent": None, "actuation_error": None,
                      "saturated": "cap_min", "t_unix_s": 100.5, "period_s": 1.0}
    assert got[1]["actuation_error"] == "boom" and got[1]["original_cap_percent"] == 40.0


def test_decode_samples_refuses_another_format():
    with pytest.raises(ValueError, match="xtc-samples/2"):
        api.decode_samples(b'{"v": 1, "vr": "vr7"}')


def test_an_older_daemons_samples_and_instances_read_with_the_forwarded_rate_named_once():
    # xtc-samples/1 (and an instance object) named the forwarded rate measured_pps: read for one version.
    fields = ["vr", "state", "present", "setpoint_pps", "measured_pps", "offered_pps", "cap_percent",
              "original_cap_percent", "actuation_error", "saturated"]
    body = json.dumps({"schema": "xtc-samples/1", "t_unix_s": 1.0, "period_s": 1.0, "fields": fields,
                       "vrs": [["vr7", "active", True, 2e4, 5.0, 9.0, 12.5, None, None, None]]})
    (got,) = api.decode_samples(body)
    assert got["forwarded_pps"] == 5.0 and "measured_pps" not in got
    old = {"vr": "vr7", "state": "active", "setpoint_pps": 2e4, "measured_pps": 5.0, "offered_pps": 9.0,
           "cap_percent": 12.5, "original_cap_percent": None}
    inst = api.Instance.model_validate(old)
    assert inst.forwarded_pps == 5.0 and "measured_pps" not in inst.model_dump()
    assert api.Instance.model_validate({**old, "forwarded_pps": 6.0, "measured_pps": None}).forwarded_pps == 6.0


def test_committed_schema_matches_code():
    assert json.loads(SCHEMA_FILE.read_text()) == api.json_schema()


def test_schema_lists_every_command_and_error():
    s = api.json_schema()
    titles = [v["title"] for v in s["$defs"]["request"]["oneOf"]]
    assert titles == list(api.COMMANDS)
    assert s["$defs"]["ReplyError"]["properties"]["code"]["enum"] == list(api.ERROR_CODES)
    assert [v["title"] for v in s["$defs"]["reply"]["oneOf"]] == ["OkReply", "ErrorReply"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=10,
)
_field_values = st.one_of(_json, st.sampled_from(["vr1", "", "x" * 70]), st.floats(), st.integers(-10**30, 10**30))
_requests = st.fixed_dictionaries(
    {},
    optional={
        "v": st.one_of(st.just(1), _json),
        "cmd": st.one_of(st.sampled_from(list(api.COMMANDS)), _json),
        "vr": _field_values,
        "setpoint_pps": _field_values,
        "id": _field_values,
        "extra": _json,
    },
)


@settings(max_examples=150, deadline=None)
@given(_requests)
def test_fuzz_parse_only_raises_api_error(doc):
    raw = json.dumps(doc).encode()
    try:
        r = parse_request(raw, MAX, MAXSP)
    except ApiError as e:
        assert e.code in api.ERROR_CODES
        json.loads(api.error_reply(e))
    else:
        assert r.cmd in api.COMMANDS
        if r.setpoint_pps is not None:
            assert 0 < r.setpoint_pps <= MAXSP


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_bytes(raw):
    try:
        parse_request(raw, MAX, MAXSP)
    except ApiError as e:
        assert e.code in api.ERROR_CODES


def test_encode_falls_back_for_what_orjson_refuses() -> None:
    """Integers beyond 64 bits and numpy scalars are written as json.dumps would."""
    import numpy as np

    assert api.encode({"a": 2**70, "b": [float("nan")]}) == b'{"a":1180591620717411303424,"b":[null]}'
    assert api.encode({"x": np.float64(2.5), "n": np.int64(3), 1: "k"}) == b'{"x":2.5,"n":3,"1":"k"}'
