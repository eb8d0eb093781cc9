"""Interface packet counters: read them from the kernel, and difference them.

The control loop needs the mean packet rate of each interface over a control
period, which is the difference of two readings of its cumulative counters
taken at the period's ends divided by the period.  This module gives those
readings and the difference rule.

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
    Reads and parses ``/proc/net/dev`` (or a recorded file at ``path``).
open_counters(prefer="netlink", netns=None, proc_path=None) -> CounterSource
    Netlink when the kernel answers ``RTM_GETSTATS``, else ``/proc/net/dev``;
    the reason for a fallback is logged and kept in ``fallback_reason``.
parse_proc_net_dev(text, problems=None) -> dict[str, IfCounters]
    Pure parser of ``/proc/net/dev``.
counter_delta(prev, cur, *, counter_bits=64, max_increase=None) -> CounterDelta
    Pure: the increase of one counter between two readings, or the verdict
    that the counter was reset (see "Differences" below).
kernel_counter_bits(machine=None) -> int
    Width at which the running kernel's counters can wrap (32 or 64).
CounterError, CounterReadError, StatsUnsupportedError, ProcNetDevFormatError
    Errors.  Every failure of the kernel interfaces surfaces as one of these,
    naming the source, the namespace and the operation; never a bare OSError.

Differences
-----------
Kernel counters only grow, so a counter that went *down* between two readings
either wrapped around its width or restarted from 0 because the interface was
deleted and created again under the same name (a VR reboots).

On a 64-bit kernel every counter either source reports is 64 bits wide (the
kernel's ``struct net_device_stats`` uses ``unsigned long`` and
``rtnl_link_stats64`` is u64; ``/proc/net/dev`` prints the same u64 values).
A 64-bit packet counter at 150 Mpps wraps after about 3900 years, so there is
no wrap to guess: a decrease is a reset, and :func:`counter_delta` says so
(verdict ``"reset"``).

Counters can be 32 bits wide only on a 32-bit kernel, where drivers that fill
``net_device_stats`` (``unsigned long``) give values that wrap at 2**32.  That
holds for **both** sources (netlink copies those values into its 64-bit
struct), so the width is a property of the kernel, not of the source: both
sources expose ``counter_bits`` (:func:`kernel_counter_bits` for live reads).
Only with ``counter_bits=32`` does :func:`counter_delta` apply the old
``/proc`` rule: a decrease from below 2**32 whose wrapped increase is at most
``max_increase`` is a 32-bit wrap, anything else a reset.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal, Mapping, Protocol, TypeVar, runtime_checkable

import numpy as np

from xtc.host.errors import MeterError
from xtc.host import rtnl_codec
from xtc.host.ifcounters import IfCounters
from xtc.host.netlink import NetlinkDecodeError, NetlinkReplyError, RouteSocket, error_text
from xtc.host.netns import NetnsOpenError, run_in_netns

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
]

log = logging.getLogger(__name__)

#: Where ``ip netns`` keeps the named network namespaces.
NETNS_RUN_DIR = "/run/netns"
_U64_MAX = 2**64 - 1


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


# --------------------------------------------------------------------------- errors


class CounterError(MeterError):
    """Base class of the counter readers' errors (a :class:`MeterError`)."""


class CounterReadError(CounterError):
    """The counters could not be read.

    Attributes
    ----------
    source : str
        What was being read ("netlink RTM_GETSTATS dump", a file path ...).
    netns : str or None
        The namespace, None for the caller's own.
    errno : int or None
        The error number when the failure had one.
    """

    def __init__(self, source: str, netns: str | None, reason: str, errno: int | None = None) -> None:
        where = f" in netns {netns!r}" if netns is not None else ""
        super().__init__(f"{source}{where}: {reason}")
        self.source = source
        self.netns = netns
        self.errno = errno


class StatsUnsupportedError(CounterReadError):
    """This kernel (or sandbox) offers no netlink ``RTM_GETSTATS``; use ``/proc/net/dev``."""


class ProcNetDevFormatError(CounterError, ValueError):
    """The text is not in ``/proc/net/dev`` format (no header, missing columns)."""


# --------------------------------------------------------------------------- differences

Verdict = Literal["ok", "wrap32", "reset", "jump"]


@dataclass(frozen=True, slots=True)
class CounterDelta:
    """The increase of one counter between two readings.

    Attributes
    ----------
    delta : int
        Units (packets, bytes) counted between the readings; never negative.
    verdict : {"ok", "wrap32", "reset", "jump"}
        ``"ok"``: a plain increase.  ``"wrap32"``: a 32-bit counter wrapped
        (only with ``counter_bits=32``).  ``"reset"``: the counter went down
        because it restarted from 0 (the interface was re-created);
        ``delta`` is then the new value, i.e. what was counted since the
        re-creation, a lower bound of the interval's traffic (0 when that
        value exceeds ``max_increase``).  ``"jump"``: an increase larger
        than ``max_increase``; nothing is counted.
    """

    delta: int
    verdict: Verdict


def counter_delta(
    prev: int, cur: int, *, counter_bits: int = 64, max_increase: float | None = None
) -> CounterDelta:
    """The increase of a cumulative counter between two readings.

    Parameters
    ----------
    prev, cur : int
        The counter at the older and at the newer reading, 0 .. 2**counter_bits - 1.
    counter_bits : {64, 32}
        Width at which the counter wraps: 64 on 64-bit kernels (both sources),
        32 only on 32-bit kernels; see the module notes and
        :func:`kernel_counter_bits`.
    max_increase : float, optional
        Largest plausible increase between the two readings (the largest
        plausible rate times the interval, e.g. packets).  Needed with
        ``counter_bits=32`` to tell a wrap from a reset; with 64 bits it only
        turns implausible increases into ``"jump"``.

    Returns
    -------
    CounterDelta

    Raises
    ------
    ValueError
        A value outside the counter's range, an unknown width, or
        ``counter_bits=32`` without ``max_increase``.
    """
    if counter_bits not in (32, 64):
        raise ValueError(f"counter_bits must be 32 or 64, got {counter_bits}")
    top = 1 << counter_bits
    if not (0 <= prev < top and 0 <= cur < top):
        raise ValueError(f"counter values must be in 0..2**{counter_bits}-1, got prev={prev}, cur={cur}")
    if counter_bits == 32 and max_increase is None:
        raise ValueError("a 32-bit counter needs max_increase to tell a wrap from a reset")
    if cur >= prev:
        d = cur - prev
        if max_increase is not None and d > max_increase:
            return CounterDelta(0, "jump")
        return CounterDelta(d, "ok")
    if counter_bits == 32:
        wrapped = top - prev + cur
        assert max_increase is not None
        if wrapped <= max_increase:
            return CounterDelta(wrapped, "wrap32")
    if max_increase is not None and cur > max_increase:
        return CounterDelta(0, "reset")
    return CounterDelta(cur, "reset")


_MACHINES_64 = frozenset(
    {
        "x86_64", "amd64", "aarch64", "arm64", "aarch64_be", "ppc64", "ppc64le", "s390x",
        "riscv64", "mips64", "loongarch64", "sparc64", "alpha", "ia64",
    }
)  # fmt: skip


def kernel_counter_bits(machine: str | None = None) -> int:
    """Width (bits) at which the kernel's interface counters can wrap.

    Parameters
    ----------
    machine : str, optional
        ``uname -m`` of the kernel; default the running one (``os.uname()``).

    Returns
    -------
    int
        64 for a 64-bit kernel, 32 otherwise (also for a machine name not
        known to be 64-bit: the 32-bit rule then still needs a plausibility
        bound, so it cannot silently miscount a 64-bit counter).
    """
    m = os.uname().machine if machine is None else machine
    return 64 if m.lower() in _MACHINES_64 else 32


# --------------------------------------------------------------------------- /proc/net/dev parser

# (section, column) in the header -> IfCounters field.
_PROC_COLUMNS = {
    ("receive", "packets"): "rx_packets",
    ("transmit", "packets"): "tx_packets",
    ("receive", "bytes"): "rx_bytes",
    ("transmit", "bytes"): "tx_bytes",
    ("receive", "drop"): "rx_drops",
    ("transmit", "drop"): "tx_drops",
}
_FIELDS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_drops", "tx_drops")


def _proc_header(line0: str, line1: str) -> tuple[int, list[int]]:
    """Number of value columns and, per IfCounters field, its column index."""
    if not line0.lstrip().startswith("Inter-") or "|" not in line0 or "|" not in line1:
        raise ProcNetDevFormatError(
            "not /proc/net/dev: expected the header 'Inter-|   Receive ... |  Transmit' "
            f"on the first line, got {line0[:60]!r}"
        )
    sections = [s.strip().lower() for s in line0.split("|")[1:]]
    groups = [g.split() for g in line1.split("|")[1:]]
    if len(sections) != len(groups):
        raise ProcNetDevFormatError(
            f"not /proc/net/dev: the header names {len(sections)} sections "
            f"but has {len(groups)} column groups"
        )
    where: dict[str, int] = {}
    ncols = 0
    for section, cols in zip(sections, groups):
        for col in cols:
            field = _PROC_COLUMNS.get((section, col))
            if field is not None:
                where.setdefault(field, ncols)
            ncols += 1
    missing = [f for f in _FIELDS if f not in where]
    if missing:
        raise ProcNetDevFormatError(f"not /proc/net/dev: the header has no column for {', '.join(missing)}")
    return ncols, [where[f] for f in _FIELDS]


def _counter_value(token: str) -> int | None:
    if not (token.isascii() and token.isdigit()):
        return None
    value = int(token)
    return value if value <= _U64_MAX else None


def parse_proc_net_dev(text: str, problems: list[str] | None = None) -> dict[str, IfCounters]:
    """Parse the contents of ``/proc/net/dev``.

    Parameters
    ----------
    text : str
        The whole file.
    problems : list of str, optional
        One message per skipped line is appended to it; without it each is
        logged as a warning.

    Returns
    -------
    dict of str to IfCounters
        Counters per interface name, in file order.  Columns beyond the six
        used are ignored wherever the header puts them.

    Raises
    ------
    ProcNetDevFormatError
        The text has no ``/proc/net/dev`` header, or the header lacks the
        packets, bytes or drop column of either direction.

    Notes
    -----
    A line is skipped and reported, never fatal, when it has no ``name:``,
    an empty name or one with blanks, a different number of values than the
    header has columns, a value that is not a decimal integer in
    0 .. 2**64-1, or a name already seen (the first line is kept).  Blank
    lines are ignored.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_proc_net_dev needs str, got {type(text).__name__}")
    lines = text.splitlines()
    if len(lines) < 2:
        raise ProcNetDevFormatError(f"not /proc/net/dev: {len(lines)} line(s); the header alone has 2")
    ncols, columns = _proc_header(lines[0], lines[1])
    out: dict[str, IfCounters] = {}

    def skip(lineno: int, message: str) -> None:
        full = f"/proc/net/dev line {lineno}: {message}"
        if problems is not None:
            problems.append(full)
        else:
            log.warning("%s", full)

    for lineno, line in enumerate(lines[2:], start=3):
        if not line.strip():
            continue
        name, colon, rest = line.partition(":")
        name = name.strip()
        if not colon:
            skip(lineno, f"no 'name:' in {line[:60]!r}; skipped")
            continue
        if not name or any(c.isspace() for c in name):
            skip(lineno, f"bad interface name {name!r}; skipped")
            continue
        tokens = rest.split()
        if len(tokens) != ncols:
            skip(lineno, f"{name}: {len(tokens)} values, the header has {ncols} columns; skipped")
            continue
        values = [_counter_value(t) for t in tokens]
        bad = next((t for t, v in zip(tokens, values) if v is None), None)
        if bad is not None:
            skip(lineno, f"{name}: {bad[:30]!r} is not a counter in 0..2**64-1; skipped")
            continue
        if name in out:
            skip(lineno, f"{name}: duplicate interface; the first line is kept")
            continue
        out[name] = IfCounters(*(values[c] for c in columns))  # type: ignore[misc]
    return out


# --------------------------------------------------------------------------- namespaces

_T = TypeVar("_T")


class Netns:
    """A named network namespace: where it is, whether it is still the same one, and
    how to create things inside it."""

    def __init__(self, name: str, source: str, run_dir: str = NETNS_RUN_DIR) -> None:
        if not name or "/" in name or name in (".", ".."):
            raise CounterReadError(source, name, "not a network namespace name")
        self.name = name
        self.source = source
        self.path = os.path.join(run_dir, name)
        self.identity: tuple[int, int] | None = None

    def _stat(self) -> tuple[int, int]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise CounterReadError(
                self.source, self.name, f"no such network namespace ({self.path} does not exist)", errno.ENOENT
            ) from None
        except OSError as e:
            raise CounterReadError(self.source, self.name, f"cannot stat {self.path}: {e}", e.errno) from None
        return st.st_dev, st.st_ino

    def changed(self) -> bool:
        """True when the name now refers to another namespace than at the last :meth:`run`.

        Raises :class:`CounterReadError` when the namespace is gone.
        """
        return self._stat() != self.identity

    def run(self, factory: Callable[[], _T]) -> _T:
        """Call ``factory`` in a helper thread that has entered the namespace; return its result.

        The thread exits right after, so no thread of the process stays in the
        namespace; sockets and files made by ``factory`` stay bound to it.
        """
        try:
            result, self.identity = run_in_netns(self.path, factory, f"xtc-netns-{self.name}")
        except NetnsOpenError as e:
            if e.errno == errno.ENOENT:
                raise CounterReadError(
                    self.source, self.name, f"no such network namespace ({self.path} does not exist)", e.errno
                ) from None
            raise CounterReadError(self.source, self.name, f"cannot open inside the namespace: {e}", e.errno) from None
        except CounterError:
            raise
        except OSError as e:
            raise CounterReadError(self.source, self.name, f"cannot open inside the namespace: {e}", e.errno) from None
        return result


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


class ProcNetDevCounters:
    """Reads ``/proc/net/dev`` (or a file in its format) and parses it.

    Parameters
    ----------
    path : str or os.PathLike
        The file, read anew on every :meth:`read`; tests pass a recorded file.
        With ``netns`` it is opened once inside that namespace, and the
        default means that namespace's ``/proc/thread-self/net/dev``.
    netns : str, optional
        Name of a network namespace (``/run/netns/<name>``) to read.
    counter_bits : int, optional
        Width of the counters (default :func:`kernel_counter_bits`; a
        recorded file from another machine may need another).

    Attributes
    ----------
    last_problems : list of str
        The malformed lines skipped by the last read (each distinct message is
        also logged once).
    fallback_reason : str or None
        Set by :func:`open_counters` when this source replaced netlink.
    """

    kind = "proc"

    def __init__(
        self,
        path: str | os.PathLike[str] = "/proc/net/dev",
        netns: str | None = None,
        *,
        counter_bits: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.netns = netns
        self.counter_bits = kernel_counter_bits() if counter_bits is None else counter_bits
        self.last_problems: list[str] = []
        self.fallback_reason: str | None = None
        self._logged: set[str] = set()
        self._fd: int | None = None
        self._ns: Netns | None = None
        if netns is not None:
            self._ns = Netns(netns, f"reading {self.path}")
            if self.path == Path("/proc/net/dev"):
                # /proc/net is /proc/self/net: the namespace of the main thread,
                # not of the helper thread; thread-self is the helper's.
                self.path = Path("/proc/thread-self/net/dev")
            self._open_in_netns()

    def _open_in_netns(self) -> None:
        assert self._ns is not None
        path = self.path
        self._fd = self._ns.run(lambda: os.open(path, os.O_RDONLY | os.O_CLOEXEC))

    def _read_bytes(self) -> bytes:
        if self._ns is None:
            with open(self.path, "rb") as f:
                return f.read()
        if self._ns.changed():
            self.close()
            self._open_in_netns()
        assert self._fd is not None
        chunks = []
        offset = 0
        while True:
            chunk = os.pread(self._fd, 1 << 17, offset)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)

    def read(self) -> dict[str, IfCounters]:
        """Counters per interface name, in file order.

        Raises
        ------
        CounterReadError
            The file cannot be read, or the namespace is gone.
        ProcNetDevFormatError
            The file is not in ``/proc/net/dev`` format.
        """
        try:
            data = self._read_bytes()
        except CounterError:
            raise
        except OSError as e:
            raise CounterReadError(f"reading {self.path}", self.netns, str(e), e.errno) from None
        problems: list[str] = []
        try:
            out = parse_proc_net_dev(data.decode("utf-8", "surrogateescape"), problems)
        except ProcNetDevFormatError as e:
            raise ProcNetDevFormatError(f"{self.path}: {e}") from None
        self.last_problems = problems
        for p in problems:
            if p not in self._logged and len(self._logged) < 1000:
                self._logged.add(p)
                log.warning("%s: %s", self.path, p)
        return out

    def close(self) -> None:
        """Close the file held open for a namespace; idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ProcNetDevCounters:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
