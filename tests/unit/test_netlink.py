"""The one netlink adapter (:mod:`xtc.host.netlink`): its framing on bytes built here, and its
socket against this kernel (gets and dumps any user may make: no root, nothing changed) and, for
the replies a kernel gives only when something breaks, against a fake kernel socket."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from xtc.host import netlink, rtnl_codec, tccodec
from xtc.host.netlink import (
    NLM_F_ACK,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NetlinkDecodeError,
    NetlinkError,
    NetlinkReplyError,
    NetlinkTimeoutError,
    RouteSocket,
    attr,
    ext_ack_text,
    iter_attrs,
)


def _error(seq: int, code: int, request: bytes, text: str | None, capped: bool) -> bytes:
    """An NLMSG_ERROR as the kernel builds it: the error code, the request (its header alone when
    capped), then the extended-ACK attributes."""
    flags = (netlink.NLM_F_CAPPED if capped else 0) | (netlink.NLM_F_ACK_TLVS if text is not None else 0)
    body = struct.pack("=i", code) + (request[:16] if capped else request)
    if text is not None:
        body += attr(netlink.NLMSGERR_ATTR_MSG, text.encode() + b"\0")
    return struct.pack("=IHHII", 16 + len(body), netlink.NLMSG_ERROR, flags, seq, 0) + body


def test_the_kernels_text_is_found_after_a_capped_or_a_whole_request() -> None:
    request = tccodec.encode_tcmsg(tccodec.RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, 7, 3, 0x07C00000,
                                   tccodec.TC_H_ROOT, 0, attr(tccodec.TCA_KIND, b"htb\0") + attr(2, bytes(40)))
    for capped in (True, False):
        msg = _error(7, -errno.EINVAL, request, "Invalid handle", capped)
        assert ext_ack_text(msg, 0, len(msg)) == "Invalid handle", capped
        plain = _error(7, -errno.EINVAL, request, None, capped)
        assert ext_ack_text(plain, 0, len(plain)) == ""


def test_attributes_that_run_past_the_end_stop_the_walk_or_are_named() -> None:
    buf = attr(1, b"abcd") + struct.pack("=HH", 40, 2) + bytes(4)
    assert [(t, bytes(buf[a:b])) for t, a, b in iter_attrs(buf, 0, len(buf))] == [(1, b"abcd")]
    with pytest.raises(NetlinkDecodeError, match="attribute at byte 8 of the message at byte 0 claims 40 bytes"):
        list(iter_attrs(buf, 0, len(buf), 0))


def test_the_error_family() -> None:
    e = NetlinkReplyError(errno.ENOENT, "delete root htb 7c0:", "Cannot find specified qdisc on specified device.")
    assert isinstance(e, NetlinkError) and isinstance(e, OSError) and e.errno == errno.ENOENT
    assert str(e) == ("delete root htb 7c0:: kernel replied ENOENT (No such file or directory): "
                      "Cannot find specified qdisc on specified device.")
    assert isinstance(NetlinkDecodeError("x"), ValueError) and NetlinkDecodeError("x").errno == errno.EPROTO
    assert isinstance(NetlinkTimeoutError(errno.ETIMEDOUT, "x"), TimeoutError)


def test_a_get_the_kernel_refuses_comes_back_with_its_errno_and_text() -> None:
    """A real kernel, no privilege needed: the root qdisc of ``lo`` asked for under a handle it
    has not (EINVAL, with the kernel's "Invalid handle" where it gives extended ACKs)."""
    with RouteSocket(timeout_s=2.0) as nl:
        seq = nl.next_seq()
        msg = tccodec.encode_tcmsg(tccodec.RTM_GETQDISC, NLM_F_REQUEST | NLM_F_ACK, seq, socket.if_nametoindex("lo"),
                                   0x07C00000, tccodec.TC_H_ROOT)
        acks, echoed = nl.transact([msg])
        code, text = acks[seq]
        assert code == errno.EINVAL and echoed == []
        assert text in ("", "Invalid handle")


def test_a_dump_of_this_kernel_decodes_and_names_lo() -> None:
    with RouteSocket(timeout_s=2.0) as nl:
        for _ in range(2):  # the dump buffer is reused
            seq = nl.next_seq()
            view = nl.dump(rtnl_codec.encode_getlink_dump(seq), seq, "RTM_GETLINK dump")
            names = rtnl_codec.decode_link_dump(view, seq)
            assert names[socket.if_nametoindex("lo")] == "lo"
        seq = nl.next_seq()
        qdiscs = tccodec.decode_tc_dump(nl.dump(tccodec.encode_tcmsg(tccodec.RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP,
                                                                     seq, 0), seq))
        assert all(isinstance(q.kind, str) for q in qdiscs)


class _FakeKernel:
    """Stands for a route socket: answers each request with the datagrams given."""

    def __init__(self, datagrams: list[bytes]) -> None:
        self.datagrams = datagrams
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> int:
        self.sent.append(bytes(data))
        return len(data)

    def recv_into(self, buf: memoryview | bytearray, nbytes: int = 0, flags: int = 0) -> int:
        if not self.datagrams:
            raise TimeoutError("timed out")
        data = self.datagrams.pop(0)
        n = min(len(data), len(buf))
        buf[:n] = data[:n]
        return len(data) if flags & socket.MSG_TRUNC else n

    def close(self) -> None:
        pass


def _fake(monkeypatch: pytest.MonkeyPatch, datagrams: list[bytes]) -> RouteSocket:
    monkeypatch.setattr("xtc.host.netlink.route_socket", lambda **kw: _FakeKernel(datagrams))
    return RouteSocket(timeout_s=0.5)


def _done(seq: int, code: int = 0) -> bytes:
    return struct.pack("=IHHIIi", 20, netlink.NLMSG_DONE, netlink.NLM_F_MULTI, seq, 0, code)


def _msg(seq: int, mtype: int = 16, payload: bytes = bytes(16)) -> bytes:
    return struct.pack("=IHHII", 16 + len(payload), mtype, netlink.NLM_F_MULTI, seq, 0) + payload


def test_a_dump_ends_at_its_own_done_and_keeps_every_datagram(monkeypatch: pytest.MonkeyPatch) -> None:
    # a leftover of an abandoned dump (seq 1, its DONE too), then ours over two datagrams
    nl = _fake(monkeypatch, [_msg(1) + _done(1) + _msg(2), _msg(2) + _done(2)])
    view = nl.dump(b"request", 2)
    assert bytes(view) == _msg(1) + _done(1) + _msg(2) + _msg(2) + _done(2)


def test_a_dump_that_ends_in_an_error_raises_it(monkeypatch: pytest.MonkeyPatch) -> None:
    nl = _fake(monkeypatch, [_msg(2) + _done(2, -errno.EINTR)])
    with pytest.raises(NetlinkReplyError, match="RTM_GETSTATS dump: kernel replied EINTR") as info:
        nl.dump(b"request", 2, "RTM_GETSTATS dump")
    assert info.value.errno == errno.EINTR
    request = _msg(3)
    nl = _fake(monkeypatch, [_error(3, -errno.EOPNOTSUPP, request, "not here", capped=True)])
    with pytest.raises(NetlinkReplyError, match="(EOPNOTSUPP|ENOTSUP) .*: not here"):
        nl.dump(request, 3)


def test_a_malformed_or_oversized_dump_and_a_silent_kernel_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = bytearray(_msg(2) + _done(2))
    struct.pack_into("=I", bad, 0, 400)
    with pytest.raises(NetlinkDecodeError, match="message at byte 0 claims 400 bytes"):
        _fake(monkeypatch, [bytes(bad)]).dump(b"r", 2)
    with pytest.raises(NetlinkDecodeError, match="exceeds"):
        _fake(monkeypatch, [bytes(netlink.RECV_BYTES + 4)]).dump(b"r", 2)
    with pytest.raises(NetlinkTimeoutError, match="no reply within 0.5 s"):
        _fake(monkeypatch, []).dump(b"r", 2, "RTM_GETTCLASS dump")


def test_a_data_run_is_not_walked_message_by_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``data_run`` says is data is not looked at: a DONE of ours inside it does not end the dump."""
    first = _msg(2) + _done(2)
    nl = _fake(monkeypatch, [first, _msg(2) + _done(2)])
    runs: list[int] = []

    def data_run(d: memoryview) -> int:
        runs.append(len(d))
        return len(d) if len(runs) == 1 else 0

    assert len(nl.dump(b"r", 2, data_run=data_run)) == 2 * len(first) and runs == [len(first), len(first)]


def test_an_echo_is_found_among_other_messages_and_an_error_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    nl = _fake(monkeypatch, [_msg(4) + _msg(5, 36, b"qdisc")])
    buf, off, mlen = nl.reply(5)
    assert bytes(buf[off + 16:off + mlen]) == b"qdisc"
    nl = _fake(monkeypatch, [_error(6, -errno.ENODEV, _msg(6), None, capped=True)])
    with pytest.raises(NetlinkReplyError, match="get root qdisc: kernel replied ENODEV"):
        nl.reply(6, "get root qdisc")


def test_a_socket_in_a_namespace_that_is_not_there_is_named() -> None:
    with pytest.raises(NetlinkError, match="netns 'a/b': not a network namespace name"):
        netlink.open_route_socket("a/b")
    with pytest.raises(NetlinkError, match="netns 'xtc-no-such-ns-7f3a': cannot open") as info:
        netlink.open_route_socket("xtc-no-such-ns-7f3a")
    assert info.value.errno == errno.ENOENT
    with netlink.open_route_socket(None, timeout_s=1.0) as nl:  # here: a working socket
        seq = nl.next_seq()
        assert rtnl_codec.decode_link_dump(nl.dump(rtnl_codec.encode_getlink_dump(seq), seq), seq)
