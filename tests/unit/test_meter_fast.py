"""The meter's fast paths against its careful paths.

The vectorised parser must give exactly what the line-by-line parser gives (same counters,
same order, same problems reported) and must really be the path taken on well-formed files;
the array-backed rate tracker must give exactly the reports and rates of the per-interface
reference tracker below (the tracker as it was before it was vectorised), through wraps,
resets, jumps, interfaces that come, go and move, and rejected timestamps.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from pathlib import Path
from typing import Mapping

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtc.daemon.meter import (
    DEFAULT_MAX_BYTES_PER_S,
    DEFAULT_MAX_PPS,
    CounterTable,
    GroupRateSums,
    IfCounters,
    IfRates,
    Meter,
    ProcNetDevSource,
    ProcNetDevParser,
    RateTracker,
    UpdateReport,
    counter_delta,
    parse_proc_net_dev,
    parse_proc_net_dev_table,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "proc_net_dev"
RECORDED = sorted(DATA.glob("*.txt"))

HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|"
    "bytes    packets errs drop fifo colls carrier compressed\n"
)
REORDERED = "Inter-| Receive | Transmit\n face |packets newcol bytes drop|extra drop packets bytes\n"


def both(text: str) -> tuple[ProcNetDevParser, dict[str, IfCounters], list[str], dict[str, IfCounters], list[str]]:
    """Parse with the fast parser (falling back) and with the careful parser only."""
    parser = ProcNetDevParser()
    p_fast: list[str] = []
    p_careful: list[str] = []
    fast = parser.parse(text, p_fast).to_dict()
    careful = parse_proc_net_dev(text, p_careful, fast=False)
    return parser, fast, p_fast, careful, p_careful


def assert_same(fast: Mapping[str, IfCounters], careful: Mapping[str, IfCounters]) -> None:
    assert list(fast) == list(careful)
    assert dict(fast) == dict(careful)


# --- parser: recorded and real files ----------------------------------------------------------


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_files_take_the_fast_path_and_agree(path: Path) -> None:
    parser, fast, p_fast, careful, p_careful = both(path.read_text())
    assert parser.fast_parses == 1 and parser.careful_parses == 0
    assert_same(fast, careful)
    assert p_fast == p_careful == []


def test_this_hosts_file_takes_the_fast_path_and_agrees() -> None:
    parser, fast, _, careful, _ = both(Path("/proc/net/dev").read_text())
    assert parser.fast_parses == 1
    assert_same(fast, careful)


def test_reordered_and_extra_columns_take_the_fast_path() -> None:
    parser, fast, _, careful, _ = both(REORDERED + "  eth9: 5 77 500 2 9 1 6 600\n vif1.0:1 2 3 4 5 6 7 8")
    assert parser.fast_parses == 1
    assert_same(fast, careful)
    assert fast["eth9"] == IfCounters(5, 6, 500, 600, 2, 1)
    assert fast["vif1.0"] == IfCounters(1, 7, 3, 8, 4, 6)


# --- parser: values of every length, and what the fast path leaves to the careful one -----------


@pytest.mark.parametrize("ndigits", range(1, 21))
def test_values_of_every_length(ndigits: int) -> None:
    rng = np.random.default_rng(ndigits)
    vals = [int("".join(str(d) for d in rng.integers(0, 10, ndigits))) for _ in range(16)]
    vals = [v % 2**64 for v in vals]
    text = HEADER + "  eth0: " + " ".join(str(v) for v in vals) + "\n  eth1: " + " ".join("9" * ndigits for _ in range(16)) + "\n"
    parser, fast, p_fast, careful, p_careful = both(text)
    assert_same(fast, careful)
    assert p_fast == p_careful
    # Up to 19 digits every value fits; 20-digit lines are the careful parser's (it refuses 99..9 > 2**64-1).
    assert parser.fast_parses == (1 if ndigits <= 19 else 0)
    assert fast["eth0"] == IfCounters(vals[1], vals[9], vals[0], vals[8], vals[3], vals[11])


@pytest.mark.parametrize(
    "bad",
    [
        "garbage without colon\n",
        "  eth1: 1 2 3\n",
        "  eth1: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0 99\n",
        "  eth1: 1 -2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        "  eth1: 1 1_000 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        "  eth1: 1 2.5 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        "  eth1: 1 +2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        "  eth1: 1 0x2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        f"  eth1: 1 {2**64} 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        "  eth1: 1 00000000000000000000002 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",  # 23 characters, value 2
        "    : 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        "  eth0: 9 9 0 0 0 0 0 0 9 9 0 0 0 0 0 0\n",  # duplicate
        "  eth 1: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        "  eth1: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0 :\n",
        "  eth1:: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        "  eth1:\t1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        "  eth1: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\r\n",
        "  eth1: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\x0b\n",
        "  éth1: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
        "  averyveryverylongname0: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",  # accepted, by the careful parser
        "\n",
        "     \n",
        "\x7fx: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
    ],
)
def test_odd_lines_go_to_the_careful_parser_and_agree(bad: str) -> None:
    text = HEADER + "  eth0: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0\n" + bad + "  eth2: 30 3 0 0 0 0 0 0 40 4 0 0 0 0 0 0\n"
    parser, fast, p_fast, careful, p_careful = both(text)
    assert_same(fast, careful)
    assert p_fast == p_careful
    if parser.fast_parses:  # only lines the careful parser accepts unchanged may stay on the fast path
        assert p_careful == [] and not bad.strip() == ""


@pytest.mark.parametrize(
    "text",
    ["", "x", "just one line\n", "MemTotal: 1 kB\nMemFree: 2 kB\nBuffers: 3 kB\n", HEADER, HEADER[:-1],
     "Inter-|   Receive |  Transmit\n face |bytes errs|bytes packets drop\n  eth0: 1 2 3 4 5\n"],
)
def test_not_proc_net_dev_or_empty_same_either_way(text: str) -> None:
    outcomes = []
    for fast in (True, False):
        try:
            outcomes.append(("ok", parse_proc_net_dev(text, [], fast=fast)))
        except Exception as e:  # noqa: BLE001 - the very same error is expected from both
            outcomes.append((type(e).__name__, str(e)))
    assert outcomes[0] == outcomes[1]


# --- parser: random files -------------------------------------------------------------------------

name_st = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-_@", min_size=1, max_size=15)
small_u64 = st.one_of(
    st.integers(0, 10),
    st.integers(0, 10**19 - 1),
    st.integers(2**32 - 5, 2**32 + 5),
    st.integers(2**64 - 10, 2**64 - 1),
)
BAD_LINES = [
    "junk\n",
    "  bad1: 1 2 3\n",
    "  bad2: 1 x 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
    f"  bad3: 1 {2**64 + 7} 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
    "\n",
    "  bad4:\t1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n",
]


@st.composite
def proc_files(draw: st.DrawFn, bad_allowed: bool = True) -> tuple[str, bool]:
    """A /proc/net/dev text and whether it has any line the fast path must refuse."""
    names = draw(st.lists(name_st, min_size=0, max_size=12, unique=True))
    lines = []
    odd = False
    for n in names:
        vals = draw(st.lists(small_u64, min_size=16, max_size=16))
        toks = [str(v) for v in vals]
        if draw(st.booleans()):
            i = draw(st.integers(0, 15))
            toks[i] = "0" * draw(st.integers(1, 3)) + toks[i]  # leading zeros
            odd |= len(toks[i]) > 19
        seps = [" " * draw(st.integers(1, 3)) for _ in range(15)]
        row = toks[0] + "".join(s + t for s, t in zip(seps, toks[1:]))
        after = " " * draw(st.integers(0, 2))
        lines.append(" " * draw(st.integers(0, 4)) + n + ":" + after + row + "\n")
        odd |= any(len(t) > 19 for t in toks)
        if bad_allowed and draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.sampled_from(BAD_LINES)))
            odd = True
    text = HEADER + "".join(lines)
    if lines and draw(st.booleans()):
        text = text[:-1]  # no newline at the end
    return text, odd or not names


@settings(max_examples=150, deadline=None)
@given(proc_files())
def test_random_files_agree(case: tuple[str, bool]) -> None:
    text, odd = case
    parser, fast, p_fast, careful, p_careful = both(text)
    assert_same(fast, careful)
    assert p_fast == p_careful
    if not odd:
        assert parser.fast_parses == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(proc_files(bad_allowed=False), min_size=2, max_size=4))
def test_one_parser_over_changing_files_agrees(cases: list[tuple[str, bool]]) -> None:
    """The remembered names of the last file never leak into the next one."""
    parser = ProcNetDevParser()
    for text, _ in cases + cases[:1]:
        assert_same(parser.parse(text).to_dict(), parse_proc_net_dev(text, fast=False))


def test_unchanged_interfaces_reuse_the_names() -> None:
    parser = ProcNetDevParser()
    a = parser.parse(HEADER + "  eth0: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\n  eth1: 5 6 0 0 0 0 0 0 7 8 0 0 0 0 0 0\n")
    b = parser.parse(HEADER + "  eth0: 11 12 0 0 0 0 0 0 13 14 0 0 0 0 0 0\n  eth1: 15 16 0 0 0 0 0 0 17 18 0 0 0 0 0 0\n")
    c = parser.parse(HEADER + "  eth0: 11 12 0 0 0 0 0 0 13 14 0 0 0 0 0 0\n  eth2: 15 16 0 0 0 0 0 0 17 18 0 0 0 0 0 0\n")
    assert b.names is a.names and c.names == ("eth0", "eth2")
    assert b.values.tolist() == [[12, 14, 11, 13, 0, 0], [16, 18, 15, 17, 0, 0]]
    assert not b.values.flags.writeable


def test_table_function_and_counter_table() -> None:
    text = HEADER + "  eth0: 1 2 0 3 0 0 0 0 4 5 0 6 0 0 0 0\n"
    for fast in (True, False):
        t = parse_proc_net_dev_table(text, fast=fast)
        assert t.names == ("eth0",) and t.to_dict() == {"eth0": IfCounters(2, 5, 1, 4, 3, 6)}
    with pytest.raises(ValueError, match="uint64"):
        CounterTable(["a"], np.zeros((1, 6), dtype=np.int64))
    with pytest.raises(ValueError, match="shape"):
        CounterTable(["a"], np.zeros((2, 6), dtype=np.uint64))
    with pytest.raises(ValueError, match="duplicate"):
        CounterTable(["a", "a"], np.zeros((2, 6), dtype=np.uint64))
    with pytest.raises(ValueError, match="'x'"):
        CounterTable.from_mapping({"x": IfCounters(-1, 0)})
    with pytest.raises(ValueError, match="'y'"):
        CounterTable.from_mapping({"y": IfCounters(2**64, 0)})


# --- tracker: the reference ---------------------------------------------------------------------

_IS_PACKETS = (True, True, False, False, True, True)


class _RefState:
    def __init__(self, t: float, raw: tuple[int, ...]) -> None:
        self.raw = raw
        self.acc = (0,) * len(raw)
        self.times: deque[float] = deque([t])
        self.accs: deque[tuple[int, ...]] = deque([self.acc])


class ReferenceTracker:
    """The per-interface tracker the vectorised one replaced (same rule, plain Python ints)."""

    def __init__(self, max_window_s: float = 1.0, max_pps: float = DEFAULT_MAX_PPS,
                 max_bytes_per_s: float = DEFAULT_MAX_BYTES_PER_S) -> None:
        self.max_window_s = max_window_s
        self._limits = tuple(float(max_pps) if p else float(max_bytes_per_s) for p in _IS_PACKETS)
        self._ifs: dict[str, _RefState] = {}
        self._last_t: float | None = None

    def update(self, now_s: float, counters: Mapping[str, IfCounters]) -> UpdateReport:
        if not math.isfinite(now_s):
            return UpdateReport(False, f"timestamp {now_s!r} is not a finite number")
        if self._last_t is not None and now_s <= self._last_t:
            what = "duplicate" if now_s == self._last_t else "older"
            return UpdateReport(False, f"{what} timestamp {now_s!r} (last accepted {self._last_t!r}); sample ignored")
        report = UpdateReport(True)
        for name in list(self._ifs):
            if name not in counters:
                del self._ifs[name]
                report.vanished.append(name)
        cutoff = now_s - self.max_window_s
        for name, c in counters.items():
            raw = c.as_tuple()
            s = self._ifs.get(name)
            if s is None:
                self._ifs[name] = _RefState(now_s, raw)
                report.appeared.append(name)
                continue
            dt = now_s - s.times[-1]
            res = [counter_delta(p, r, dt, lim) for p, r, lim in zip(s.raw, raw, self._limits)]
            verdicts = [v for _, v in res]
            if any(verdicts[i] == "reset" for i in (0, 1)):
                res = [(r, "reset") if r <= lim * dt else (0, "reset") for r, lim in zip(raw, self._limits)]
                verdicts = [v for _, v in res]
            odd = sorted({v for v in verdicts if v != "ok"})
            if odd:
                report.anomalies[name] = odd
            s.raw = raw
            s.acc = tuple(a + d for a, (d, _) in zip(s.acc, res))
            s.times.append(now_s)
            s.accs.append(s.acc)
            while len(s.times) >= 2 and s.times[1] <= cutoff:
                s.times.popleft()
                s.accs.popleft()
        self._last_t = now_s
        return report

    def rates(self, window_s: float) -> dict[str, IfRates]:
        out = {}
        for name, s in self._ifs.items():
            n = len(s.times)
            if n < 2:
                continue
            t_end = s.times[-1]
            target = t_end - window_s
            i = bisect_left(s.times, target, 0, n - 1)
            if i > 0 and (i == n - 1 or target - s.times[i - 1] <= s.times[i] - target):
                i -= 1
            span = t_end - s.times[i]
            r = [(y - x) / span for x, y in zip(s.accs[i], s.accs[-1])]
            out[name] = IfRates(*r, span_s=span, t_end_s=t_end)
        return out


# --- tracker: random histories ---------------------------------------------------------------------

POOL = ["vif1.0", "vif1.1", "vif2.0", "eth0", "lo"]
OPS = ["inc", "inc", "inc", "same", "wrap32", "wrap64", "reset", "jump", "near32", "near64", "garbage"]


def step_counter(v: int, op: str, k: int) -> int:
    if op == "inc":
        return min(v + k, 2**64 - 1)
    if op == "same":
        return v
    if op == "wrap32":
        return (v + k) % 2**32 if v < 2**32 else (v + k) % 2**64
    if op == "wrap64":
        return (v + k) % 2**64
    if op == "reset":
        return k
    if op == "jump":
        return min(v + 10**15 + k, 2**64 - 1)
    if op == "near32":
        return 2**32 - 1 - k % 1000
    if op == "near64":
        return 2**64 - 1 - k % 1000
    return (v * 6364136223846793005 + k) % 2**64  # garbage


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_tracker_agrees_with_the_reference(data: st.DataObject) -> None:
    window = data.draw(st.sampled_from([0.35, 1.0, 1.7]), label="max_window_s")
    new, ref = RateTracker(max_window_s=window), ReferenceTracker(max_window_s=window)
    values: dict[str, list[int]] = {}
    t = 0.0
    for _ in range(data.draw(st.integers(2, 20), label="steps")):
        t += data.draw(st.sampled_from([0.1, 0.1, 0.1, 0.05, 0.13, 0.0, -0.05, 0.7, 3.0, 1e-9]), label="dt")
        present = data.draw(st.lists(st.sampled_from(POOL), unique=True, max_size=len(POOL)), label="present")
        counters = {}
        for name in present:
            old = values.get(name) or [0] * 6
            ops = data.draw(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 3_000_000)), min_size=6, max_size=6))
            values[name] = [step_counter(v, op, k) for v, (op, k) in zip(old, ops)]
            counters[name] = IfCounters(*values[name])
        if data.draw(st.integers(0, 9), label="grow window") == 0:
            new.max_window_s = ref.max_window_s = new.max_window_s + 0.5
        feed = CounterTable.from_mapping(counters) if data.draw(st.booleans(), label="as table") else counters
        got, want = new.update(t, feed), ref.update(t, counters)
        assert got == want
        assert list(got.anomalies) == list(want.anomalies)
        assert new.interfaces == frozenset(ref._ifs)
        for w in sorted({0.1, 0.35, new.max_window_s}):
            r_new, r_ref = new.rates(w), ref.rates(w)
            assert list(r_new) == list(r_ref)
            assert r_new == r_ref
        views = new._ifs
        for name, s in ref._ifs.items():
            assert views[name].times == list(s.times)
            assert views[name].accs == [tuple(a % 2**64 for a in acc) for acc in s.accs]


def test_rates_table_matches_rates() -> None:
    tr = RateTracker(max_window_s=1.0)
    for k in range(12):
        c = {"a": IfCounters(100 * k, 7 * k, 6400 * k), "b": IfCounters(3 * k, 0)}
        if k >= 10:
            c["new"] = IfCounters(k, k)
        tr.update(k * 0.1, c)
    t = tr.rates_table(0.5)
    assert t.names == ("a", "b", "new") and t.valid.tolist() == [True, True, True]
    r = tr.rates(0.5)
    for name, row in t.index.items():
        assert t.rates[row].tolist() == [r[name].rx_pps, r[name].tx_pps, r[name].rx_bytes_per_s,
                                         r[name].tx_bytes_per_s, r[name].rx_drops_per_s, r[name].tx_drops_per_s]
        assert t.span_s[row] == r[name].span_s
    assert r["new"].span_s == pytest.approx(0.1) and r["a"].span_s == pytest.approx(0.5)
    tr.update(1.2, {"a": IfCounters(0, 0), "late": IfCounters(1, 1)})
    t = tr.rates_table()
    assert t.names == ("a", "late") and t.valid.tolist() == [True, False] and math.isnan(t.rates[1, 0])


def test_bad_counters_raise_and_change_nothing() -> None:
    tr = RateTracker()
    tr.update(0.0, {"a": IfCounters(1, 1)})
    with pytest.raises(ValueError, match="'b'"):
        tr.update(0.1, {"a": IfCounters(2, 2), "b": IfCounters(-5, 0)})
    assert tr.last_time_s == 0.0 and tr.interfaces == frozenset({"a"})


# --- per-VR sums and the meter glue -----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    rates=st.dictionaries(st.sampled_from(POOL + ["x", "y"]), st.floats(0, 1e7), max_size=7),
    groups=st.dictionaries(st.sampled_from(["vr1", "vr2", "vr3"]),
                           st.lists(st.sampled_from(POOL + ["x", "y", "gone"]), max_size=4).map(tuple), max_size=3),
)
def test_group_sums_equal_a_plain_loop(rates: dict[str, float], groups: dict[str, tuple[str, ...]]) -> None:
    tr = RateTracker()
    names = list(rates)
    tr.update(0.0, {n: IfCounters(0, 0) for n in names})
    tr.update(0.5, {**{n: IfCounters(int(rates[n]), int(rates[n]) * 3) for n in names}, "late": IfCounters(1, 1)})
    per_if = tr.rates(0.5)
    sums = GroupRateSums()
    for _ in range(2):  # the second call reuses the rows
        keys, rx, tx, seen = sums.sums(tr.rates_table(0.5), groups)
        assert keys == list(groups)
        for g, ifs in groups.items():
            fwd = off = 0.0
            n = 0
            for i in ifs:
                r = per_if.get(i)
                if r is not None:
                    fwd += r.rx_pps
                    off += r.tx_pps
                    n += 1
            k = keys.index(g)
            assert (rx[k], tx[k], seen[k]) == (fwd, off, n)


class _TableSource:
    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.parser = ProcNetDevParser()

    def read(self) -> dict[str, IfCounters]:
        raise AssertionError("the meter must use read_table")

    def read_table(self) -> CounterTable:
        return self.parser.parse(self.texts.pop(0))


class _DictSource:
    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def read(self) -> dict[str, IfCounters]:
        return parse_proc_net_dev(self.texts.pop(0), fast=False)


def test_meter_through_tables_equals_meter_through_dicts() -> None:
    texts = [HEADER + f"  eth0: {640 * k} {10 * k} 0 0 0 0 0 0 0 {k} 0 0 0 0 0 0\n" for k in range(6)]
    a, b = Meter(_TableSource(list(texts))), Meter(_DictSource(list(texts)))
    for k in range(6):
        assert a.sample(k * 0.1) == b.sample(k * 0.1)
    assert a.rates(0.3) == b.rates(0.3)
    assert a.last_counters == b.last_counters == {"eth0": IfCounters(50, 5, 3200, 0, 0, 0)}


def test_daemon_sources_take_the_fast_path() -> None:
    """The simulated backend's and the benchmark's files are read on the fast path, 4000 interfaces too."""
    from xtc_lab.bench.daemon_bench import _BenchBackend, _texts
    from xtc_lab.sim.host import render_proc_net_dev

    text = render_proc_net_dev({f"vif{k}.{j}": (k * 1000 + j, 7 * k) for k in range(1, 1001) for j in range(4)})
    parser, fast, _, careful, _ = both(text)
    assert parser.fast_parses == 1 and len(fast) == 4001
    assert_same(fast, careful)
    bench = _BenchBackend(50, _texts(50, 3, 0.1, 1))
    tables = [bench.read_table() for _ in range(3)]
    assert bench.parser.fast_parses == 3 and tables[2].names is tables[0].names


@pytest.mark.parametrize(
    "content",
    [
        HEADER.encode() + b"  eth0: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\n",
        HEADER.replace("\n", "\r\n").encode() + b"  eth0: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\r\n  eth1: 5 6 0 0 0 0 0 0 7 8 0 0 0 0 0 0",
        HEADER.replace("\n", "\r").encode() + b"  eth0: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\r",
        HEADER.encode() + "  éth0: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\n  eth1: 5 6 0 0 0 0 0 0 7 8 0 0 0 0 0 0\n".encode(),
        HEADER.encode() + b"  eth0: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\n  eth1: 5 \xff 0 0 0 0 0 0 7 8 0 0 0 0 0 0\n",
        HEADER.encode() + b"  eth0: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\r\n\r\n",
    ],
)
def test_source_reads_bytes_as_ascii_text(tmp_path: Path, content: bytes) -> None:
    """The source parses the file's bytes exactly as it parsed read_text(encoding="ascii", errors="replace")."""
    f = tmp_path / "dev"
    f.write_bytes(content)
    src = ProcNetDevSource(f)
    got = src.read_table().to_dict()
    problems: list[str] = []
    want = parse_proc_net_dev(f.read_text(encoding="ascii", errors="replace"), problems, fast=False)
    assert_same(got, want)
    assert src.last_problems == problems
