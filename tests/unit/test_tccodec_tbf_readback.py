"""The TBF read-back pieces of the tc codec (early drop's limiter finds its own qdisc's rate and drops)."""

from __future__ import annotations

import struct

from xtc.host import tccodec
from xtc.host.netlink import attr


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
