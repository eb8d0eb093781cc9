"""The tc codec (:mod:`xtc.host.tccodec`): pure, no root, no socket.  Encoded messages are checked
against pyroute2's own encoding; dumps are built here byte by byte (a class dump as the kernel lays
it out)."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from xtc.host import tccodec
from xtc.host.gate import Flow
from xtc.host.netlink import NLM_F_CREATE, NLM_F_REPLACE, NetlinkDecodeError, iter_attrs
from xtc.host.tccodec import decode_class_counters, encode_tc

ROOT_HANDLE = 0x07C0_0000  # the XCo gate's root (any qdisc handle would do)
PRIO_FLOW4, PRIO_FLOW6 = 10, 11


def u32_keys(flow: Flow) -> list[str]:
    return tccodec.u32_address_keys(flow.src.packed, flow.dst.packed)


def _attr(atype: int, payload: bytes) -> bytes:
    a = struct.pack("=HH", 4 + len(payload), atype) + payload
    return a + b"\0" * (-len(a) % 4)


def _class_msg(handle: int, parent: int, sent: tuple[int, int], queue: tuple[int, int], pkt64: int | None = None) -> bytes:
    stats = _attr(1, struct.pack("=QI", *sent) + b"\0" * 4) + _attr(3, struct.pack("=5I", queue[0], queue[1], 0, 0, 0))
    if pkt64 is not None:
        stats += _attr(8, struct.pack("=Q", pkt64))
    body = struct.pack("=BxxxiIII", 0, 2, handle, parent, 0) + _attr(1, b"htb\0") + _attr(2, b"") + _attr(7, stats)
    return struct.pack("=IHHII", 16 + len(body), 40, 2, 9, 0) + body


def test_decode_class_counters() -> None:
    buf = (
        _class_msg(ROOT_HANDLE | 2, 0xFFFFFFFF, (1442 * 3, 3), (2, 2884))
        + _class_msg(ROOT_HANDLE | 3, 0xFFFFFFFF, (10, 1), (0, 0), pkt64=2**33)
        + _class_msg(0x10020001, 0x10020000, (99, 9), (9, 99))  # the TBF leaf's own class: not ours
        + struct.pack("=IHHIIi", 20, 3, 2, 9, 0, 0)  # NLMSG_DONE
    )
    got = decode_class_counters(buf, ROOT_HANDLE)
    assert got == {ROOT_HANDLE | 2: (4326, 3, 2884, 2), ROOT_HANDLE | 3: (10, 2**33, 0, 0)}
    bad = bytearray(buf)
    struct.pack_into("=I", bad, 0, len(buf) + 100)  # a message longer than the buffer
    with pytest.raises(NetlinkDecodeError, match="malformed"):
        decode_class_counters(bytes(bad), ROOT_HANDLE)


def test_counter_table_decodes_by_offsets_and_relearns_when_the_layout_changes() -> None:
    done = struct.pack("=IHHIIi", 20, 3, 2, 9, 0, 0)
    a = _class_msg(ROOT_HANDLE | 2, 0xFFFFFFFF, (1442 * 3, 3), (2, 2884))
    b = _class_msg(ROOT_HANDLE | 3, 0xFFFFFFFF, (2**40 + 5, 1), (0, 0), pkt64=9)
    leaf = _class_msg(0x10020001, 0x10020000, (99, 9), (9, 99))
    t = tccodec.ClassCounterTable([ROOT_HANDLE | 3, ROOT_HANDLE | 2], ROOT_HANDLE)
    got = t.decode(a + leaf + b + done)
    assert [x.tolist() for x in got] == [[2**40 + 5, 4326], [0, 2884], [0, 2]] and t.relearned == 1
    a2 = _class_msg(ROOT_HANDLE | 2, 0xFFFFFFFF, (7, 1), (1, 700))
    got = t.decode(a2 + leaf + b + done)  # same layout, new counters: no relearning
    assert [x.tolist() for x in got] == [[2**40 + 5, 7], [0, 700], [0, 1]] and t.relearned == 1
    got = t.decode(b + a2 + leaf + done)  # same length, classes moved: relearned from the handles
    assert [x.tolist() for x in got] == [[2**40 + 5, 7], [0, 700], [0, 1]] and t.relearned == 2
    got = t.decode(b + a + done)  # another length
    assert got[1].tolist() == [0, 2884] and t.relearned == 3
    with pytest.raises(NetlinkDecodeError, match="7c0:2 missing"):
        t.decode(b + done)


def test_a_rate_written_into_the_template_is_what_pyroute2_would_encode() -> None:
    """The fields the kernel reads (rate, burst, limit) match pyroute2's own encoding of that rate."""

    def fields(m: bytes) -> tuple:
        (_t, a, b), = [x for x in iter_attrs(m, 36, len(m)) if x[0] == tccodec.TCA_OPTIONS]
        nested = {t: (c, d) for t, c, d in iter_attrs(m, a, b)}
        parms = nested[1][0]
        return (struct.unpack_from("=I", m, parms + 8)[0], struct.unpack_from("=I", m, parms + 24)[0],
                struct.unpack_from("=I", m, nested[tccodec.TCA_TBF_BURST][0])[0])

    def encoded(rate_Bps: int, burst: int) -> bytes:
        m = encode_tc("change", 7, index=3, kind="tbf", handle=0x10020000, parent=ROOT_HANDLE | 2, rate=rate_Bps,
                      burst=burst, limit=1 << 20)
        return tccodec.append_option(m, tccodec.TCA_TBF_BURST, struct.pack("=I", burst))

    template = encoded(1_000_000, 1518)
    for rate_Bps, burst in ((1000, 1518), (2_425_000, 2425), (12_500_000, 12_500), (2_000_000_000, 2_000_000)):
        m = bytearray(template)
        tccodec.set_tbf_rate(m, rate_Bps, burst)
        assert fields(bytes(m)) == fields(encoded(rate_Bps, burst)) == (rate_Bps, 1 << 20, burst)
    with pytest.raises(ValueError, match="not a TBF message"):
        tccodec.set_tbf_rate(bytearray(template[:40]), 1, 1)


def test_tbf_message_carries_its_burst() -> None:
    msg = encode_tc("change", 7, index=3, kind="tbf", handle=0x10020000, parent=ROOT_HANDLE | 2, rate=8, burst=1518,
                    limit=1 << 20)
    out = tccodec.append_option(msg, tccodec.TCA_TBF_BURST, struct.pack("=I", 1518))
    length, mtype, flags, seq = struct.unpack_from("=IHHI", out)
    assert (length, mtype, seq) == (len(out), tccodec.RTM_NEWQDISC, 7)
    assert flags & NLM_F_REPLACE and not flags & NLM_F_CREATE
    attrs = list(iter_attrs(out, 36, len(out)))
    assert [a[0] for a in attrs] == [tccodec.TCA_KIND, tccodec.TCA_OPTIONS]
    _t, a, b = attrs[1]
    assert b == len(out)
    nested = list(iter_attrs(out, a, b))
    assert [n[0] for n in nested] == [1, 2, tccodec.TCA_TBF_BURST]  # PARMS, RTAB, BURST
    _t, c, _d = nested[-1]
    assert struct.unpack_from("=I", out, c)[0] == 1518


def test_a_flow_filter_written_into_the_template_is_what_pyroute2_would_encode() -> None:
    """add_flow's u32 filter (the family's template, its sequence, node, class and addresses written
    in) is byte for byte pyroute2's encoding of that flow; a message that is not one flow's filter
    is refused."""
    flows = [Flow(ipaddress.ip_address(s), ipaddress.ip_address(d), h) for s, d, h in (
        ("198.18.21.1", "198.18.21.2", 1), ("198.19.255.254", "198.18.0.1", 7),
        ("2001:db8::1", "2001:db8::2", 3), ("2001:db8:1:2:3:4:5:6", "fe80::ff", 9))]
    templates: dict[bool, bytes] = {}
    for k, f in enumerate(flows):
        v4 = f.src.version == 4
        prio, proto = (PRIO_FLOW4, tccodec.ETH_P_IP) if v4 else (PRIO_FLOW6, tccodec.ETH_P_IPV6)
        if v4 not in templates:
            zero = ipaddress.ip_address("0.0.0.0" if v4 else "::")
            templates[v4] = encode_tc("add-filter", 1, index=3, kind="u32", parent=ROOT_HANDLE, prio=prio,
                                      protocol=proto, handle=0, target=ROOT_HANDLE,
                                      keys=u32_keys(Flow(zero, zero, 1)))
        node, classid, seq = 5 + k, ROOT_HANDLE | (40 + k), 1000 + k
        m = bytearray(templates[v4])
        tccodec.set_u32_filter(m, seq, node, classid, f.src.packed + f.dst.packed)
        want = encode_tc("add-filter", seq, index=3, kind="u32", parent=ROOT_HANDLE, prio=prio, protocol=proto,
                         handle=node, target=classid, keys=u32_keys(f))
        assert bytes(m) == want, (f, bytes(m).hex(), want.hex())
    with pytest.raises(ValueError, match="8 keys for 8 address bytes"):
        tccodec.set_u32_filter(bytearray(templates[False]), 1, 1, ROOT_HANDLE, bytes(8))
    tbf = encode_tc("change", 7, index=3, kind="tbf", handle=0x10020000, parent=ROOT_HANDLE | 2, rate=8, burst=1518,
                    limit=1 << 20)
    with pytest.raises(ValueError, match="no class id or no selector"):
        tccodec.set_u32_filter(bytearray(tbf), 1, 1, ROOT_HANDLE, bytes(8))


def test_u32_keys_match_source_and_destination() -> None:
    f4 = Flow(ipaddress.ip_address("198.18.21.1"), ipaddress.ip_address("198.18.21.2"), 1)
    assert u32_keys(f4) == ["0xc6121501/0xffffffff+12", "0xc6121502/0xffffffff+16"]
    f6 = Flow(ipaddress.ip_address("2001:db8::1"), ipaddress.ip_address("2001:db8::2"), 1)
    keys = u32_keys(f6)
    assert len(keys) == 8 and keys[0] == "0x20010db8/0xffffffff+8" and keys[7] == "0x00000002/0xffffffff+36"


@pytest.mark.parametrize(("kind", "handle", "parent"), [("ingress", 0xFFFF0000, 0xFFFFFFF1),
                                                        ("clsact", 0xFFFF0000, 0xFFFFFFF1),
                                                        ("htb", ROOT_HANDLE, tccodec.TC_H_ROOT)])
def test_another_qdisc_kind_is_one_encode_tc_call(kind: str, handle: int, parent: int) -> None:
    """What a new user (a limiter on a VR's interface) needs of the codec for a kind the gate does
    not use: pyroute2's plugin encodes it, with the header and tcmsg as asked."""
    m = encode_tc("add", 5, index=7, kind=kind, handle=handle, parent=parent)
    length, mtype, flags, seq = struct.unpack_from("=IHHI", m)
    assert (length, mtype, seq) == (len(m), tccodec.RTM_NEWQDISC, 5) and flags & NLM_F_CREATE
    _fam, ifindex, h, p, _info = tccodec.TCMSG.unpack_from(m, 16)
    assert (ifindex, h, p) == (7, handle, parent)
    kinds = [bytes(m[a:b]).rstrip(b"\0").decode() for t, a, b in iter_attrs(m, 36, len(m)) if t == tccodec.TCA_KIND]
    assert kinds == [kind]


def test_encode_tbf_carries_the_burst_and_a_64_bit_rate_above_34_gbps() -> None:
    for rate_Bps in (1_000_000, 5_000_000_000):
        m = tccodec.encode_tbf("add", 3, ifindex=2, handle=0x10020000, parent=ROOT_HANDLE | 2, rate_Bps=rate_Bps,
                               burst=3000, limit=1 << 20)
        (_t, a, b), = [x for x in iter_attrs(m, 36, len(m)) if x[0] == tccodec.TCA_OPTIONS]
        nested = {t: (c, d) for t, c, d in iter_attrs(m, a, b)}
        assert struct.unpack_from("=I", m, nested[tccodec.TCA_TBF_BURST][0])[0] == 3000
        rate64 = nested.get(tccodec.TCA_TBF_RATE64)
        assert (rate64 is not None) == (rate_Bps > tccodec.U32_MAX)
        if rate64 is not None:
            assert struct.unpack_from("=Q", m, rate64[0])[0] == rate_Bps


@pytest.mark.parametrize("mtype,decode", [(tccodec.RTM_NEWQDISC, tccodec.decode_tc_dump),
                                          (tccodec.RTM_NEWTCLASS, tccodec.decode_tc_dump),
                                          (tccodec.RTM_NEWTFILTER, tccodec.decode_filters)])
def test_a_tc_message_shorter_than_its_tcmsg_is_malformed(mtype: int, decode) -> None:
    """A dump's qdisc, class or filter message that ends before its tcmsg header: one clear error, for the
    qdiscs and classes as for the filters (the qdiscs' decoder read past the message: a struct.error at
    the end of the buffer, the next message's bytes as its header before it; the filters' skipped it)."""
    short = struct.pack("=IHHII", 24, mtype, 2, 9, 0) + b"\0" * 8
    with pytest.raises(NetlinkDecodeError, match="tc message of 24 bytes"):
        decode(short)
    with pytest.raises(NetlinkDecodeError, match="tc message of 24 bytes"):
        decode(short + _class_msg(ROOT_HANDLE | 2, 0xFFFFFFFF, (10, 1), (0, 0)))
