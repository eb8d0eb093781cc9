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


def _value(m: DaemonMetrics, name: str, vr: str, **labels: str) -> float | None:
    v = m.registry.get_sample_value(name, {"vr": vr, **labels})
    return v


def _row(**kw) -> list:
    d = {"vr": "a", "state": "active", "present": True, "setpoint_pps": 1000.0, "forwarded_pps": 900.0,
         "offered_pps": None, "cap_percent": 20.0, "original_cap_percent": None, "actuation_error": None,
         "saturated": None, **kw}
    return [d[k] for k in SAMPLE_FIELDS]


def test_metrics_follow_vrs_that_come_go_and_come_back() -> None:
    m = DaemonMetrics()
    m.update([_row(), _row(vr="b", state="paused")])
    assert _value(m, "xtc_vr_cap_ratio", "a") == 0.2 and _value(m, "xtc_vr_state", "b", state="paused") == 1.0
    assert _value(m, "xtc_vr_state", "b", state="active") == 0.0
    assert _value(m, "xtc_vr_saturation", "a", saturation="none") == 1.0
    m.update([_row(cap_percent=25.0)])
    assert _value(m, "xtc_vr_cap_ratio", "a") == 0.25 and _value(m, "xtc_vr_cap_ratio", "b") is None
    assert _value(m, "xtc_vr_state", "b", state="paused") is None
    m.update([_row(vr="b", cap_percent=33.0, state="inactive", setpoint_pps=None)])
    assert _value(m, "xtc_vr_cap_ratio", "b") == 0.33 and _value(m, "xtc_vr_state", "b", state="inactive") == 1.0
    assert _value(m, "xtc_vr_setpoint_pps", "a") is None and _value(m, "xtc_vr_setpoint_pps", "b") is None


def test_metrics_text_has_every_per_vr_series() -> None:
    from prometheus_client import generate_latest

    m = DaemonMetrics()
    m.update([_row(saturated="cap_min", cap_percent=None)])
    text = generate_latest(m.registry).decode()
    for line in ('xtc_vr_setpoint_pps{vr="a"} 1000.0', 'xtc_vr_state{state="active",vr="a"} 1.0',
                 'xtc_vr_state{state="paused",vr="a"} 0.0', 'xtc_vr_state{state="inactive",vr="a"} 0.0',
                 'xtc_vr_saturation{saturation="cap_min",vr="a"} 1.0',
                 'xtc_vr_saturation{saturation="none",vr="a"} 0.0', "# TYPE xtc_vr_cap_ratio gauge",
                 "# TYPE xtc_vr_forwarded_packets_total counter", "# TYPE xtc_build_info gauge"):
        assert line in text.splitlines(), line
    assert 'xtc_vr_cap_ratio{vr="a"}' not in text  # no cap: no sample (not NaN)
    assert "process_cpu_seconds_total " in text and 'service="daemon"' in text


def test_packet_counters_add_every_period_over_arrays_and_mappings() -> None:
    """The counters sum rate x period over the periods, through VR-list changes, on both kinds of readings."""
    import numpy as np

    from xtc.daemon.meter import Readings, VrReading

    m = DaemonMetrics()
    names = ["a", "b"]
    idx = {"a": 0, "b": 1}

    def arrays(f: list[float], o: list[float], known: list[bool], names: list[str] = names,
               idx: dict = idx) -> Readings:
        n = len(names)
        return Readings(names, idx, np.array(f), np.array(o), np.array(known), np.zeros(n, bool))

    m.packets.add(arrays([100.0, 10.0], [200.0, 20.0], [True, True]), 1.0)
    m.packets.add(arrays([100.0, 0.0], [200.0, 0.0], [True, False]), 0.5)  # b unknown (0.0: Readings' contract)
    assert m.packets.snapshot() == {"a": (150.0, 300.0), "b": (10.0, 20.0)}
    # A new VR list (another list object): the totals carry on, "c" starts at 0.
    m.packets.add(arrays([10.0, 4.0], [10.0, 4.0], [True, True], ["a", "c"], {"a": 0, "c": 1}), 2.0)
    # A mapping (the /proc/net/dev meter).
    m.packets.add({"b": VrReading(2.0, None), "c": VrReading(None, None, True)}, 1.0)
    m.packets.add({}, 1.0)
    m.packets.add({"a": VrReading(1.0, 1.0)}, 0.0)  # no interval: nothing
    assert m.packets.snapshot() == {"a": (170.0, 320.0), "b": (12.0, 20.0), "c": (8.0, 8.0)}
    assert _value(m, "xtc_vr_forwarded_packets_total", "a") == 170.0
    assert _value(m, "xtc_vr_offered_packets_total", "c") == 8.0
