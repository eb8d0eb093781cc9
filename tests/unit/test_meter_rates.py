"""The rate tracker: windows, counter wraps and resets, interfaces that come and go, bad timestamps."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from xtc.daemon.meter import (
    DEFAULT_MAX_PPS,
    IfCounters,
    RateTracker,
    counter_delta,
)


def pk(rx: int, tx: int = 0) -> IfCounters:
    return IfCounters(rx_packets=rx, tx_packets=tx)


def feed(tr: RateTracker, t0: float, dt: float, values: list[IfCounters], name: str = "vif1.0") -> None:
    for k, c in enumerate(values):
        tr.update(t0 + k * dt, {name: c})


# --- the wrap / reset rule ------------------------------------------------------


def test_counter_delta_rule() -> None:
    lim = 1e6  # per second
    assert counter_delta(100, 600, 0.1, lim) == (500, "ok")
    assert counter_delta(2**32 - 100, 50, 0.1, lim) == (150, "wrap32")
    assert counter_delta(2**64 - 100, 50, 0.1, lim) == (150, "wrap64")
    # Far from 2**32 and 2**64: a reset; the new value is what was counted since.
    assert counter_delta(5_000_000_000, 700, 0.1, lim) == (700, "reset")
    assert counter_delta(80_000, 700, 0.1, lim) == (700, "reset")
    # A reset whose new value is itself implausible counts nothing.
    assert counter_delta(5_000_000_000, 900_000, 0.1, lim) == (0, "reset")
    # An implausible jump up counts nothing.
    assert counter_delta(0, 10**12, 0.1, lim) == (0, "jump")


# --- windows ----------------------------------------------------------------------


def test_constant_rate_over_all_windows() -> None:
    tr = RateTracker(max_window_s=1.0)
    feed(tr, 100.0, 0.1, [pk(k * 5_000, k * 7_000) for k in range(25)])
    for w in (0.1, 0.3, 0.5, 1.0):
        r = tr.rates(w)["vif1.0"]
        assert r.rx_pps == pytest.approx(50_000)
        assert r.tx_pps == pytest.approx(70_000)
        assert r.span_s == pytest.approx(w)
        assert r.t_end_s == pytest.approx(102.4)


def test_window_averages_a_step() -> None:
    """A step from 10 kpps to 30 kpps half a second ago averages to 20 kpps over 1 s."""
    tr = RateTracker(max_window_s=1.0)
    counts, c = [], 0
    for k in range(21):
        counts.append(pk(c))
        c += 1_000 if k < 15 else 3_000
    feed(tr, 0.0, 0.1, counts)
    assert tr.rates(1.0)["vif1.0"].rx_pps == pytest.approx(20_000)
    assert tr.rates(0.5)["vif1.0"].rx_pps == pytest.approx(30_000)


def test_jittered_samples_use_the_closest_reference() -> None:
    tr = RateTracker(max_window_s=1.0)
    times = [0.0, 0.13, 0.19, 0.31, 0.42, 0.48, 0.61, 0.74, 0.79, 0.93, 1.02, 1.11, 1.2]
    for t in times:
        tr.update(t, {"e": pk(int(t * 40_000))})
    r = tr.rates(1.0)["e"]
    assert r.span_s == pytest.approx(1.2 - 0.19)  # 0.19 is closest to 1.2 - 1.0
    assert r.rx_pps == pytest.approx(40_000, rel=1e-4)


def test_window_bounds_are_checked() -> None:
    tr = RateTracker(max_window_s=1.0)
    for w in (0.0, -1.0, 1.5, math.nan, math.inf):
        with pytest.raises(ValueError, match="window_s"):
            tr.rates(w)
    with pytest.raises(ValueError, match="max_window_s"):
        RateTracker(max_window_s=0)
    with pytest.raises(ValueError, match="max_pps"):
        RateTracker(max_pps=math.nan)


def test_history_is_bounded() -> None:
    tr = RateTracker(max_window_s=1.0)
    feed(tr, 0.0, 0.1, [pk(k) for k in range(1000)])
    st_ = tr._ifs["vif1.0"]
    assert len(st_.times) <= 12


def test_gap_in_sampling_gives_the_true_average() -> None:
    tr = RateTracker(max_window_s=1.0)
    tr.update(0.0, {"e": pk(0)})
    tr.update(5.0, {"e": pk(50_000)})
    r = tr.rates(1.0)["e"]
    assert r.span_s == pytest.approx(5.0) and r.rx_pps == pytest.approx(10_000)


# --- wraps and resets ---------------------------------------------------------------


def test_32_bit_wrap_gives_the_steady_rate() -> None:
    tr = RateTracker()
    start = 2**32 - 52_345  # wraps between the 6th and 7th sample, inside the last 1 s
    feed(tr, 0.0, 0.1, [pk((start + k * 10_000) % 2**32) for k in range(10)])
    rep = tr.update(1.0, {"vif1.0": pk((start + 10 * 10_000) % 2**32)})
    assert rep.accepted
    assert tr.rates()["vif1.0"].rx_pps == pytest.approx(100_000)
    assert tr.rates(0.5)["vif1.0"].rx_pps == pytest.approx(100_000)


def test_64_bit_wrap_gives_the_steady_rate() -> None:
    tr = RateTracker()
    start = 2**64 - 25_000
    feed(tr, 0.0, 0.1, [pk((start + k * 10_000) % 2**64) for k in range(12)])
    assert tr.rates()["vif1.0"].rx_pps == pytest.approx(100_000)


def test_reset_is_neither_huge_nor_negative() -> None:
    """An interface re-created under the same name (VR reboot): counters restart from 0."""
    tr = RateTracker()
    vals = [pk(9_000_000 + k * 1_000, 20_000_000 + k * 2_000) for k in range(11)]
    vals += [pk(300 + k * 1_000, 600 + k * 2_000) for k in range(11)]
    reports = []
    for k, c in enumerate(vals):
        reports.append(tr.update(k * 0.1, {"vif1.0": c}))
    assert reports[11].anomalies == {"vif1.0": ["reset"]}
    r = tr.rates()["vif1.0"]
    assert 0 <= r.rx_pps <= 11_000 and 0 <= r.tx_pps <= 22_000
    # 1 s after the reset the window only sees the new counters: exact again.
    tr.update(2.2, {"vif1.0": pk(300 + 11 * 1_000, 600 + 11 * 2_000)})
    assert tr.rates()["vif1.0"].rx_pps == pytest.approx(10_000)


def test_reset_of_packets_resets_bytes_too() -> None:
    tr = RateTracker()
    tr.update(0.0, {"e": IfCounters(rx_packets=10**9, tx_packets=0, rx_bytes=10**9 * 64)})
    # rx_bytes after re-creation could look like a 32-bit wrap on its own; the packet reset decides.
    rep = tr.update(0.1, {"e": IfCounters(rx_packets=10, tx_packets=0, rx_bytes=640)})
    assert rep.anomalies["e"] == ["reset"]
    assert tr.rates()["e"].rx_bytes_per_s == pytest.approx(6400)


def test_implausible_jump_counts_nothing() -> None:
    tr = RateTracker()
    tr.update(0.0, {"e": pk(1_000)})
    rep = tr.update(0.1, {"e": pk(10**15)})
    assert rep.anomalies == {"e": ["jump"]}
    assert tr.rates()["e"].rx_pps == 0.0
    tr.update(0.2, {"e": pk(10**15 + 500)})
    assert tr.rates(0.1)["e"].rx_pps == pytest.approx(5_000)


# --- interfaces that come and go ------------------------------------------------------


def test_interfaces_appear_and_vanish() -> None:
    tr = RateTracker()
    rep = tr.update(0.0, {"a": pk(0)})
    assert rep.appeared == ["a"]
    rep = tr.update(0.1, {"a": pk(100), "b": pk(5)})
    assert rep.appeared == ["b"]
    assert set(tr.rates()) == {"a"}  # b has one sample: no rate yet
    tr.update(0.2, {"a": pk(200), "b": pk(105)})
    assert tr.rates()["b"].rx_pps == pytest.approx(1_000)
    rep = tr.update(0.3, {"b": pk(205)})
    assert rep.vanished == ["a"]
    assert set(tr.rates()) == {"b"} and tr.interfaces == frozenset({"b"})
    # 'a' comes back with other counters: it is new, not a reset of the old one.
    rep = tr.update(0.4, {"a": pk(7), "b": pk(305)})
    assert rep.appeared == ["a"] and rep.anomalies == {}
    tr.update(0.5, {"a": pk(107), "b": pk(405)})
    assert tr.rates()["a"].rx_pps == pytest.approx(1_000)
    assert tr.rates()["a"].span_s == pytest.approx(0.1)


# --- timestamps ------------------------------------------------------------------------


@pytest.mark.parametrize("bad_t", [0.2, 0.1, math.nan, math.inf, -math.inf])
def test_duplicate_old_or_non_finite_timestamps_change_nothing(bad_t: float) -> None:
    tr = RateTracker()
    tr.update(0.0, {"e": pk(0)})
    tr.update(0.2, {"e": pk(2_000)})
    before = tr.rates()
    rep = tr.update(bad_t, {"e": pk(999_999), "x": pk(1)})
    assert not rep.accepted and rep.reason
    assert tr.rates() == before and tr.last_time_s == 0.2 and tr.interfaces == frozenset({"e"})


# --- properties ---------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    to_wrap=st.integers(min_value=1, max_value=2_000_000),
    per_tick=st.lists(st.integers(min_value=0, max_value=200_000), min_size=2, max_size=40),
    bits=st.sampled_from([32, 64]),
)
def test_wrapped_counters_give_exact_rates(to_wrap: int, per_tick: list[int], bits: int) -> None:
    """Counters that wrap at 2**bits give the same rates as unbounded counters.

    The counter starts ``to_wrap`` below 2**bits, so most sequences cross the wrap.
    """
    start = 2**bits - to_wrap
    wrapped, exact = RateTracker(max_window_s=1.0), RateTracker(max_window_s=1.0)
    c = start
    for k, inc in enumerate([0] + per_tick):
        c += inc
        wrapped.update(k * 0.1, {"e": pk(c % 2**bits)})
        exact.update(k * 0.1, {"e": pk(c - start)})
    for w in (0.1, 0.5, 1.0):
        assert wrapped.rates(w)["e"].rx_pps == pytest.approx(exact.rates(w)["e"].rx_pps)


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=2, max_size=30),
    steps=st.lists(st.floats(min_value=0.001, max_value=2.0), min_size=30, max_size=30),
)
def test_rates_are_never_negative_nor_implausible(values: list[int], steps: list[float]) -> None:
    """Arbitrary counter sequences (resets, garbage) never give a negative or absurd rate."""
    tr = RateTracker(max_window_s=1.0)
    t = 0.0
    for v, dt in zip(values, steps):
        t += dt
        tr.update(t, {"e": IfCounters(v, v, v, v, v, v)})
        for w in (0.1, 1.0):
            r = tr.rates(w).get("e")
            if r is not None:
                assert 0.0 <= r.rx_pps <= DEFAULT_MAX_PPS * (1 + 1e-9)
                assert 0.0 <= r.tx_bytes_per_s
