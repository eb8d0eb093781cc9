"""Interface packet counters: read them from the kernel, and difference them.

The control loop needs the mean packet rate of each interface over a control
period, which is the difference of two readings of its cumulative counters
taken at the period's ends divided by the period.  This module is where the
readings come from (the netlink reader lives here; the ``/proc/net/dev`` reader
in :mod:`xtc.host.procnetdev`, the difference rule in
:mod:`xtc.host.counterdelta`, the errors in :mod:`xtc.host.errors`, the
namespace handling in :mod:`xtc.host.netns`: each is importable from here too).

Public API
----------
IfCounters
    One interface's cumulative counters (rx/tx packets, bytes, drops).
CounterSource
    Protocol: ``read() -> Mapping[str, IfCounters]`` (interface name -> counters)
    of every interface of one network namespace.
NetlinkCounters(netns=None)
    Reads the 64-bit counters with one ``RTM_GETSTATS`` dump (link stats
    only) and names them with an ifindex -> name map kept from
    ``RTM_GETLINK`` dumps; returns a :class:`CounterTable`.  The preferred
    source: at 4000 interfaces a read costs about 3.3 ms of CPU (3.1 ms of it
    in the kernel) where ``/proc/net/dev`` costs about 33 ms (7 ms in the
    kernel, the rest parsing); measured with ``lab/xtc_lab/bench/counters_cost.py``.
CounterTable
    One reading as arrays, and a read-only mapping of name to IfCounters.
ProcNetDevCounters(path="/proc/net/dev", netns=None)
    Reads and parses ``/proc/net/dev`` (or a recorded file at ``path``;
    :mod:`xtc.host.procnetdev`).
open_counters(prefer="netlink", netns=None, proc_path=None) -> CounterSource
    Netlink when the kernel answers ``RTM_GETSTATS``, else ``/proc/net/dev``;
    the reason for a fallback is logged and kept in ``fallback_reason``.
parse_proc_net_dev(text, problems=None) -> dict[str, IfCounters]
    Pure parser of ``/proc/net/dev``.
counter_delta(prev, cur, *, counter_bits=64, max_increase=None) -> CounterDelta
    Pure: the increase of one counter between two readings, or the verdict
    that the counter was reset (:mod:`xtc.host.counterdelta`: wraps and resets).
kernel_counter_bits(machine=None) -> int
    Width at which the running kernel's counters can wrap (32 or 64).
CounterError, CounterReadError, StatsUnsupportedError, ProcNetDevFormatError
    Errors.  Every failure of the kernel interfaces surfaces as one of these,
    naming the source, the namespace and the operation; never a bare OSError.

Namespaces
----------
A netlink socket, and an open ``/proc/.../net/dev`` file, stay bound to the
network namespace they were created in.  To read a named namespace
(``/run/netns/<name>``, as ``ip netns`` makes them), the adapters open their
socket or file in a short-lived helper thread that first enters the namespace
with ``setns(2)`` (``os.setns`` on Python >= 3.12, else pyroute2's
``pyroute2.netns.setns``; only that thread changes namespace, and it exits
right after).  The calling thread never changes namespace.  Each read checks
(one ``stat``) that the name still refers to the same namespace: when it was
deleted the read fails, when it was re-created the adapter reopens in the new
one.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Callable, Iterator, Literal, Mapping, Protocol, TypeVar, runtime_checkable

import numpy as np

from xtc.host import rtnl_codec
from xtc.host.counterdelta import CounterDelta, counter_delta, kernel_counter_bits
from xtc.host.errors import CounterError, CounterReadError, ProcNetDevFormatError, StatsUnsupportedError
from xtc.host.ifcounters import IfCounters
from xtc.host.netlink import NetlinkDecodeError, NetlinkReplyError, RouteSocket, error_text
from xtc.host.netns import Netns
from xtc.host.procnetdev import ProcNetDevCounters, parse_proc_net_dev

_T = TypeVar("_T")

__all__ = [
    "IfCounters",
    "CounterTable",
    "CounterSource",
    "NetlinkCounters",
    "ProcNetDevCounters",
    "open_counters",
    "parse_proc_net_dev",
    "CounterDelta",
    "counter_delta",
    "kernel_counter_bits",
    "CounterError",
    "CounterReadError",
    "StatsUnsupportedError",
    "ProcNetDevFormatError",
    "NETNS_RUN_DIR",
    "Netns",
]

log = logging.getLogger(__name__)

#: Where ``ip netns`` keeps the named network namespaces.
NETNS_RUN_DIR = "/run/netns"


# ---------------------------------------------------------------------------- table


class CounterTable(Mapping[str, IfCounters]):
    """One reading of many interfaces as arrays: a read-only mapping of name to :class:`IfCounters`.

    What :meth:`NetlinkCounters.read` returns.  As a mapping it is what every counter source
    returns (an :class:`IfCounters` is built when an entry is looked up); the meter
    (:class:`xtc.daemon.meter.PeriodMeter`) reads the arrays instead, a whole period in a few
    numpy operations.

    Parameters
    ----------
    names : tuple of str
        Interface name of each row.  Consecutive readings of an unchanged interface list share
        the same tuple object (and ``index``), which the meter uses to keep its row maps.
    index : dict of str to int
        Row of each name.
    stats : rtnl_codec.StatsArrays
        The counters, row by row (``stats.ifindex``: each row's ifindex).
    """

    __slots__ = ("names", "index", "stats")

    def __init__(self, names: tuple[str, ...], index: dict[str, int], stats: rtnl_codec.StatsArrays) -> None:
        self.names = names
        self.index = index
        self.stats = stats

    def __getitem__(self, name: str) -> IfCounters:
        i = self.index[name]
        s = self.stats
        return IfCounters(int(s.rx_packets[i]), int(s.tx_packets[i]), int(s.rx_bytes[i]), int(s.tx_bytes[i]),
                          int(s.rx_drops[i]), int(s.tx_drops[i]))

    def __contains__(self, name: object) -> bool:
        return name in self.index

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"CounterTable({len(self.names)} interfaces)"


# --------------------------------------------------------------------------- sources


@runtime_checkable
class CounterSource(Protocol):
    """Anything that returns the current counters of every interface of one namespace.

    Attributes
    ----------
    counter_bits : int
        Width at which the counters can wrap (see :func:`counter_delta`).
    """

    counter_bits: int

    def read(self) -> Mapping[str, IfCounters]:
        """Counters per interface name; raises :class:`CounterError` subclasses only."""
        ...

    def close(self) -> None:
        """Release sockets and files; idempotent."""
        ...


# Errors that mean "this process cannot have netlink route sockets at all".
_NO_NETLINK = (errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT, errno.EPERM, errno.EACCES)
# Replies that mean "this kernel has no RTM_GETSTATS".
_NO_GETSTATS = (errno.EOPNOTSUPP, errno.EINVAL)
_RTMGRP_LINK = 1  # linux/rtnetlink.h: link (RTM_NEWLINK/RTM_DELLINK) notifications


class NetlinkCounters:
    """Reads every interface's 64-bit counters with one ``RTM_GETSTATS`` dump.

    Parameters
    ----------
    netns : str, optional
        Name of a network namespace (``/run/netns/<name>``) to read; default
        the caller's.  See the module notes on how the socket is opened there.
    timeout_s : float
        Longest wait for one datagram of a reply.

    Attributes
    ----------
    counter_bits : int
        :func:`kernel_counter_bits`.
    ifindex : dict of str to int
        The ifindex of each name of the last read.  A name whose ifindex
        changed between two reads is a re-created interface, even when its
        counters did not go down.
    name_refreshes : int
        ``RTM_GETLINK`` dumps done so far (the first, and one per change).

    Notes
    -----
    Both sockets are :class:`xtc.host.netlink.RouteSocket` (the one netlink adapter).
    Per read: drain the link-notification socket (a non-blocking ``recv``),
    dump ``RTM_GETSTATS`` (``IFLA_STATS_LINK_64`` only, about 230 bytes per
    interface) into one buffer, decode it into arrays at fixed offsets
    (:func:`xtc.host.rtnl_codec.decode_stats_arrays`), and name the rows (kept
    while the ifindex list is unchanged).  The ifindex -> name map is dumped again
    (``RTM_GETLINK``) only when a link notification arrived (an interface was
    added, removed, renamed or changed state), when the notification socket
    overflowed, or when the stats name an ifindex the map lacks.  An
    interface that appears between the link and the stats dump of one read is
    left out of that read.  A dump the kernel marks interrupted (the
    interface list changed during it) is repeated, up to three times.
    """

    kind = "netlink"
    _MAX_ATTEMPTS = 3

    def __init__(self, netns: str | None = None, *, timeout_s: float = 2.0) -> None:
        self.netns = netns
        self.timeout_s = timeout_s
        self.counter_bits = kernel_counter_bits()
        self.name_refreshes = 0
        self._ns = Netns(netns, "opening a netlink route socket") if netns is not None else None
        self._sock: RouteSocket | None = None
        self._monitor: RouteSocket | None = None
        self._names: dict[int, str] | None = None
        # The rows of the last reading: its ifindexes, and the names and row map built for them.
        self._rows: tuple[np.ndarray, tuple[str, ...], dict[str, int]] | None = None
        self._open()

    @property
    def ifindex(self) -> dict[str, int]:
        """The ifindex of each interface name of the last read."""
        if self._rows is None:
            return {}
        idx, names, index = self._rows
        return {name: int(idx[row]) for name, row in index.items()}

    # -- sockets

    def _open(self) -> None:
        def both() -> tuple[RouteSocket, RouteSocket]:
            monitor = RouteSocket(groups=_RTMGRP_LINK)
            try:
                return RouteSocket(timeout_s=self.timeout_s), monitor
            except BaseException:
                monitor.close()
                raise

        try:
            if self._ns is not None:
                self._sock, self._monitor = self._ns.run(both)
            else:
                self._sock, self._monitor = both()
        except OSError as e:
            kind = StatsUnsupportedError if e.errno in _NO_NETLINK else CounterReadError
            raise kind("opening a netlink route socket", self.netns, str(e), e.errno) from None
        self._names = None
        self._rows = None

    def close(self) -> None:
        """Close the sockets; idempotent.  A later :meth:`read` reopens them."""
        for s in (self._sock, self._monitor):
            if s is not None:
                s.close()
        self._sock = self._monitor = None

    def __enter__(self) -> NetlinkCounters:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- dumps

    def _with_errors(self, what: str, run: Callable[[], _T]) -> _T:
        """Run one dump; any failure closes the sockets (a half-read dump would make
        the next request fail with EBUSY) and becomes a CounterReadError."""
        try:
            return run()
        except NetlinkReplyError as e:
            self.close()
            kind = StatsUnsupportedError if e.errno in _NO_GETSTATS and "GETSTATS" in what else CounterReadError
            raise kind(what, self.netns, e.reason, e.errno) from None
        except NetlinkDecodeError as e:
            self.close()
            raise CounterReadError(what, self.netns, f"malformed kernel reply: {e}") from None
        except TimeoutError:
            self.close()
            raise CounterReadError(what, self.netns, f"no reply within {self.timeout_s} s", errno.ETIMEDOUT) from None
        except OSError as e:  # the socket (NetlinkError: its errno, named)
            self.close()
            raise CounterReadError(what, self.netns, error_text(e.errno) if e.errno else str(e), e.errno) from None

    def _complete_dump(self, what: str, encode: Callable[[int], bytes],
                       decode: Callable[..., rtnl_codec.DumpStatus]) -> dict:
        """One dump the kernel did not interrupt (up to ``_MAX_ATTEMPTS`` tries), decoded into a dict."""
        for _ in range(self._MAX_ATTEMPTS):
            out: dict = {}
            if not self._with_errors(what, lambda: self._dump(what, encode, decode, out)):
                return out
        raise CounterReadError(what, self.netns, f"interrupted {self._MAX_ATTEMPTS} times in a row")

    def _refresh_names(self) -> dict[int, str]:
        names = self._complete_dump("netlink RTM_GETLINK dump", rtnl_codec.encode_getlink_dump,
                                    rtnl_codec.decode_link_into)
        self._names = names
        self.name_refreshes += 1
        return names

    def _dump(self, what: str, encode: Callable[[int], bytes], decode: Callable[..., rtnl_codec.DumpStatus],
              into: dict) -> bool:
        """One dump decoded into ``into``; return whether it was interrupted."""
        sock = self._sock
        assert sock is not None
        seq = sock.next_seq()
        return decode(sock.dump(encode(seq), seq, what), into, seq).interrupted

    def _dump_stats(self) -> tuple[rtnl_codec.StatsArrays, bool]:
        """One stats dump, received whole and decoded at once; return it and whether it was interrupted.

        The datagrams' leading runs of stats messages are skipped by one numpy check each
        (:func:`xtc.host.rtnl_codec.stats_run_bytes`) while the socket looks for the dump's end."""
        sock = self._sock
        assert sock is not None
        seq = sock.next_seq()
        view = sock.dump(rtnl_codec.encode_getstats_dump(seq), seq, "netlink RTM_GETSTATS dump",
                         rtnl_codec.stats_run_bytes)
        arrays, status = rtnl_codec.decode_stats_arrays(view, seq)
        return arrays, status.interrupted

    def _read_stats(self) -> rtnl_codec.StatsArrays:
        what = "netlink RTM_GETSTATS dump"
        for _ in range(self._MAX_ATTEMPTS):
            arrays, interrupted = self._with_errors(what, self._dump_stats)
            if not interrupted:
                return arrays
        raise CounterReadError(what, self.netns, f"interrupted {self._MAX_ATTEMPTS} times in a row")

    def _links_changed(self) -> bool:
        """Drain the link-notification socket; True when anything (or an overflow) arrived."""
        monitor = self._monitor
        assert monitor is not None
        try:
            return monitor.pending_notifications()
        except OSError as e:
            self.close()
            raise CounterReadError("reading link notifications", self.netns, error_text(e.errno) if e.errno else str(e),
                                   e.errno) from None

    def read(self) -> CounterTable:
        """Counters per interface name, in dump order (a :class:`CounterTable`).

        Raises
        ------
        StatsUnsupportedError
            The kernel has no ``RTM_GETSTATS`` (or no netlink for this process).
        CounterReadError
            Any other failure (namespace gone, socket error, timeout,
            malformed reply), naming the operation.
        """
        if self._ns is not None and self._ns.changed():
            self.close()
        if self._sock is None:
            self._open()
        names = self._names
        refreshed = False
        if self._links_changed() or names is None:
            names = self._refresh_names()
            refreshed = True
        stats = self._read_stats()
        rows = self._rows
        if not refreshed and rows is not None and np.array_equal(rows[0], stats.ifindex):
            return CounterTable(rows[1], rows[2], stats)
        known = [names.get(ix) for ix in stats.ifindex.tolist()]
        if None in known and not refreshed:
            names = self._refresh_names()
            known = [names.get(ix) for ix in stats.ifindex.tolist()]
        if None in known:  # appeared between the link and the stats dump: left out of this read
            keep = np.array([n is not None for n in known])
            stats = rtnl_codec.StatsArrays(*(getattr(stats, f)[keep] for f in rtnl_codec.StatsArrays.__slots__))
            known = [n for n in known if n is not None]
        # Two ifindexes cannot share a name in one namespace; a dict keeps the last if they did.
        index = {name: row for row, name in enumerate(known)}
        table_names = tuple(index)
        self._rows = (stats.ifindex, table_names, index)
        return CounterTable(table_names, index, stats)


def open_counters(
    prefer: Literal["netlink", "proc"] = "netlink",
    netns: str | None = None,
    proc_path: str | os.PathLike[str] | None = None,
) -> NetlinkCounters | ProcNetDevCounters:
    """The best counter source available.

    Parameters
    ----------
    prefer : {"netlink", "proc"}
        ``"netlink"`` tries :class:`NetlinkCounters` (with one probing read)
        and falls back to ``/proc/net/dev`` when the kernel or sandbox has no
        ``RTM_GETSTATS``; ``"proc"`` goes straight to ``/proc/net/dev``.
    netns : str, optional
        Network namespace to read (``/run/netns/<name>``).
    proc_path : str or os.PathLike, optional
        File for the ``/proc`` source (default ``/proc/net/dev`` of the
        namespace).

    Returns
    -------
    NetlinkCounters or ProcNetDevCounters
        After a fallback, ``fallback_reason`` of the returned source says why
        (also logged as a warning).

    Raises
    ------
    CounterError
        Neither source can be opened (e.g. the namespace does not exist).
    ValueError
        Unknown ``prefer``.
    """
    if prefer not in ("netlink", "proc"):
        raise ValueError(f"prefer must be 'netlink' or 'proc', got {prefer!r}")
    path = proc_path if proc_path is not None else "/proc/net/dev"
    if prefer == "proc":
        return ProcNetDevCounters(path, netns)
    nl: NetlinkCounters | None = None
    try:
        nl = NetlinkCounters(netns)
        nl.read()
        return nl
    except StatsUnsupportedError as e:
        if nl is not None:
            nl.close()
        reason = f"netlink RTM_GETSTATS unavailable ({e}); reading {path} instead"
    log.warning("%s", reason)
    proc = ProcNetDevCounters(path, netns)
    proc.fallback_reason = reason
    return proc


def counters_from_config(proc_net_dev: str | os.PathLike[str] = "/proc/net/dev") -> NetlinkCounters | ProcNetDevCounters:
    """The counter source a daemon configuration asks for (``[daemon] proc_net_dev``).

    The default path means "this host's counters": netlink, or ``/proc/net/dev`` where netlink
    cannot be had (:func:`open_counters`).  Any other path (``/proc/<pid>/net/dev`` of another
    namespace's process, a recorded file) is read as ``/proc/net/dev`` text.
    """
    if str(proc_net_dev) == "/proc/net/dev":
        return open_counters("netlink")
    return ProcNetDevCounters(proc_net_dev)
