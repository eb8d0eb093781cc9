"""Per-period publishing shortcuts: JSON encoding of finite documents, per-VR gauges read at scrape time."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from xtc.daemon.api import SAMPLE_FIELDS, _finite, encode
from xtc.daemon.metrics import DaemonMetrics

leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(), st.text(max_size=5))
docs = st.dictionaries(
    st.text(max_size=5),
    st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                                                st.dictionaries(st.text(max_size=3), inner, max_size=3)), max_leaves=8),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(docs)
def test_encode_is_the_finite_document(doc: dict) -> None:
    """What is written reads back as the document, with non-finite numbers as null."""
    out = encode(doc)
    assert json.loads(out) == _finite(doc)


def test_encode_writes_non_finite_as_null() -> None:
    assert encode({"a": math.nan, "b": [1.5, math.inf], "c": {"d": -math.inf}}) == b'{"a":null,"b":[1.5,null],"c":{"d":null}}'


def _value(m: DaemonMetrics, name: str, vr: str) -> float | None:
    v = m.registry.get_sample_value(name, {"vr": vr})
    return v


def _row(**kw) -> list:
    d = {"vr": "a", "state": "active", "present": True, "setpoint_pps": 1000.0, "measured_pps": 900.0,
         "offered_pps": None, "cap_percent": 20.0, "original_cap_percent": None, "actuation_error": None,
         "saturated": None, **kw}
    return [d[k] for k in SAMPLE_FIELDS]


def test_metrics_follow_vrs_that_come_go_and_come_back() -> None:
    m = DaemonMetrics()
    m.update([_row(), _row(vr="b", state="paused")])
    assert _value(m, "xtc_vr_measured_pps", "a") == 900.0 and _value(m, "xtc_vr_active", "b") == 0.5
    assert math.isnan(_value(m, "xtc_vr_offered_pps", "a"))  # type: ignore[arg-type]
    m.update([_row(measured_pps=950.0)])
    assert _value(m, "xtc_vr_measured_pps", "a") == 950.0 and _value(m, "xtc_vr_cap_percent", "b") is None
    m.update([_row(vr="b", cap_percent=33.0, state="inactive")])
    assert _value(m, "xtc_vr_cap_percent", "b") == 33.0 and _value(m, "xtc_vr_active", "b") == 0.0
    assert _value(m, "xtc_vr_setpoint_pps", "a") is None


def test_metrics_text_has_every_per_vr_gauge() -> None:
    from prometheus_client import generate_latest

    m = DaemonMetrics()
    m.update([_row(saturated="cap_min", cap_percent=None)])
    text = generate_latest(m.registry).decode()
    for line in ('xtc_vr_setpoint_pps{vr="a"} 1000.0', 'xtc_vr_measured_pps{vr="a"} 900.0',
                 'xtc_vr_offered_pps{vr="a"} NaN', 'xtc_vr_cap_percent{vr="a"} NaN', 'xtc_vr_active{vr="a"} 1.0',
                 'xtc_vr_saturated{vr="a"} -1.0', "# TYPE xtc_vr_cap_percent gauge"):
        assert line in text.splitlines(), line
