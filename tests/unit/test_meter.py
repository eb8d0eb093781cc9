"""The period meter: per-VR rates from two counter readings, on recorded kernel bytes and on
counters that wrap, reset, jump, appear and vanish."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtc.daemon.meter import DEFAULT_MAX_PPS, PeriodMeter, Readings, VrReading
from xtc.host import rtnl_codec
from xtc.host.counters import CounterTable
from xtc.host.ifcounters import IfCounters

NL = Path(__file__).resolve().parents[1] / "data" / "netlink"


def pk(rx: int, tx: int = 0) -> IfCounters:
    return IfCounters(rx_packets=rx, tx_packets=tx)


def recorded(name: str) -> dict[str, IfCounters]:
    """A real RTM_GETSTATS dump, named through the RTM_GETLINK dump recorded beside it."""
    stats = rtnl_codec.decode_stats_dump((NL / f"{name}.stats.bin").read_bytes())
    names = rtnl_codec.decode_link_dump((NL / f"{name}.link.bin").read_bytes())
    return {names[i]: c for i, c in stats.items()}


def test_recorded_dumps_give_the_rates_of_the_known_traffic() -> None:
    """Between the two recorded dumps the capture sent 2000 packets to vif7.1 and received 1500
    from it (plus at most 10 packets the kernel sends after link-up), and sent 700 on vif7.2."""
    m = PeriodMeter()
    vrs = {"a": ("vif7.1",), "b": ("vif7.1", "vif7.2")}
    first = m.update(10.0, recorded("dom0_veth_t0"), vrs)
    assert first == {"a": VrReading(None, None, False), "b": VrReading(None, None, False)}
    r = m.update(12.0, recorded("dom0_veth_t1"), vrs)
    assert 1500 / 2 <= r["a"].forwarded_pps <= 1510 / 2
    assert 2000 / 2 <= r["a"].offered_pps <= 2010 / 2
    assert 2700 / 2 <= r["b"].offered_pps <= 2720 / 2
    assert not r["a"].counter_reset and not r["b"].counter_reset


def test_forwarded_is_host_rx_and_offered_is_host_tx_summed_over_the_vr() -> None:
    m = PeriodMeter()
    vrs = {"vr1": ("vif1.0", "vif1.1"), "vr2": ("vif2.0",)}
    m.update(0.0, {"vif1.0": pk(0, 0), "vif1.1": pk(0, 0), "vif2.0": pk(0, 0)}, vrs)
    r = m.update(0.5, {"vif1.0": pk(100, 4000), "vif1.1": pk(2900, 0), "vif2.0": pk(50, 70)}, vrs)
    assert r["vr1"] == VrReading(6000.0, 8000.0, False)
    assert r["vr2"] == VrReading(100.0, 140.0, False)


def test_a_vr_with_no_interface_seen_twice_has_no_reading() -> None:
    m = PeriodMeter()
    vrs = {"vr1": ("vif1.0",), "ghost": ("vif9.0",)}
    m.update(0.0, {"vif1.0": pk(0)}, vrs)
    r = m.update(1.0, {"vif1.0": pk(10)}, vrs)
    assert r["ghost"] == VrReading(None, None, False)
    assert r["vr1"].forwarded_pps == 10.0


def test_interfaces_that_come_and_go_flag_the_period_and_add_nothing() -> None:
    m = PeriodMeter()
    vrs = {"vr1": ("vif1.0", "vif1.1")}
    m.update(0.0, {"vif1.0": pk(0)}, vrs)
    r = m.update(1.0, {"vif1.0": pk(100), "vif1.1": pk(5000)}, vrs)  # vif1.1 appears
    assert r["vr1"] == VrReading(100.0, 0.0, True)
    r = m.update(2.0, {"vif1.0": pk(300), "vif1.1": pk(5100)}, vrs)
    assert r["vr1"] == VrReading(300.0, 0.0, False)
    r = m.update(3.0, {"vif1.1": pk(5200)}, vrs)  # vif1.0 vanishes
    assert r["vr1"] == VrReading(100.0, 0.0, True)


def test_a_64_bit_decrease_is_a_reset_not_traffic() -> None:
    """A VR that rebooted has new interfaces whose counters start from 0."""
    m = PeriodMeter()
    vrs = {"vr1": ("vif1.0", "vif1.1")}
    m.update(0.0, {"vif1.0": pk(5_000_000), "vif1.1": pk(10)}, vrs)
    r = m.update(1.0, {"vif1.0": pk(300), "vif1.1": pk(20)}, vrs)
    assert r["vr1"] == VrReading(10.0, 0.0, True)
    r = m.update(2.0, {"vif1.0": pk(1300), "vif1.1": pk(30)}, vrs)
    assert r["vr1"] == VrReading(1010.0, 0.0, False)


def test_a_32_bit_counter_wraps_once_per_period() -> None:
    m = PeriodMeter()
    vrs = {"vr1": ("vif1.0",)}
    m.update(0.0, {"vif1.0": pk(2**32 - 100)}, vrs, counter_bits=32)
    r = m.update(1.0, {"vif1.0": pk(400)}, vrs, counter_bits=32)
    assert r["vr1"] == VrReading(500.0, 0.0, False)


def test_an_implausible_jump_counts_nothing() -> None:
    m = PeriodMeter(max_pps=1e6)
    vrs = {"vr1": ("vif1.0",)}
    m.update(0.0, {"vif1.0": pk(0)}, vrs)
    r = m.update(1.0, {"vif1.0": pk(10**12)}, vrs)
    assert r["vr1"] == VrReading(None, None, True)


def test_a_reading_that_does_not_advance_the_clock_gives_no_rates() -> None:
    m = PeriodMeter()
    vrs = {"vr1": ("vif1.0",)}
    m.update(5.0, {"vif1.0": pk(0)}, vrs)
    assert m.update(5.0, {"vif1.0": pk(10)}, vrs)["vr1"] == VrReading(None, None, False)
    assert m.update(4.0, {"vif1.0": pk(20)}, vrs)["vr1"] == VrReading(None, None, False)
    assert m.update(5.0, {"vif1.0": pk(30)}, vrs)["vr1"].forwarded_pps == 10.0


def test_reset_forgets_the_last_reading() -> None:
    m = PeriodMeter()
    vrs = {"vr1": ("vif1.0",)}
    m.update(0.0, {"vif1.0": pk(0)}, vrs)
    m.reset()
    assert m.last_time_s is None
    assert m.update(1.0, {"vif1.0": pk(10)}, vrs)["vr1"].forwarded_pps is None


@settings(max_examples=80, deadline=None)
@given(
    to_wrap=st.integers(min_value=1, max_value=2_000_000),
    per_period=st.lists(st.integers(min_value=0, max_value=200_000), min_size=1, max_size=30),
)
def test_wrapped_32_bit_counters_give_the_exact_rates(to_wrap: int, per_period: list[int]) -> None:
    start = 2**32 - to_wrap
    m = PeriodMeter()
    vrs = {"vr1": ("e",)}
    c = start
    m.update(0.0, {"e": pk(c % 2**32)}, vrs, counter_bits=32)
    for k, inc in enumerate(per_period, start=1):
        c += inc
        r = m.update(k * 0.5, {"e": pk(c % 2**32)}, vrs, counter_bits=32)
        assert r["vr1"].forwarded_pps == pytest.approx(inc / 0.5)


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=2, max_size=30),
    steps=st.lists(st.floats(min_value=0.001, max_value=2.0), min_size=30, max_size=30),
)
def test_rates_are_never_negative_nor_implausible(values: list[int], steps: list[float]) -> None:
    """Arbitrary counter sequences (resets, garbage) never give a negative or absurd rate."""
    m = PeriodMeter()
    vrs = {"vr1": ("e",)}
    t = 0.0
    for v, dt in zip(values, steps):
        t += dt
        r = m.update(t, {"e": IfCounters(v, v, v, v, v, v)}, vrs)["vr1"]
        for rate in (r.forwarded_pps, r.offered_pps):
            assert rate is None or 0.0 <= rate <= DEFAULT_MAX_PPS * (1 + 1e-9)


# ---------------------------------------------- tables (netlink readings): the arrays' path


def _table(counters: dict[str, IfCounters]) -> CounterTable:
    names = tuple(counters)
    col = lambda f: np.array([getattr(c, f) for c in counters.values()], dtype=np.uint64)  # noqa: E731
    stats = rtnl_codec.StatsArrays(np.arange(1, len(names) + 1, dtype=np.int64), col("rx_packets"), col("tx_packets"),
                                   col("rx_bytes"), col("tx_bytes"), col("rx_drops"), col("tx_drops"))
    return CounterTable(names, {n: i for i, n in enumerate(names)}, stats)


_COUNT = st.one_of(st.integers(0, 10**6), st.integers(0, 2**64 - 1), st.sampled_from([0, 2**64 - 1, 2**63]))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.booleans(), _COUNT, _COUNT, st.integers(-3, 10**7), st.integers(-3, 10**7)),
             min_size=1, max_size=24),
    st.sampled_from([0.1, 1.0, 2.5]),
    st.sampled_from([1e6, DEFAULT_MAX_PPS]),
)
def test_tables_give_what_mappings_give(ifaces, dt_s, max_pps) -> None:
    """Same readings from tables as from dicts of the same counters: growth, decreases, jumps,
    interfaces that came or went, VRs none of whose interfaces were seen, over three periods."""
    vrs = {f"vr{k}": tuple(f"if{i}" for i in range(k * 3, min(k * 3 + 3, len(ifaces)))) for k in range(len(ifaces) // 3 + 1)}
    vrs["ghost"] = ("nope",)
    readings = []
    for step in range(3):
        cur = {}
        for i, (in_a, in_b, rx, tx, drx, dtx) in enumerate(ifaces):
            if (in_a if step != 1 else in_b):
                grow = step * 1  # 0, 1, 2 times the increase
                cur[f"if{i}"] = pk(max(0, min(2**64 - 1, rx + grow * drx)), max(0, min(2**64 - 1, tx + grow * dtx)))
        readings.append(cur)
    plain, tabled = PeriodMeter(max_pps), PeriodMeter(max_pps)
    for step, cur in enumerate(readings):
        a = plain.update(10.0 + step * dt_s, cur, vrs)
        b = tabled.update(10.0 + step * dt_s, _table(cur), vrs)
        assert a == b


def test_tables_keep_their_row_map_while_the_lists_stay() -> None:
    t0 = _table({"a": pk(0, 0), "b": pk(0, 0)})
    t1 = _table({"a": pk(10, 5), "b": pk(20, 0)})
    t1 = type(t1)(t0.names, t0.index, t1.stats)
    m = PeriodMeter()
    vrs = {"vr": ("a", "b")}
    m.update(1.0, t0, vrs)
    assert m.update(2.0, t1, vrs) == {"vr": VrReading(30.0, 5.0, False)}
    lay = m._layout
    assert m.update(3.0, t1, dict(vrs)) == {"vr": VrReading(0.0, 0.0, False)}
    assert m._layout is lay
    assert m.update(4.0, t1, {"vr": ("a",)}) == {"vr": VrReading(0.0, 0.0, False)}
    assert m._layout is not lay


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.booleans(), _COUNT, _COUNT, st.integers(-3, 10**7), st.integers(-3, 10**7)),
             min_size=1, max_size=24),
    st.sampled_from([0.1, 1.0, 2.5]),
)
def test_readings_on_arrays_are_the_mapping_exactly(ifaces, dt_s) -> None:
    """The tables' Readings: the VRs in order, each entry of the same types and values (repr) as the
    mapping path's, and its arrays saying the same (rates where known, counter resets)."""
    vrs = {f"vr{k}": tuple(f"if{i}" for i in range(k * 3, min(k * 3 + 3, len(ifaces)))) for k in range(len(ifaces) // 3 + 1)}
    vrs["ghost"] = ("nope",)
    plain, tabled = PeriodMeter(), PeriodMeter()
    for step in range(3):
        cur = {f"if{i}": pk(rx + step * max(drx, 0), tx + step * max(dtx, 0))
               for i, (in_a, in_b, rx, tx, drx, dtx) in enumerate(ifaces) if (in_a if step != 1 else in_b)
               and rx + step * max(drx, 0) < 2**64 and tx + step * max(dtx, 0) < 2**64}
        a = plain.update(10.0 + step * dt_s, cur, vrs)
        b = tabled.update(10.0 + step * dt_s, _table(cur), vrs)
        assert list(b) == list(a) == list(vrs) and len(b) == len(a)
        assert repr(list(b.items())) == repr(list(a.items()))
        assert "nobody" not in b and b.get("nobody") is None
        if step:
            assert isinstance(b, Readings)
            for k, n in enumerate(b.names):
                r = a[n]
                assert bool(b.known[k]) == (r.forwarded_pps is not None)
                assert bool(b.reset[k]) == r.counter_reset
                if r.forwarded_pps is not None:
                    assert b.forwarded[k] == r.forwarded_pps and b.offered[k] == r.offered_pps


def test_one_readings_type_any_mapping_goes_on_arrays_and_reads_back_the_same() -> None:
    d = {"a": VrReading(10.0, 20.0, False), "b": VrReading(None, None, True), "c": VrReading(5.0, None, False)}
    r = Readings.of(d)
    assert dict(r) == d and list(r) == ["a", "b", "c"] and Readings.of(r) is r
    # Readings' contract: rates 0.0 where unknown (the metrics add the arrays as they are).
    assert r.forwarded.tolist() == [10.0, 0.0, 5.0] and r.offered.tolist() == [20.0, 0.0, 0.0]
    assert r.known.tolist() == [True, False, True] and r.offered_known.tolist() == [True, False, False]
    assert Readings.of({"a": VrReading(1.0, 2.0)}).offered_known is None


def test_the_meter_gives_readings_on_every_path_with_the_same_names_while_the_vrs_stay() -> None:
    m = PeriodMeter()
    vrs = {"vr1": ("vif1.0",)}
    first = m.update(1.0, {"vif1.0": IfCounters(rx_packets=0, tx_packets=0)}, vrs)
    second = m.update(2.0, {"vif1.0": IfCounters(rx_packets=100, tx_packets=200)}, vrs)
    assert isinstance(first, Readings) and isinstance(second, Readings) and second.names is first.names
    assert second["vr1"] == VrReading(100.0, 200.0, False)
