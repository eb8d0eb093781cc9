"""The TBF read-back pieces of the tc codec (early drop's limiter finds its own qdisc's rate and drops)."""

from __future__ import annotations

import struct

import pytest

from xtc.host import tccodec
from xtc.host.netlink import NetlinkDecodeError, attr


def test_tbf_parameters_read_back_the_rate_and_the_64_bit_rate():
    msg = tccodec.encode_tbf("add", 1, ifindex=3, handle=0x0ED0_0000, parent=tccodec.TC_H_ROOT,
                             rate_Bps=12_576_000, burst=251_520, limit=251_520)
    rate, buffer_ticks = tccodec.tbf_parameters(msg)
    assert rate == 12_576_000 and buffer_ticks > 0
    fast = tccodec.encode_tbf("add", 1, ifindex=3, handle=0x0ED0_0000, parent=tccodec.TC_H_ROOT,
                              rate_Bps=5 * 2**32, burst=10**7, limit=10**7)
    assert tccodec.tbf_parameters(fast)[0] == 5 * 2**32


def test_a_message_without_tbf_options_has_no_parameters_and_no_drops():
    msg = tccodec.encode_tcmsg(tccodec.RTM_NEWQDISC, 0, 1, 3, 0, tccodec.TC_H_ROOT, 0, attr(tccodec.TCA_KIND, b"noqueue\0"))
    assert tccodec.tbf_parameters(msg) is None
    assert tccodec.queue_drops(msg) == 0


def test_queue_drops_come_from_the_queue_statistics():
    queue = struct.pack("=IIIII", 0, 0, 4242, 0, 7)  # qlen, backlog, drops, requeues, overlimits
    stats2 = attr(tccodec.TCA_STATS2, attr(3, queue))  # TCA_STATS_QUEUE
    msg = tccodec.encode_tcmsg(tccodec.RTM_NEWQDISC, 0, 1, 3, 0x0ED0_0000, tccodec.TC_H_ROOT, 0,
                               attr(tccodec.TCA_KIND, b"tbf\0") + stats2)
    assert tccodec.queue_drops(msg) == 4242


def _root(ifindex: int, handle: int, kind: bytes, drops: int, parent: int = tccodec.TC_H_ROOT) -> bytes:
    stats2 = attr(tccodec.TCA_STATS2, attr(3, struct.pack("=IIIII", 0, 0, drops, 0, 0)))
    return tccodec.encode_tcmsg(tccodec.RTM_NEWQDISC, 0, 1, ifindex, handle, parent, 0,
                                attr(tccodec.TCA_KIND, kind + b"\0") + stats2)


def test_root_drops_picks_the_limiters_roots_out_of_a_whole_dump_by_index():
    """One qdisc dump a period holds every interface's root (the kernel ignores the index in a
    dump): only roots of the limiter's handle and kind count, keyed by interface index."""
    dump = b"".join([
        _root(3, 0x0ED0_0000, b"tbf", 17),
        _root(4, 0, b"noqueue", 99),  # the kernel default on another interface
        _root(5, 0x07C0_0000, b"htb", 99),  # someone else's root
        _root(6, 0x0ED0_0000, b"htb", 99),  # our handle, not our kind
        _root(7, 0x0ED0_0000, b"tbf", 99, parent=0x0001_0000),  # not a root
        _root(8, 0x0ED0_0000, b"tbf", 2**31),
        _root(3, 0x0ED0_0000, b"tbf", 18),  # a later message wins (a leftover dump comes first)
        struct.pack("=IHHIIi", 20, 3, 2, 9, 0, 0),  # NLMSG_DONE
    ])
    assert tccodec.root_drops(dump, 0x0ED0_0000, "tbf") == {3: 18, 8: 2**31}
    # a layout learnt from one message, checked on the next: a longer TBF message (more options), one
    # without statistics, and an HTB of the very length of a TBF are each read right
    longer = tccodec.encode_tcmsg(tccodec.RTM_NEWQDISC, 0, 1, 9, 0x0ED0_0000, tccodec.TC_H_ROOT, 0,
                                  attr(tccodec.TCA_KIND, b"tbf\0") + attr(tccodec.TCA_OPTIONS, b"\0" * 40)
                                  + attr(tccodec.TCA_STATS2, attr(3, struct.pack("=IIIII", 0, 0, 5, 0, 0))))
    bare = tccodec.encode_tcmsg(tccodec.RTM_NEWQDISC, 0, 1, 10, 0x0ED0_0000, tccodec.TC_H_ROOT, 0,
                                attr(tccodec.TCA_KIND, b"tbf\0"))
    mixed = _root(11, 0x0ED0_0000, b"tbf", 1) + longer + _root(12, 0x0ED0_0000, b"htb", 2) + bare + _root(13, 0x0ED0_0000, b"tbf", 3)
    assert tccodec.root_drops(mixed, 0x0ED0_0000, "tbf") == {11: 1, 9: 5, 10: 0, 13: 3}
    bad = bytearray(dump)
    struct.pack_into("=I", bad, 0, len(dump) + 100)
    with pytest.raises(NetlinkDecodeError, match="malformed"):
        tccodec.root_drops(bytes(bad), 0x0ED0_0000, "tbf")
