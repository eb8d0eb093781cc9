"""The daemon's UDP sockets for the samples' datagrams (``subscribe`` with ``udp``): the one adapter to them.

Each peer that asked for its samples as datagrams has a target here: its address, its key, the next
sequence number.  :meth:`UdpSamples.send` turns a period's message into a signed datagram
(:mod:`xtc.daemon.datagram`) and sends it without waiting; it says when the message must go on the
connection instead: one period in :data:`~xtc.daemon.datagram.LINK_EVERY` (so that a peer that is gone
is found out), a message too big for a datagram, and a send the kernel refused.  A failure never
raises: it is counted and logged once per target.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Hashable

from . import datagram

__all__ = ["UdpSamples"]

log = logging.getLogger("xtc.daemon.udp")


class _Target:
    __slots__ = ("addr", "key", "key_id", "periods", "seq", "warned")

    def __init__(self, addr: tuple[str, int], key: bytes):
        self.addr = addr
        self.key = key
        self.key_id = datagram.key_id_of(key)
        self.seq = 0
        self.periods = 0
        self.warned = False


class UdpSamples:
    """The datagram targets of the peers subscribed with ``udp``, and the sockets that send to them (one
    per address family, opened at the first target of that family, closed by :meth:`close`)."""

    def __init__(self) -> None:
        self._targets: dict[Hashable, _Target] = {}
        self._socks: dict[int, socket.socket] = {}
        #: Datagrams sent; messages that went on the connection instead because the datagram could not be
        #: sent (the kernel refused it, or too big).
        self.sent = 0
        self.failed = 0

    def counts(self) -> dict[str, int]:
        """The datagrams by outcome: ``sent``, ``failed`` (sent on the connection instead)."""
        return {"sent": self.sent, "failed": self.failed}

    def __contains__(self, peer: Hashable) -> bool:
        return peer in self._targets

    def __len__(self) -> int:
        return len(self._targets)

    def set(self, peer: Hashable, addr: tuple[str, int], key: bytes) -> None:
        """``peer`` takes its samples as datagrams to ``addr`` (an IP address and port) signed with ``key``
        from now on (a new key: the sequence starts again)."""
        if len(key) != datagram.KEY_BYTES:
            raise ValueError(f"a datagram key is {datagram.KEY_BYTES} bytes")
        self._targets[peer] = _Target(addr, key)

    def drop(self, peer: Hashable) -> None:
        """``peer`` takes its samples on its connection (or not at all) from now on."""
        self._targets.pop(peer, None)

    def send(self, peer: Hashable, frames: list[bytes]) -> bool:
        """Send ``frames`` (a period's samples message) to ``peer`` as a datagram; False if they must go on
        its connection instead (no target, the period of :data:`~xtc.daemon.datagram.LINK_EVERY`, too
        big, or refused by the kernel)."""
        t = self._targets.get(peer)
        if t is None:
            return False
        t.periods += 1
        if t.periods % datagram.LINK_EVERY == 0:
            return False
        t.seq += 1
        data = datagram.encode(t.key, t.key_id, t.seq, frames)
        if len(data) > datagram.MAX_DATAGRAM_BYTES:
            self._failed(t, f"a datagram of {len(data)} bytes, more than {datagram.MAX_DATAGRAM_BYTES}")
            return False
        try:
            self._sock(t.addr).sendto(data, t.addr)
        except OSError as e:
            # EAGAIN (the socket's buffer full), ENETUNREACH, EPERM (a firewall), ECONNREFUSED (an ICMP
            # error from an earlier datagram): this period's message on the connection.
            self._failed(t, f"{errno.errorcode.get(e.errno or 0, e.errno)}: {e.strerror}")
            return False
        self.sent += 1
        return True

    def _failed(self, t: _Target, why: str) -> None:
        self.failed += 1
        if not t.warned:
            t.warned = True
            log.warning("samples to %s:%d not sent as a datagram (%s): on the connection instead", *t.addr, why)

    def _sock(self, addr: tuple[str, int]) -> socket.socket:
        family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        s = self._socks.get(family)
        if s is None:
            s = socket.socket(family, socket.SOCK_DGRAM)
            s.setblocking(False)
            self._socks[family] = s
        return s

    def close(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()
        self._targets.clear()
