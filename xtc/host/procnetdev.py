"""``/proc/net/dev``: its parser (pure) and the counter source that reads it.

The fallback source of interface counters where netlink ``RTM_GETSTATS`` cannot be had (see
:func:`xtc.host.counters.open_counters`), and the reader of recorded files and of other
namespaces' ``/proc/<pid>/net/dev``.  With a namespace name the file is opened once inside it
(:class:`xtc.host.netns.Netns`) and read with ``pread``; it is reopened when the name comes to
mean another namespace.

Public API
----------
parse_proc_net_dev(text, problems=None) -> dict[str, IfCounters]
ProcNetDevCounters(path="/proc/net/dev", netns=None, *, counter_bits=None)
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from xtc.host.counterdelta import kernel_counter_bits
from xtc.host.errors import CounterError, CounterReadError, ProcNetDevFormatError
from xtc.host.ifcounters import IfCounters
from xtc.host.netns import Netns

__all__ = ["ProcNetDevCounters", "parse_proc_net_dev"]

log = logging.getLogger(__name__)
_U64_MAX = 2**64 - 1

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

    def __enter__(self) -> ProcNetDevCounters:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
