"""Meter: each VR's forwarded and offered packet rates over a control period.  Pure.

The control loop reads the host's interface counters once per control period
(:meth:`xtc.host.base.Host.read_counters`: netlink ``RTM_GETSTATS`` with 64-bit counters, or
``/proc/net/dev`` where netlink cannot be had; see :mod:`xtc.host.counters`) and hands them to
:meth:`PeriodMeter.update` with the time of the reading.  The mean rate over a period needs only
the counters at its two ends, so nothing is sampled in between.

Definitions (one per quantity, used by the daemon, the simulator and the benchmarks):

- ``forwarded_pps``: packets/s the VR forwarded = the sum over its host-side interfaces of the
  host-side RX packet counters' increase, divided by the time between the two readings.
- ``offered_pps``: packets/s offered to the VR = the same sum of host-side TX packet counters.
- ``counter_reset``: during the period an interface of the VR came or went, or one of its
  counters went backwards (the interface was re-created, e.g. the VR rebooted) or jumped by more
  than ``max_pps`` allows.  That interface adds nothing to the period's rates.

When both readings are :class:`~xtc.host.counters.CounterTable` (netlink) the meter works on
their arrays: the VRs' interfaces are mapped to rows once per interface list and VR list, and a
period is a few numpy operations over all interfaces; the result is the same as the per-interface
rule (which the other readings use).  Either way it is handed over as a :class:`Readings`, the one
readings type: the rates as arrays in the VR list's order (which :class:`~xtc.daemon.core.DaemonCore`
uses as they are) and, read as a mapping, VR name to :class:`VrReading`.

Wraps and resets follow :func:`xtc.host.counters.counter_delta`: on 64-bit counters any decrease
is a reset; 32-bit counters (32-bit kernels only) may wrap once per period.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Iterator, Mapping, NamedTuple

import numpy as np

from xtc.host.counters import CounterTable, counter_delta
from xtc.host.ifcounters import IfCounters

__all__ = ["VrReading", "Readings", "PeriodMeter", "CpuMeter", "DEFAULT_MAX_PPS"]

#: The largest plausible packet rate of one interface: 100 GbE line rate at 64-byte frames.
DEFAULT_MAX_PPS = 150e6


class VrReading(NamedTuple):
    """What the meter saw of one VR over the last control period (immutable).

    A named tuple, so that the meter builds one per VR and period at C speed
    (``tuple.__new__`` through ``map``).

    Attributes
    ----------
    forwarded_pps : float or None
        Packets/s the VR forwarded (host-side RX of its interfaces), None if unknown.
    offered_pps : float or None
        Packets/s offered to the VR (host-side TX of its interfaces), None if unknown.
    counter_reset : bool
        A counter went backwards or an interface came or went during the period.
    """

    forwarded_pps: float | None
    offered_pps: float | None = None
    counter_reset: bool = False


# (forwarded_pps, offered_pps, counter_reset) -> VrReading, without a Python-level call.
_reading_of = partial(tuple.__new__, VrReading)


class Readings(Mapping[str, VrReading]):
    """The meter's readings of one period on arrays, and the read-only mapping of VR name to
    :class:`VrReading` every caller sees (an entry is built when it is looked up).

    ``names`` are the VR names in the order of the arrays (the same list object from period to
    period while the meter's row map stays the same, so a consumer can keep its own alignment);
    ``forwarded`` and ``offered`` are the rates (0.0 where ``known`` is False, i.e. None in the
    mapping) and ``reset`` is ``counter_reset``; ``offered_known`` is None, or where ``offered`` is
    known when that differs from ``known`` (the meter never gives that, :meth:`of` may).  The one type of a period's readings: the
    meter gives nothing else, and :meth:`xtc.daemon.core.DaemonCore.period` takes any other mapping
    through :meth:`of`.
    """

    __slots__ = ("names", "index", "forwarded", "offered", "known", "reset", "offered_known")

    def __init__(self, names: list[str], index: Mapping[str, int], forwarded: np.ndarray, offered: np.ndarray,
                 known: np.ndarray, reset: np.ndarray, offered_known: np.ndarray | None = None) -> None:
        self.names = names
        self.index = index
        self.forwarded = forwarded
        self.offered = offered
        self.known = known
        self.reset = reset
        self.offered_known = offered_known

    @classmethod
    def of(cls, readings: Mapping[str, VrReading], names: list[str] | None = None,
           index: Mapping[str, int] | None = None) -> "Readings":
        """The same readings on arrays (``readings`` itself if it is one): in its order, ``known``
        where ``forwarded_pps`` is, ``offered_known`` where ``offered_pps`` is too (if not
        everywhere ``known`` is).  ``names`` and ``index``: ``list(readings)`` and its index, when the caller
        keeps them from period to period (consumers align on the same list object)."""
        if isinstance(readings, Readings):
            return readings
        if names is None or index is None:
            names = list(readings)
            index = {n: k for k, n in enumerate(names)}
        got = list(readings.values())
        known = np.array([r.forwarded_pps is not None for r in got], dtype=bool)
        fwd = np.array([0.0 if (v := r.forwarded_pps) is None else v for r in got], dtype=np.float64)
        off_known = known & np.array([r.offered_pps is not None for r in got], dtype=bool)
        off = np.array([0.0 if (v := r.offered_pps) is None else v for r in got], dtype=np.float64)
        off[~off_known] = 0.0
        reset = np.array([bool(r.counter_reset) for r in got], dtype=bool)
        return cls(names, index, fwd, off, known, reset, None if np.array_equal(off_known, known) else off_known)

    def __getitem__(self, vr: str) -> VrReading:
        k = self.index[vr]
        if self.known[k]:
            ok = self.offered_known
            off = self.offered[k].item() if ok is None or ok[k] else None
            return _reading_of((self.forwarded[k].item(), off, bool(self.reset[k])))
        return _reading_of((None, None, bool(self.reset[k])))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, vr: object) -> bool:
        return vr in self.index

    def __repr__(self) -> str:
        return f"Readings({dict(self.items())!r})"


class PeriodMeter:
    """Per-VR rates from two consecutive counter readings.

    Parameters
    ----------
    max_pps : float
        Largest plausible rate of one interface, packets/s; a larger increase is a jump (a reset
        the counter values cannot show), not traffic.
    """

    def __init__(self, max_pps: float = DEFAULT_MAX_PPS) -> None:
        if not max_pps > 0:
            raise ValueError(f"max_pps must be > 0, got {max_pps!r}")
        self.max_pps = float(max_pps)
        self._t_s: float | None = None
        self._prev: Mapping[str, IfCounters] = {}
        self._layout: _Layout | None = None
        #: The VR names of the last readings made VR by VR, and their index (see :meth:`_on_arrays`).
        self._names: list[str] = []
        self._index: dict[str, int] = {}

    @property
    def last_time_s(self) -> float | None:
        """Time of the last reading, seconds (None before the first)."""
        return self._t_s

    def reset(self) -> None:
        """Forget the last reading (the next :meth:`update` starts a new period)."""
        self._t_s = None
        self._prev = {}

    def update(
        self,
        now_s: float,
        counters: Mapping[str, IfCounters],
        vrs: Mapping[str, tuple[str, ...]],
        counter_bits: int = 64,
    ) -> Readings:
        """Take a new reading; return each VR's rates since the previous one.

        Parameters
        ----------
        now_s : float
            Monotonic time of the reading, seconds.
        counters : mapping of interface name to IfCounters
            The host's counters at ``now_s``.
        vrs : mapping of VR name to its host-side interface names
            Which interfaces belong to which VR.
        counter_bits : {64, 32}
            Width of the counters (see :func:`xtc.host.counters.counter_delta`).

        Returns
        -------
        Readings
            One entry per VR of ``vrs``, in its order; rates are None on the first reading, after
            a reading that did not advance the clock, and for a VR none of whose interfaces were
            seen at both ends of the period.  On two tables of 64-bit counters the arrays are
            computed at once; on other counters VR by VR, then put on arrays.
        """
        prev, t_prev = self._prev, self._t_s
        self._prev, self._t_s = counters, now_s
        dt_s = None if t_prev is None else now_s - t_prev
        n = len(vrs)
        if dt_s is None or dt_s <= 0:
            return self._on_arrays(vrs, [0.0] * n, [0.0] * n, [False] * n, [False] * n)
        max_increase = self.max_pps * dt_s
        if counter_bits == 64 and isinstance(counters, CounterTable) and isinstance(prev, CounterTable):
            return self._update_tables(dt_s, prev, counters, vrs, max_increase)
        top = 1 << counter_bits if counter_bits in (32, 64) else 0
        fwd: list[float] = []
        off: list[float] = []
        known: list[bool] = []
        resets: list[bool] = []
        for vr, ifaces in vrs.items():
            rx = tx = 0
            seen = 0
            reset = False
            for name in ifaces:
                cur = counters.get(name)
                old = prev.get(name)
                if cur is None or old is None:
                    reset = reset or (cur is None) != (old is None)
                    continue
                if cur is old:  # the reader hands back the same object while nothing moved
                    seen += 1
                    continue
                o_rx, c_rx, o_tx, c_tx = old.rx_packets, cur.rx_packets, old.tx_packets, cur.tx_packets
                # The common case inline (both counters grew plausibly): what counter_delta says
                # of it, without its calls; anything else goes through counter_delta.
                if 0 <= o_rx <= c_rx < top and 0 <= o_tx <= c_tx < top and c_rx - o_rx <= max_increase \
                        and c_tx - o_tx <= max_increase:
                    rx += c_rx - o_rx
                    tx += c_tx - o_tx
                    seen += 1
                    continue
                d_rx = counter_delta(old.rx_packets, cur.rx_packets, counter_bits=counter_bits, max_increase=max_increase)
                d_tx = counter_delta(old.tx_packets, cur.tx_packets, counter_bits=counter_bits, max_increase=max_increase)
                if d_rx.verdict in ("reset", "jump") or d_tx.verdict in ("reset", "jump"):
                    reset = True
                    continue
                rx += d_rx.delta
                tx += d_tx.delta
                seen += 1
            if seen:
                fwd.append(rx / dt_s)
                off.append(tx / dt_s)
            else:
                fwd.append(0.0)
                off.append(0.0)
            known.append(seen != 0)
            resets.append(reset)
        return self._on_arrays(vrs, fwd, off, known, resets)

    def _on_arrays(self, vrs: Mapping[str, tuple[str, ...]], fwd: list[float], off: list[float], known: list[bool],
                   resets: list[bool]) -> Readings:
        """The per-VR results (in the order of ``vrs``) as :class:`Readings`, with the same names list as
        last time while the VRs stay the same (0.0 where unknown: Readings' contract)."""
        names = self._names
        if len(names) != len(vrs) or names != list(vrs):
            names = self._names = list(vrs)
            self._index = {n: k for k, n in enumerate(names)}
        return Readings(names, self._index, np.array(fwd, dtype=np.float64), np.array(off, dtype=np.float64),
                        np.array(known, dtype=bool), np.array(resets, dtype=bool))

    def _update_tables(self, dt_s: float, prev: CounterTable, cur: CounterTable,
                       vrs: Mapping[str, tuple[str, ...]], max_increase: float) -> Readings:
        """:meth:`update` on two tables of 64-bit counters, all interfaces at once."""
        lay = self._layout
        if lay is None or not lay.fits(prev, cur, vrs):
            lay = self._layout = _Layout(prev, cur, vrs)
        ps, cs = prev.stats, cur.stats
        o_rx, c_rx = ps.rx_packets[lay.rows_prev], cs.rx_packets[lay.rows_cur]
        o_tx, c_tx = ps.tx_packets[lay.rows_prev], cs.tx_packets[lay.rows_cur]
        # The plausible-growth test in integers: d <= max_increase <=> d <= floor(max_increase).
        limit = np.uint64(min(math.floor(max_increase), 2**64 - 1))
        d_rx = c_rx - o_rx  # wraps modulo 2**64 where the counter went down: excluded below
        d_tx = c_tx - o_tx
        ok = (o_rx <= c_rx) & (o_tx <= c_tx) & (d_rx <= limit) & (d_tx <= limit)
        n = len(lay.vr_names)
        owner = lay.owner
        rx = np.bincount(owner, weights=np.where(ok, d_rx, 0).astype(np.float64), minlength=n)
        tx = np.bincount(owner, weights=np.where(ok, d_tx, 0).astype(np.float64), minlength=n)
        seen = np.bincount(owner, weights=ok, minlength=n)
        reset = lay.reset.copy()
        if not ok.all():
            # Decreases and jumps: counter_delta's verdict, interface by interface (rare).
            for i in np.flatnonzero(~ok).tolist():
                a = counter_delta(int(o_rx[i]), int(c_rx[i]), counter_bits=64, max_increase=max_increase)
                b = counter_delta(int(o_tx[i]), int(c_tx[i]), counter_bits=64, max_increase=max_increase)
                v = owner[i]
                if a.verdict in ("reset", "jump") or b.verdict in ("reset", "jump"):
                    reset[v] = True
                else:
                    rx[v] += a.delta
                    tx[v] += b.delta
                    seen[v] += 1
        # numpy's division is IEEE's, as Python's float division: the same rates.
        known = seen != 0
        fwd = rx / dt_s
        off = tx / dt_s
        if not known.all():
            fwd[~known] = 0.0
            off[~known] = 0.0
        return Readings(lay.vr_names, lay.vr_index, fwd, off, known, reset)


class CpuMeter:
    """Each VR's CPU use over a period, from two readings of its cumulative CPU time.  Pure.

    ``cpu_percent`` = the increase of the VR's CPU time (ns, the host's accounting:
    :meth:`xtc.host.base.Host.read_cpu_ns`) over the time between the two readings, in percent of
    one CPU (100 = one CPU busy the whole period).  A VR read for the first time, or whose CPU time
    went backwards (it was restarted), or read twice at the same time, has no value yet; its reading
    is the start of the next period.  A VR not read is forgotten.

    Parameters
    ----------
    max_percent : float
        Largest plausible use, percent of one CPU (a VR has at most that many CPUs' worth); more is
        not a measurement (a clock or accounting fault) and gives no value.
    """

    def __init__(self, max_percent: float = 100_000.0) -> None:
        self.max_percent = float(max_percent)
        self._last: dict[str, tuple[float, int]] = {}

    def known(self) -> frozenset[str]:
        """The VRs with a reading to start the next period from."""
        return frozenset(self._last)

    def reset(self) -> None:
        """Forget every reading."""
        self._last = {}

    def start(self, now_s: float, cpu_ns: Mapping[str, int]) -> None:
        """Take ``cpu_ns`` (read at ``now_s``) as the start of the next period of those VRs."""
        for vr, ns in cpu_ns.items():
            self._last[vr] = (now_s, ns)

    def keep(self, vrs: frozenset[str] | set[str]) -> None:
        """Forget the VRs not in ``vrs``."""
        if any(vr not in vrs for vr in self._last):
            self._last = {vr: v for vr, v in self._last.items() if vr in vrs}

    def update(self, now_s: float, cpu_ns: Mapping[str, int]) -> dict[str, float]:
        """The CPU use (percent of one CPU) of each VR of ``cpu_ns`` (read at ``now_s``, seconds)
        since its last reading; ``cpu_ns`` becomes the start of the next period."""
        out: dict[str, float] = {}
        last = self._last
        new: dict[str, tuple[float, int]] = {}
        for vr, ns in cpu_ns.items():
            prev = last.get(vr)
            if prev is not None and now_s > prev[0] and ns >= prev[1]:
                pct = (ns - prev[1]) / ((now_s - prev[0]) * 1e9) * 100.0
                if pct <= self.max_percent:
                    out[vr] = pct
            new[vr] = (now_s, ns)
        self._last = new
        return out


class _Layout:
    """Where each VR's interfaces are in two consecutive tables (kept while the lists stay the same).

    ``rows_prev[i]``, ``rows_cur[i]``: the rows of the i-th interface seen in both tables,
    ``owner[i]`` the index of its VR in ``vr_names``; ``reset[v]``: one of VR v's interfaces is in
    exactly one of the two tables (it came or went).
    """

    def __init__(self, prev: CounterTable, cur: CounterTable, vrs: Mapping[str, tuple[str, ...]]) -> None:
        self.prev_names, self.cur_names = prev.names, cur.names
        self.vrs_copy = dict(vrs)
        self.vr_names = list(vrs)
        self.vr_index = {n: v for v, n in enumerate(self.vr_names)}
        pi, ci = prev.index, cur.index
        rows_prev: list[int] = []
        rows_cur: list[int] = []
        owner: list[int] = []
        reset = np.zeros(len(self.vr_names), dtype=bool)
        for v, ifaces in enumerate(vrs.values()):
            for name in ifaces:
                p, c = pi.get(name), ci.get(name)
                if p is None or c is None:
                    if (p is None) != (c is None):
                        reset[v] = True
                    continue
                rows_prev.append(p)
                rows_cur.append(c)
                owner.append(v)
        self.rows_prev = np.array(rows_prev, dtype=np.intp)
        self.rows_cur = np.array(rows_cur, dtype=np.intp)
        self.owner = np.array(owner, dtype=np.intp)
        self.reset = reset

    def fits(self, prev: CounterTable, cur: CounterTable, vrs: Mapping[str, tuple[str, ...]]) -> bool:
        if prev.names is not self.prev_names or cur.names is not self.cur_names:
            return False
        return vrs == self.vrs_copy  # also when the same dict was changed in place
