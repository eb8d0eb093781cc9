"""The one netlink adapter of xtc: the message framing (pure functions) and the ``NETLINK_ROUTE``
socket every rtnetlink user goes through.

Two users: the interface counters (:class:`xtc.host.counters.NetlinkCounters`, whose pure dump
decoders are :mod:`xtc.host.rtnl_codec`) and the tc users (the XCo gate :mod:`xtc.host.tcgate`
and its root-qdisc bookkeeping :mod:`xtc.host.qdiscs`, whose pure message codec is
:mod:`xtc.host.tccodec`).  The codecs build and read bytes with the framing helpers here; only
:class:`RouteSocket` sends and receives them.

Framing (pure, no I/O)
----------------------
``NLMSGHDR``/``NLATTR`` structs, :func:`align4`, :func:`attr` / :func:`attr_str` (encode one
attribute), :func:`iter_attrs` (walk attributes), :func:`messages` (walk messages),
:func:`header` (one checked header), :func:`ext_ack_text` (the kernel's extended-ACK message of an
``NLMSG_ERROR``), :func:`error_text` (``ENOENT (No such file or directory): <kernel text>``).

The socket
----------
:class:`RouteSocket` (``open_route_socket(netns)`` opens one inside ``/run/netns/<netns>``):

* ``transact`` / ``send_batch``: whole messages in one ``send``, one ACK read per message (its
  errno and extended-ACK text), and the handles of echoed new filters;
* ``send`` + ``read_errors``: a batch sent without ``NLM_F_ACK`` (rtnetlink applies it inside
  ``send``) and the error messages the kernel queued for the refused ones only: the gate's hot path;
* ``reply``: the one message answering a request sent with ``NLM_F_ECHO`` (or a get);
* ``dump``: a dump request and every datagram of its answer back to back in one buffer, ended by
  the ``NLMSG_DONE`` of the request's sequence number (an ``NLMSG_ERROR``, or a ``NLMSG_DONE``
  carrying an error, raises); a caller's ``data_run`` tells how many leading bytes of a datagram
  are data, so that a big dump's datagrams are not walked message by message in Python;
* ``pending_notifications``: drain a socket bound to multicast groups (link changes).

Errors
------
One family, rooted at :class:`NetlinkError`, an :class:`OSError` whose ``errno`` is set:
:class:`NetlinkReplyError` (the kernel refused: errno, its extended-ACK text),
:class:`NetlinkDecodeError` (also a :class:`ValueError`: bytes that are not a well-formed reply),
:class:`NetlinkTimeoutError` (also a :class:`TimeoutError`: no reply within the socket's timeout).
A socket call that fails raises a :class:`NetlinkError` with the call's errno.  Every message
names what was asked (``"RTM_GETSTATS dump: kernel replied EOPNOTSUPP (...)"``).  The users turn
them into their own errors at their boundary (``CounterReadError``, ``GateError``).

Why a socket of our own and not pyroute2's ``IPRoute`` on the hot paths: see
docs/design/netlink.md (pyroute2 still encodes the tc messages once each, at set-up).
"""

from __future__ import annotations

import errno as _errno
import os
import socket
import struct
from collections.abc import Callable, Iterator
from typing import TypeVar

from xtc.host.netns import NETNS_DIR, NetnsOpenError, run_in_netns

__all__ = [
    "HDR_LEN",
    "NLATTR",
    "NLA_TYPE_MASK",
    "NLMSGHDR",
    "NLMSG_DONE",
    "NLMSG_ERROR",
    "NLM_F_ACK",
    "NLM_F_CREATE",
    "NLM_F_DUMP",
    "NLM_F_DUMP_INTR",
    "NLM_F_ECHO",
    "NLM_F_EXCL",
    "NLM_F_MULTI",
    "NLM_F_REPLACE",
    "NLM_F_REQUEST",
    "RECV_BYTES",
    "NetlinkDecodeError",
    "NetlinkError",
    "NetlinkReplyError",
    "NetlinkTimeoutError",
    "RouteSocket",
    "align4",
    "attr",
    "attr_str",
    "error_text",
    "ext_ack_text",
    "header",
    "in_netns",
    "interface_index",
    "iter_attrs",
    "messages",
    "open_route_socket",
    "route_socket",
    "set_seq",
]

# linux/netlink.h
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK, NLM_F_ECHO = 0x1, 0x2, 0x4, 0x8
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
NLM_F_CAPPED, NLM_F_ACK_TLVS = 0x100, 0x200  # flags of an NLMSG_ERROR
NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED and NLA_F_NET_BYTEORDER
SOL_NETLINK, NETLINK_CAP_ACK, NETLINK_EXT_ACK = 270, 10, 11
NLMSGERR_ATTR_MSG = 1

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
NLATTR = struct.Struct("=HH")  # len, type
HDR_LEN = NLMSGHDR.size  # 16
_SEQ = struct.Struct("=I")
_LEN_TYPE = struct.Struct("=IH")
_I32 = struct.Struct("=i")
#: Bytes of one receive: the kernel's dump datagrams are at most 32 KiB, its other messages less.
RECV_BYTES = 1 << 16

_T = TypeVar("_T")


# --------------------------------------------------------------------------- errors


class NetlinkError(OSError):
    """A netlink operation failed; ``errno`` is the (positive) error number, the message names the
    operation."""

    def __init__(self, errno: int, message: str) -> None:
        super().__init__(errno, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NetlinkReplyError(NetlinkError):
    """The kernel answered a request with an error.

    Attributes
    ----------
    errno : int
        Positive error number (``errno.EOPNOTSUPP`` ...).
    kernel_message : str
        The kernel's extended-ACK text ("" when it gave none).
    reason : str
        The error without the context ("kernel replied ENOMEM (...)[: kernel text]").
    """

    def __init__(self, errno: int, context: str, kernel_message: str = "") -> None:
        self.kernel_message = kernel_message
        self.reason = f"kernel replied {error_text(errno, kernel_message)}"
        super().__init__(errno, f"{context}: {self.reason}")


class NetlinkDecodeError(NetlinkError, ValueError):
    """The bytes are not a well-formed netlink reply of the expected kind."""

    def __init__(self, message: str) -> None:
        super().__init__(_errno.EPROTO, message)


class NetlinkTimeoutError(NetlinkError, TimeoutError):
    """No reply arrived within the socket's timeout."""


def error_text(code: int, kernel_msg: str = "") -> str:
    """``"ENOENT (No such file or directory)"``, with ``": <kernel_msg>"`` when there is one."""
    name = _errno.errorcode.get(code, str(code))
    text = f"{name} ({os.strerror(code)})"
    return f"{text}: {kernel_msg}" if kernel_msg else text


# --------------------------------------------------------------------------- framing (pure)


def align4(n: int) -> int:
    """``n`` rounded up to a multiple of 4 (``NLMSG_ALIGN``, ``NLA_ALIGN``)."""
    return (n + 3) & ~3


def attr(atype: int, payload: bytes) -> bytes:
    """One attribute (header, payload, padding)."""
    a = NLATTR.pack(4 + len(payload), atype) + payload
    return a + b"\0" * (align4(len(a)) - len(a))


def attr_str(atype: int, value: str) -> bytes:
    """One NUL-terminated string attribute."""
    return attr(atype, value.encode() + b"\0")


def set_seq(msg: bytearray, seq: int, off: int = 0) -> None:
    """Write the sequence number of the message at ``off`` of ``msg``, in place."""
    _SEQ.pack_into(msg, off + 8, seq)


def iter_attrs(buf: bytes | bytearray | memoryview, start: int, end: int,
               msg_off: int | None = None) -> Iterator[tuple[int, int, int]]:
    """(type without flags, payload start, payload end) of each attribute in ``buf[start:end]``.

    Without ``msg_off`` the walk stops at an attribute whose length runs past ``end``; with it
    (the offset of the enclosing message, for the text) such an attribute raises
    :class:`NetlinkDecodeError`.
    """
    while start + 4 <= end:
        alen, atype = NLATTR.unpack_from(buf, start)
        if alen < 4 or start + alen > end:
            if msg_off is None:
                return
            raise NetlinkDecodeError(f"attribute at byte {start} of the message at byte {msg_off} claims {alen} "
                                     f"bytes; {end - start} are left")
        yield atype & NLA_TYPE_MASK, start + 4, start + alen
        start += align4(alen)


def messages(buf: bytes | bytearray | memoryview, n: int) -> Iterator[tuple[int, int, int, int]]:
    """(offset, length, type, sequence number) of each message in ``buf[:n]``, up to the first
    whose length is shorter than a header."""
    off = 0
    while off + HDR_LEN <= n:
        mlen, mtype, _flags, seq, _pid = NLMSGHDR.unpack_from(buf, off)
        if mlen < HDR_LEN:
            return
        yield off, mlen, mtype, seq
        off += align4(mlen)


def header(buf: bytes | bytearray | memoryview, off: int, end: int) -> tuple[int, int, int, int]:
    """(len, type, flags, seq) of the message at ``off``, its length checked against ``end``.

    Raises
    ------
    NetlinkDecodeError
        Fewer bytes than a header are left, or the length is shorter than a header or runs past ``end``.
    """
    if off + HDR_LEN > end:
        raise NetlinkDecodeError(f"truncated netlink message at byte {off}: {end - off} bytes left, a header has {HDR_LEN}")
    mlen, mtype, mflags, mseq, _ = NLMSGHDR.unpack_from(buf, off)
    if mlen < HDR_LEN or off + mlen > end:
        raise NetlinkDecodeError(f"netlink message at byte {off} claims {mlen} bytes; {end - off} are left")
    return mlen, mtype, mflags, mseq


def ext_ack_text(buf: bytes | bytearray | memoryview, off: int, mlen: int) -> str:
    """The kernel's message in the ``NLMSG_ERROR`` at ``off`` (``mlen`` bytes), "" if none.

    The extended-ACK attributes follow the error code and the request's header (with
    ``NETLINK_CAP_ACK``: ``NLM_F_CAPPED``) or the whole request.
    """
    flags = NLMSGHDR.unpack_from(buf, off)[2]
    if not flags & NLM_F_ACK_TLVS or mlen < HDR_LEN + 4 + HDR_LEN:
        return ""
    inner = HDR_LEN if flags & NLM_F_CAPPED else align4(NLMSGHDR.unpack_from(buf, off + HDR_LEN + 4)[0])
    for atype, a, b in iter_attrs(buf, off + HDR_LEN + 4 + inner, off + mlen):
        if atype == NLMSGERR_ATTR_MSG:
            return bytes(buf[a:b]).rstrip(b"\0").decode("utf-8", "replace")
    return ""


# --------------------------------------------------------------------------- the socket


def route_socket(*, groups: int = 0, timeout_s: float | None = None, buffer_bytes: int | None = None) -> socket.socket:
    """A bound ``NETLINK_ROUTE`` socket asking for short ACKs with the kernel's text
    (``NETLINK_CAP_ACK``, ``NETLINK_EXT_ACK``, where the kernel has them: 4.12 and later).

    With ``groups`` (multicast groups) it is non-blocking; otherwise it waits ``timeout_s`` for a
    reply (None: forever).  ``buffer_bytes`` sets its send and receive buffers.  (The one place a
    socket is made: a unit test replaces this function with a fake kernel.)
    """
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    try:
        if buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
        for opt in (NETLINK_CAP_ACK, NETLINK_EXT_ACK):
            try:
                sock.setsockopt(SOL_NETLINK, opt, 1)
            except OSError:  # pragma: no cover - kernels before 4.12
                pass
        sock.bind((0, groups))
        if groups:
            sock.setblocking(False)
        else:
            sock.settimeout(timeout_s)
    except BaseException:
        sock.close()
        raise
    return sock


class RouteSocket:
    """A ``NETLINK_ROUTE`` socket: batches with their ACKs, errors of unacknowledged batches, echoed
    replies, dumps (see the module's docstring).

    Parameters
    ----------
    groups, timeout_s, buffer_bytes
        As :func:`route_socket`.

    Raises
    ------
    OSError
        The socket cannot be made (``EAFNOSUPPORT``, ``EPERM`` in a sandbox...).
    """

    def __init__(self, *, groups: int = 0, timeout_s: float | None = None, buffer_bytes: int | None = None) -> None:
        self.timeout_s = timeout_s
        self.sock = route_socket(groups=groups, timeout_s=timeout_s, buffer_bytes=buffer_bytes)
        self.seq = 1
        self._buf = bytearray(RECV_BYTES)
        self._dump_buf = bytearray(2 * RECV_BYTES)  # a whole dump, datagrams back to back (grown as needed)
        self._dump_view = memoryview(self._dump_buf)

    def next_seq(self) -> int:
        """A new sequence number (1 .. 2**31 - 1)."""
        self.seq = (self.seq + 1) & 0x7FFF_FFFF or 1
        return self.seq

    def _failed(self, what: str, e: OSError) -> NetlinkError:
        if isinstance(e, NetlinkError):
            return e
        if isinstance(e, TimeoutError):
            return NetlinkTimeoutError(_errno.ETIMEDOUT, f"{what}: no reply within {self.timeout_s} s")
        code = e.errno or _errno.EIO
        return NetlinkError(code, f"{what}: {error_text(code)}")

    def send(self, payload: bytes | bytearray, what: str = "netlink send") -> None:
        """Send whole messages in one datagram (rtnetlink has applied them when this returns)."""
        try:
            self.sock.send(payload)
        except OSError as e:
            raise self._failed(what, e) from None

    def _recv(self, buf: bytearray | memoryview, what: str, flags: int = 0) -> int:
        try:
            return self.sock.recv_into(buf, 0, flags)
        except OSError as e:
            raise self._failed(what, e) from None

    def transact(self, messages_: list[bytes | bytearray],
                 what: str = "netlink request") -> tuple[dict[int, tuple[int, str]], list[tuple[int, int]]]:
        """Send whole messages (one ``send``) and read one ACK per message.

        Returns ``{seq: (errno, kernel message)}`` (errno 0 for success) and, for each echoed new
        filter (``NLM_F_ECHO``), ``(seq, filter handle)``.
        """
        if not messages_:
            return {}, []
        seqs = [_SEQ.unpack_from(m, 8)[0] for m in messages_]
        return self.send_batch(b"".join(messages_) if len(messages_) > 1 else messages_[0], seqs, what)

    def ack(self, message: bytes | bytearray, what: str = "netlink request") -> tuple[int, str]:
        """Send one whole message and read its ACK: ``(errno, kernel message)``, errno 0 for success."""
        acks, _ = self.transact([message], what)
        return next(iter(acks.values()))

    def send_batch(self, payload: bytes | bytearray, seqs: list[int],
                   what: str = "netlink request") -> tuple[dict[int, tuple[int, str]], list[tuple[int, int]]]:
        """Send ``payload`` (whole messages with sequence numbers ``seqs``, each asking for an ACK)
        and read their ACKs; see :meth:`transact`."""
        pending = set(seqs)
        self.send(payload, what)
        acks: dict[int, tuple[int, str]] = {}
        echoed: list[tuple[int, int]] = []
        buf = self._buf
        while pending:
            for off, mlen, mtype, seq in messages(buf, self._recv(buf, what)):
                if seq not in pending:
                    continue
                if mtype == NLMSG_ERROR:
                    (err,) = _I32.unpack_from(buf, off + HDR_LEN)
                    acks[seq] = (-err, ext_ack_text(buf, off, mlen) if err else "")
                    pending.discard(seq)
                elif mtype == _RTM_NEWTFILTER:
                    echoed.append((seq, struct.unpack_from("=I", buf, off + HDR_LEN + 8)[0]))  # tcmsg handle
        return acks, echoed

    def read_errors(self, seqs: list[int], what: str = "netlink request") -> dict[int, tuple[int, str]]:
        """The error messages already queued for messages ``seqs`` sent without ``NLM_F_ACK``
        (rtnetlink answers in ``send``): ``{seq: (errno, kernel message)}``, empty when all passed."""
        out: dict[int, tuple[int, str]] = {}
        want = set(seqs)
        buf = self._buf
        while True:
            try:
                n = self.sock.recv_into(buf, 0, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return out
            except OSError as e:
                raise self._failed(what, e) from None
            for off, mlen, mtype, seq in messages(buf, n):
                if mtype == NLMSG_ERROR and seq in want:
                    (err,) = _I32.unpack_from(buf, off + HDR_LEN)
                    if err:
                        out[seq] = (-err, ext_ack_text(buf, off, mlen))

    def reply(self, seq: int, what: str = "netlink request") -> tuple[bytearray, int, int]:
        """The message answering the request sent with ``seq`` (an echo or a get), as ``(buffer,
        offset, length)`` (the buffer is reused by the next call); other messages are skipped.

        Raises
        ------
        NetlinkReplyError
            The answer is an error.
        """
        buf = self._buf
        while True:
            for off, mlen, mtype, mseq in messages(buf, self._recv(buf, what)):
                if mseq == seq:
                    if mtype == NLMSG_ERROR:
                        (err,) = _I32.unpack_from(buf, off + HDR_LEN)
                        if err:
                            raise NetlinkReplyError(-err, what, ext_ack_text(buf, off, mlen))
                        continue  # an ACK: the answer is still to come
                    return buf, off, mlen

    def get(self, request: bytes | bytearray, seq: int, what: str = "netlink get") -> bytes:
        """Send a get request (one message with ``seq``, ``NLM_F_ACK`` set, not a dump) and return
        the messages answering it (whole, back to back; empty when the kernel answered with the
        ACK alone).

        Raises
        ------
        NetlinkReplyError
            The kernel refused (``errno`` as it gave it).
        """
        self.send(request, what)
        out = bytearray()
        buf = self._buf
        while True:
            for off, mlen, mtype, mseq in messages(buf, self._recv(buf, what)):
                if mseq != seq:
                    continue
                if mtype == NLMSG_ERROR:
                    (err,) = _I32.unpack_from(buf, off + HDR_LEN)
                    if err:
                        raise NetlinkReplyError(-err, what, ext_ack_text(buf, off, mlen))
                    return bytes(out)
                out += buf[off : off + mlen]

    def dump(self, request: bytes | bytearray, seq: int, what: str = "netlink dump",
             data_run: Callable[[memoryview], int] | None = None) -> memoryview:
        """Send a dump request (sequence number ``seq``) and receive its whole answer.

        Parameters
        ----------
        data_run : callable, optional
            Given one datagram, how many of its leading bytes are data messages that need no look
            (a numpy check over a big dump's records): the end of the dump is looked for after them.

        Returns
        -------
        memoryview
            Every datagram of the answer back to back (whole messages, ``NLMSG_DONE`` included),
            valid until the next dump on this socket.  Messages of other sequence numbers (left
            over from an abandoned dump) are in it too; the decoders skip them.

        Raises
        ------
        NetlinkReplyError
            The kernel answered the request with an error (or ended the dump with one).
        NetlinkDecodeError
            A datagram is bigger than a receive or holds a malformed message.
        NetlinkError
            The socket failed (:class:`NetlinkTimeoutError`: no reply in time).
        """
        self.send(request, what)
        step = RECV_BYTES
        pos = 0
        head = _LEN_TYPE.unpack_from
        seq_at = _SEQ.unpack_from
        while True:
            if pos + step > len(self._dump_buf):
                grown = bytearray(2 * len(self._dump_buf))
                grown[:pos] = self._dump_buf[:pos]
                self._dump_buf, self._dump_view = grown, memoryview(grown)
            view = self._dump_view
            try:
                n = self.sock.recv_into(view[pos:pos + step], step, socket.MSG_TRUNC)
            except OSError as e:
                raise self._failed(what, e) from None
            if n > step:
                raise NetlinkDecodeError(f"{what} reply datagram of {n} bytes exceeds the {step}-byte buffer")
            start, pos = pos, pos + n
            if data_run is not None:
                start += data_run(view[start:pos])
            done = False
            buf = self._dump_buf
            off = start
            while off + HDR_LEN <= pos:  # the agent's hot path: only lengths and types, in a tight loop
                mlen, mtype = head(buf, off)
                if mlen < HDR_LEN or off + mlen > pos:
                    raise NetlinkDecodeError(f"{what}: netlink message at byte {off} claims {mlen} bytes; "
                                             f"{pos - off} are left")
                if mtype in (NLMSG_ERROR, NLMSG_DONE) and seq_at(buf, off + 8)[0] == seq:
                    code = _I32.unpack_from(buf, off + HDR_LEN)[0] if mlen >= HDR_LEN + 4 else 0
                    if code < 0:
                        kmsg = ext_ack_text(buf, off, mlen) if mtype == NLMSG_ERROR else ""
                        raise NetlinkReplyError(-code, what, kmsg)
                    done = done or mtype == NLMSG_DONE
                off += (mlen + 3) & ~3
            if done:
                return view[:pos]

    def pending_notifications(self, what: str = "reading notifications") -> bool:
        """Drain a socket bound to multicast groups; True when anything (or an overflow: ``ENOBUFS``,
        notifications were lost) was waiting."""
        changed = False
        buf = self._buf
        while True:
            try:
                if not self.sock.recv_into(buf):
                    return changed
                changed = True
            except BlockingIOError:
                return changed
            except OSError as e:
                if e.errno == _errno.ENOBUFS:
                    changed = True
                    continue
                raise self._failed(what, e) from None

    def close(self) -> None:
        """Close the socket; idempotent."""
        self.sock.close()

    def __enter__(self) -> RouteSocket:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_RTM_NEWTFILTER = 44  # linux/rtnetlink.h: the echo of a new filter carries its handle


def open_route_socket(netns: str | None = None, **kw: object) -> RouteSocket:
    """A :class:`RouteSocket` (``kw`` as its parameters) made inside ``/run/netns/<netns>`` (a
    helper thread enters it), or here.

    Raises
    ------
    NetlinkError
        The name is not a namespace's, the namespace cannot be opened, or the socket cannot be made.
    """
    if netns is None:
        try:
            return RouteSocket(**kw)  # type: ignore[arg-type]
        except OSError as e:
            raise NetlinkError(e.errno or _errno.EIO, f"opening a netlink route socket: {error_text(e.errno or 0)}") from None
    try:
        return in_netns(netns, lambda: RouteSocket(**kw))  # type: ignore[arg-type]
    except NetlinkError:
        raise
    except OSError as e:
        raise NetlinkError(e.errno or _errno.EIO, f"netns {netns!r}: opening a netlink route socket: "
                                                  f"{error_text(e.errno or 0)}") from None


def in_netns(netns: str, factory: Callable[[], _T]) -> _T:
    """``factory()`` called in a helper thread inside ``/run/netns/<netns>``; what it raises comes
    back unchanged.

    Raises
    ------
    NetlinkError
        ``netns`` is not a namespace's name, or the namespace cannot be opened (``ENOENT``...).
    """
    if not netns or "/" in netns or netns in (".", ".."):
        raise NetlinkError(_errno.EINVAL, f"netns {netns!r}: not a network namespace name")
    try:
        return run_in_netns(os.path.join(NETNS_DIR, netns), factory, f"xtc-netlink-{netns}")[0]
    except NetnsOpenError as e:
        raise NetlinkError(e.errno or _errno.EIO, f"netns {netns!r}: cannot open: {e.strerror}") from None


def interface_index(ifname: str, netns: str | None = None) -> int | None:
    """The index of ``ifname`` in the host's namespace or in ``/run/netns/<netns>``; None when there
    is no such interface.

    Raises
    ------
    NetlinkError
        The namespace cannot be entered (see :func:`in_netns`).
    """
    def look() -> int | None:
        try:
            return socket.if_nametoindex(ifname)
        except OSError:
            return None

    return look() if netns is None else in_netns(netns, look)
