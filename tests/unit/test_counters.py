"""The counter readers' pure parts on recorded kernel output, and their adapters on fakes.

Recorded inputs: tests/data/proc_net_dev/ (``/proc/net/dev`` text) and
tests/data/netlink/ (raw RTM_GETSTATS / RTM_GETLINK dump replies); each has
the values an independent source (``ip -s -s -j link``) gave at the same
moment beside it.
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xtc.host.errors import MeterError
from xtc.host import rtnl_codec
from xtc.host.counters import (
    CounterTable,
    CounterDelta,
    CounterReadError,
    CounterSource,
    IfCounters,
    NetlinkCounters,
    ProcNetDevCounters,
    ProcNetDevFormatError,
    StatsUnsupportedError,
    counter_delta,
    kernel_counter_bits,
    open_counters,
    parse_proc_net_dev,
)
from xtc.host.rtnl_codec import NetlinkDecodeError, NetlinkReplyError

DATA = Path(__file__).resolve().parents[1] / "data"
PROC = DATA / "proc_net_dev"
NL = DATA / "netlink"
PROC_RECORDED = sorted(p.stem for p in PROC.glob("*.txt"))
NL_RECORDED = sorted(p.name.split(".")[0] for p in NL.glob("*.stats.bin"))

HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|"
    "bytes    packets errs drop fifo colls carrier compressed\n"
)


def proc_line(name: str, rx_b: int, rx_p: int, rx_d: int, tx_b: int, tx_p: int, tx_d: int) -> str:
    return f"{name:>6}: {rx_b} {rx_p} 0 {rx_d} 0 0 0 0 {tx_b} {tx_p} 0 {tx_d} 0 0 0 0\n"


def nl_expected(name: str) -> dict:
    return json.loads((NL / f"{name}.expected.json").read_text())


def expected_by_index(name: str) -> dict[int, IfCounters]:
    return {int(i): IfCounters(**v["counters"]) for i, v in nl_expected(name)["links"].items()}


# --------------------------------------------------------------------------- /proc/net/dev


@pytest.mark.parametrize("name", PROC_RECORDED)
def test_proc_recorded_file_matches_netlink(name: str) -> None:
    problems: list[str] = []
    got = parse_proc_net_dev((PROC / f"{name}.txt").read_text(), problems)
    expected = json.loads((PROC / f"{name}.expected.json").read_text())
    assert problems == []
    assert got == {k: IfCounters(**v) for k, v in expected.items()}


def test_proc_keeps_file_order_and_reads_columns_by_header() -> None:
    # Transmit before Receive, and an extra column in front: columns are found by name.
    text = (
        "Inter-|  Transmit              |   Receive\n"
        " face |extra bytes packets drop|bytes packets drop\n"
        "  zz0: 9 10 11 12 13 14 15\n"
        "  aa1: 9 20 21 22 23 24 25\n"
    )
    got = parse_proc_net_dev(text)
    assert list(got) == ["zz0", "aa1"]
    assert got["zz0"] == IfCounters(rx_packets=14, tx_packets=11, rx_bytes=13, tx_bytes=10, rx_drops=15, tx_drops=12)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "0 line"),
        ("hello\nworld\n", "expected the header"),
        ('{"lo": 1}\n\n', "expected the header"),
        ("Inter-|   Receive |  Transmit\n face |bytes packets|bytes packets\n", "no column for rx_drops"),
        ("Inter-|   Receive |  Transmit\n face |bytes packets drop\n", "column groups"),
    ],
)
def test_proc_not_proc_net_dev_is_a_clear_error(text: str, fragment: str) -> None:
    with pytest.raises(ProcNetDevFormatError, match=fragment) as info:
        parse_proc_net_dev(text)
    assert isinstance(info.value, MeterError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ("  eth9 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", "no 'name:'"),
        ("    : 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", "bad interface name"),
        (" a b: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", "bad interface name"),
        ("  eth9: 1 2 3\n", "3 values, the header has 16"),
        ("  eth9: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n", "17 values"),
        ("  eth9: 1 -2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", "'-2' is not a counter"),
        ("  eth9: 1 2 x 4 5 6 7 8 9 10 11 12 13 14 15 16\n", "'x' is not a counter"),
        ("  eth9: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 18446744073709551616\n", "not a counter"),
        ("  eth9: 1 ２ 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", "not a counter"),  # a non-ASCII digit
        (proc_line("eth0", 5, 5, 5, 5, 5, 5), "duplicate interface"),
    ],
)
def test_proc_malformed_line_is_skipped_and_reported(bad: str, fragment: str) -> None:
    good = proc_line("eth0", 100, 10, 1, 200, 20, 2) + proc_line("eth1", 300, 30, 3, 400, 40, 4)
    text = HEADER + good[: len(good) // 2] + bad + good[len(good) // 2 :]
    problems: list[str] = []
    got = parse_proc_net_dev(text, problems)
    assert got == {
        "eth0": IfCounters(10, 20, 100, 200, 1, 2),
        "eth1": IfCounters(30, 40, 300, 400, 3, 4),
    }
    assert len(problems) == 1 and fragment in problems[0] and "line 4" in problems[0], problems


def test_proc_problems_are_logged_when_no_list_is_given(caplog: pytest.LogCaptureFixture) -> None:
    got = parse_proc_net_dev(HEADER + "  eth9: 1 2\n\n" + proc_line("eth0", 1, 2, 3, 4, 5, 6))
    assert list(got) == ["eth0"]
    assert any("eth9: 2 values" in r.getMessage() for r in caplog.records)


def test_proc_u64_max_is_accepted() -> None:
    top = 2**64 - 1
    got = parse_proc_net_dev(HEADER + proc_line("eth0", top, top, top, top, top, top))
    assert got["eth0"] == IfCounters(top, top, top, top, top, top)


@given(st.text(max_size=300))
def test_proc_parser_never_crashes_on_garbage_lines(garbage: str) -> None:
    problems: list[str] = []
    got = parse_proc_net_dev(HEADER + garbage + "\n" + proc_line("zz9", 1, 2, 3, 4, 5, 6), problems)
    for name, counters in got.items():
        assert ":" not in name and name.strip() == name and name
        assert all(0 <= v < 2**64 for v in counters.as_tuple())
    if "zz9" not in garbage:
        assert got["zz9"] == IfCounters(2, 5, 1, 4, 3, 6)


def test_proc_source_reads_recorded_file_and_reports_problems(tmp_path: Path) -> None:
    f = tmp_path / "dev"
    f.write_text(HEADER + proc_line("eth0", 1, 2, 3, 4, 5, 6) + "junk line\n")
    src = ProcNetDevCounters(f)
    assert isinstance(src, CounterSource)
    assert src.read() == {"eth0": IfCounters(2, 5, 1, 4, 3, 6)}
    assert len(src.last_problems) == 1 and "no 'name:'" in src.last_problems[0]
    f.write_text(HEADER + proc_line("eth0", 10, 20, 3, 40, 50, 6))  # read anew each time
    assert src.read()["eth0"].rx_packets == 20 and src.last_problems == []


def test_proc_source_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(CounterReadError, match="missing"):
        ProcNetDevCounters(tmp_path / "missing").read()
    (tmp_path / "other").write_text("not counters\n\n")
    with pytest.raises(ProcNetDevFormatError, match="other"):
        ProcNetDevCounters(tmp_path / "other").read()


# --------------------------------------------------------------------------- rtnetlink codec


def test_requests_are_what_pyroute2_encodes() -> None:
    pytest.importorskip("pyroute2")
    from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
    from pyroute2.netlink.rtnl.ifstatsmsg import ifstatsmsg

    for msg, ours, msg_type in (
        (ifstatsmsg(), rtnl_codec.encode_getstats_dump(77), rtnl_codec.RTM_GETSTATS),
        (ifinfmsg(), rtnl_codec.encode_getlink_dump(77), rtnl_codec.RTM_GETLINK),
    ):
        if msg_type == rtnl_codec.RTM_GETSTATS:
            msg["filter_mask"] = 1
        msg["header"]["type"] = msg_type
        msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
        msg["header"]["sequence_number"] = 77
        msg.encode()
        assert ours == bytes(msg.data)


@pytest.mark.parametrize("name", NL_RECORDED)
def test_recorded_stats_dump_decodes_to_what_ip_reported(name: str) -> None:
    meta = nl_expected(name)["replies"]["stats"]
    got = rtnl_codec.decode_stats_dump((NL / f"{name}.stats.bin").read_bytes(), seq=meta["seq"])
    assert got == expected_by_index(name)
    assert list(got) == sorted(got)  # the kernel dumps in ifindex order here


@pytest.mark.parametrize("name", NL_RECORDED)
def test_recorded_link_dump_decodes_to_the_names(name: str) -> None:
    exp = nl_expected(name)
    got = rtnl_codec.decode_link_dump((NL / f"{name}.link.bin").read_bytes(), seq=exp["replies"]["link"]["seq"])
    assert got == {int(i): v["name"] for i, v in exp["links"].items()}


@pytest.mark.parametrize("name", NL_RECORDED)
@pytest.mark.parametrize("kind", ["stats", "link"])
def test_recorded_dump_decodes_datagram_by_datagram(name: str, kind: str) -> None:
    """The adapter decodes one datagram at a time: same result, done only on the last."""
    meta = nl_expected(name)["replies"][kind]
    data = (NL / f"{name}.{kind}.bin").read_bytes()
    decode = rtnl_codec.decode_stats_into if kind == "stats" else rtnl_codec.decode_link_into
    whole = rtnl_codec.decode_stats_dump(data) if kind == "stats" else rtnl_codec.decode_link_dump(data)
    into: dict = {}
    off = 0
    sizes = meta["datagram_bytes"]
    assert sum(sizes) == len(data)
    for i, size in enumerate(sizes):
        status = decode(memoryview(data)[off : off + size], into, meta["seq"])
        assert status.done == (i == len(sizes) - 1)
        assert not status.interrupted and status.foreign == 0
        off += size
    assert into == whole


def test_recorded_dumps_give_the_packets_sent_between_them() -> None:
    """Between t0 and t1 the capture sent 2000 packets to and received 1500 from
    vif7.1, sent 700 on vif7.2, and 50 more on vif7.2 with its peer down (dropped)."""
    t0 = rtnl_codec.decode_stats_dump((NL / "dom0_veth_t0.stats.bin").read_bytes())
    t1 = rtnl_codec.decode_stats_dump((NL / "dom0_veth_t1.stats.bin").read_bytes())
    names = rtnl_codec.decode_link_dump((NL / "dom0_veth_t1.link.bin").read_bytes())
    by_name = {names[i]: i for i in t1}
    v1, v2 = by_name["vif7.1"], by_name["vif7.2"]
    # Plus the few packets (IGMP reports) the kernel sends after a link comes up.
    assert 2000 <= t1[v1].tx_packets - t0[v1].tx_packets <= 2010
    assert 1500 <= t1[v1].rx_packets - t0[v1].rx_packets <= 1510
    assert t1[v2].tx_packets - t0[v2].tx_packets == 700
    assert t1[v2].tx_drops - t0[v2].tx_drops == 50
    # 700 UDP datagrams of 1200 bytes + UDP, IPv4 and Ethernet headers, nothing else.
    assert t1[v2].tx_bytes - t0[v2].tx_bytes == 700 * (1200 + 8 + 20 + 14)


def test_foreign_sequence_numbers_are_skipped() -> None:
    data = (NL / "dom0_veth_t1.stats.bin").read_bytes()
    into: dict = {}
    status = rtnl_codec.decode_stats_into(data, into, seq=1)
    assert into == {} and not status.done and status.foreign == len(expected_by_index("dom0_veth_t1")) + 1
    with pytest.raises(NetlinkDecodeError, match="no NLMSG_DONE"):
        rtnl_codec.decode_stats_dump(data, seq=1)


def _messages(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each netlink message."""
    out, off = [], 0
    while off < len(data):
        mlen = struct.unpack_from("=I", data, off)[0]
        out.append((off, mlen))
        off += (mlen + 3) & ~3
    return out


@pytest.mark.parametrize("kind", ["stats", "link"])
def test_truncated_replies_are_clear_errors(kind: str) -> None:
    data = (NL / f"dom0_veth_t1.{kind}.bin").read_bytes()
    decode = rtnl_codec.decode_stats_dump if kind == "stats" else rtnl_codec.decode_link_dump
    msgs = _messages(data)
    cuts = {len(data) - 1, len(data) - 20, msgs[1][0], msgs[1][0] + 7, msgs[1][0] + 40, 3}
    for cut in sorted(cuts):
        with pytest.raises(NetlinkDecodeError, match="truncated|claims|no NLMSG_DONE"):
            decode(data[:cut])


@pytest.mark.parametrize("kind", ["stats", "link"])
def test_every_corrupted_byte_gives_a_value_or_a_clear_error(kind: str) -> None:
    """Flip each byte of a recorded reply: the decoder returns or raises its own errors, never crashes."""
    data = (NL / f"dom0_veth_t1.{kind}.bin").read_bytes()
    decode = rtnl_codec.decode_stats_dump if kind == "stats" else rtnl_codec.decode_link_dump
    step = 1 if kind == "stats" else 7
    for i in range(0, len(data), step):
        for value in (0x00, 0xFF, data[i] ^ 0x01):
            corrupt = bytearray(data)
            corrupt[i] = value
            try:
                decode(bytes(corrupt))
            except (NetlinkDecodeError, NetlinkReplyError):
                pass


def test_stats_message_without_link64_or_too_short_is_an_error() -> None:
    data = bytearray((NL / "dom0_veth_t1.stats.bin").read_bytes())
    off, _ = _messages(bytes(data))[0]
    struct.pack_into("=H", data, off + 28 + 2, 2)  # attribute type -> IFLA_STATS_LINK_XSTATS
    with pytest.raises(NetlinkDecodeError, match="no IFLA_STATS_LINK_64"):
        rtnl_codec.decode_stats_dump(bytes(data))
    data = bytearray((NL / "dom0_veth_t1.stats.bin").read_bytes())
    _, mlen = _messages(bytes(data))[0]
    short = data[off : off + 28 + 4 + 64]  # a message with only 64 bytes of counters
    struct.pack_into("=I", short, 0, len(short))
    struct.pack_into("=H", short, 28, 4 + 64)
    data[off : off + mlen] = short
    with pytest.raises(NetlinkDecodeError, match="at least 128"):
        rtnl_codec.decode_stats_dump(bytes(data))


def test_extra_attributes_take_the_slow_path_with_the_same_result() -> None:
    """A reply with more than the one attribute (another filter mask) decodes the same."""
    data = (NL / "dom0_veth_t1.stats.bin").read_bytes()
    out = bytearray()
    for off, mlen in _messages(data):
        msg = bytearray(data[off : off + mlen])
        if struct.unpack_from("=H", msg, 4)[0] == rtnl_codec.RTM_NEWSTATS:
            extra = struct.pack("=HH", 8, 5) + b"\x01\x02\x03\x04"  # an IFLA_STATS_AF_SPEC in front
            msg = msg[:28] + extra + msg[28:]
            struct.pack_into("=I", msg, 0, len(msg))
        out += msg
    assert rtnl_codec.decode_stats_dump(bytes(out)) == expected_by_index("dom0_veth_t1")


def _control_message(msg_type: int, code: int, seq: int = 0, flags: int = 0) -> bytes:
    return struct.pack("=IHHIIi", 20, msg_type, flags, seq, 0, code)


def test_kernel_errors_are_reported_with_their_errno() -> None:
    import errno

    with pytest.raises(NetlinkReplyError, match="RTM_GETSTATS dump: kernel replied .*not supported") as info:
        rtnl_codec.decode_stats_dump(_control_message(rtnl_codec.NLMSG_ERROR, -errno.EOPNOTSUPP))
    assert info.value.errno == errno.EOPNOTSUPP
    with pytest.raises(NetlinkReplyError, match="EINTR"):
        rtnl_codec.decode_link_dump(_control_message(rtnl_codec.NLMSG_DONE, -errno.EINTR))
    with pytest.raises(NetlinkDecodeError, match="unexpected acknowledgement"):
        rtnl_codec.decode_stats_dump(_control_message(rtnl_codec.NLMSG_ERROR, 0))


def test_interrupted_dump_is_flagged() -> None:
    data = bytearray((NL / "dom0_veth_t1.stats.bin").read_bytes())
    struct.pack_into("=H", data, 6, struct.unpack_from("=H", data, 6)[0] | rtnl_codec.NLM_F_DUMP_INTR)
    into: dict = {}
    assert rtnl_codec.decode_stats_into(bytes(data), into).interrupted
    assert into == expected_by_index("dom0_veth_t1")
    with pytest.raises(NetlinkDecodeError, match="interrupted"):
        rtnl_codec.decode_stats_dump(bytes(data))


def test_message_of_another_type_is_an_error() -> None:
    link = (NL / "dom0_veth_t1.link.bin").read_bytes()
    with pytest.raises(NetlinkDecodeError, match="expected RTM_NEWSTATS"):
        rtnl_codec.decode_stats_dump(link)
    stats = (NL / "dom0_veth_t1.stats.bin").read_bytes()
    with pytest.raises(NetlinkDecodeError, match="expected RTM_NEWLINK"):
        rtnl_codec.decode_link_dump(stats)


def test_rx_drops_add_missed_errors_like_proc_net_dev() -> None:
    data = bytearray((NL / "dom0_veth_t1.stats.bin").read_bytes())
    off, _ = _messages(bytes(data))[1]
    stats_at = off + 32
    struct.pack_into("=Q", data, stats_at + 6 * 8, 7)  # rx_dropped
    struct.pack_into("=Q", data, stats_at + 15 * 8, 2**64 - 3)  # rx_missed_errors
    got = rtnl_codec.decode_stats_dump(bytes(data))
    index = struct.unpack_from("=I", data, off + 20)[0]
    assert got[index].rx_drops == 4  # u64 sum, as the kernel prints it


# --------------------------------------------------------------------------- counter_delta


def test_delta_64bit_decrease_is_a_reset() -> None:
    assert counter_delta(10, 25) == CounterDelta(15, "ok")
    assert counter_delta(2**64 - 5, 3) == CounterDelta(3, "reset")  # no 64-bit wrap guessing
    assert counter_delta(2**32 - 5, 3) == CounterDelta(3, "reset")  # nor a 32-bit one
    assert counter_delta(1000, 10, max_increase=5) == CounterDelta(0, "reset")
    assert counter_delta(10, 10_000, max_increase=100) == CounterDelta(0, "jump")


def test_delta_32bit_rule_needs_a_bound_and_tells_wrap_from_reset() -> None:
    with pytest.raises(ValueError, match="max_increase"):
        counter_delta(5, 3, counter_bits=32)
    assert counter_delta(2**32 - 5, 3, counter_bits=32, max_increase=100) == CounterDelta(8, "wrap32")
    assert counter_delta(2**31, 3, counter_bits=32, max_increase=100) == CounterDelta(3, "reset")
    with pytest.raises(ValueError, match="2\\*\\*32"):
        counter_delta(2**32, 3, counter_bits=32, max_increase=100)
    with pytest.raises(ValueError):
        counter_delta(-1, 3)
    with pytest.raises(ValueError, match="32 or 64"):
        counter_delta(1, 3, counter_bits=16)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**40))
def test_delta_64bit_recovers_any_increase(start: int, inc: int) -> None:
    cur = start + inc
    if cur < 2**64:
        assert counter_delta(start, cur) == CounterDelta(inc, "ok")


@given(st.integers(0, 2**32 - 1), st.integers(0, 10_000))
def test_delta_32bit_recovers_increases_across_the_wrap(start: int, inc: int) -> None:
    d = counter_delta(start, (start + inc) % 2**32, counter_bits=32, max_increase=10_000)
    assert d.delta == inc and d.verdict == ("ok" if start + inc < 2**32 else "wrap32")


def test_kernel_counter_bits() -> None:
    assert kernel_counter_bits("x86_64") == 64 and kernel_counter_bits("aarch64") == 64
    assert kernel_counter_bits("i686") == 32 and kernel_counter_bits("armv7l") == 32


# --------------------------------------------------------------------------- adapters without root


def test_netlink_source_errors_are_counter_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CounterReadError, match="no such network namespace") as info:
        NetlinkCounters("xtcct-does-not-exist")
    assert info.value.netns == "xtcct-does-not-exist"
    with pytest.raises(CounterReadError, match="not a network namespace name"):
        NetlinkCounters("../etc")

    def no_netlink(*a: object, **k: object) -> socket.socket:
        raise OSError(97, "Address family not supported by protocol")

    monkeypatch.setattr(socket, "socket", no_netlink)
    with pytest.raises(StatsUnsupportedError, match="netlink route socket"):
        NetlinkCounters()


class _FakeKernelSocket:
    """A netlink route socket that answers dump requests with recorded replies
    (or a given error), datagram by datagram, rewriting the sequence number."""

    def __init__(self, replies: dict[int, list[bytes]], error: tuple[int, int] | None, groups: int) -> None:
        self.replies = replies
        self.error = error
        self.groups = groups
        self.queue: list[bytes] = []
        self.requests: list[int] = []

    def send(self, data: bytes) -> int:
        msg_type, _, seq = struct.unpack_from("=HHI", data, 4)
        self.requests.append(msg_type)
        if self.error is not None and self.error[0] == msg_type:
            self.queue = [struct.pack("=IHHIIi", 36, 2, 0, seq, 0, -self.error[1]) + data[:16]]
            return len(data)
        self.queue = []
        for datagram in self.replies[msg_type]:
            out = bytearray(datagram)
            for off, _ in _messages(datagram):
                struct.pack_into("=I", out, off + 8, seq)
            self.queue.append(bytes(out))
        return len(data)

    def recv_into(self, buf: bytearray, nbytes: int = 0, flags: int = 0) -> int:
        if self.groups:
            raise BlockingIOError
        data = self.queue.pop(0)
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        pass


def _recorded_datagrams(name: str, kind: str) -> list[bytes]:
    data = (NL / f"{name}.{kind}.bin").read_bytes()
    out, off = [], 0
    for size in nl_expected(name)["replies"][kind]["datagram_bytes"]:
        out.append(data[off : off + size])
        off += size
    return out


def _fake_netlink(
    monkeypatch: pytest.MonkeyPatch, error: tuple[int, int] | None = None
) -> list[_FakeKernelSocket]:
    """Fake route sockets; ``error`` = (request type, errno) makes that request fail."""
    made: list[_FakeKernelSocket] = []
    replies = {
        rtnl_codec.RTM_GETSTATS: _recorded_datagrams("dom0_veth_t1", "stats"),
        rtnl_codec.RTM_GETLINK: _recorded_datagrams("dom0_veth_t1", "link"),
    }

    def route_socket(*, groups: int = 0, timeout_s: float | None = None, buffer_bytes: int | None = None) -> _FakeKernelSocket:
        s = _FakeKernelSocket(replies, error, groups)
        made.append(s)
        return s

    monkeypatch.setattr("xtc.host.netlink.route_socket", route_socket)
    return made


def test_netlink_source_names_recorded_counters_and_dumps_links_once(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _fake_netlink(monkeypatch)
    src = NetlinkCounters()
    exp = nl_expected("dom0_veth_t1")["links"]
    want = {v["name"]: IfCounters(**v["counters"]) for v in exp.values()}
    assert src.read() == want
    assert src.read() == want
    assert src.ifindex == {v["name"]: int(i) for i, v in exp.items()}
    assert src.name_refreshes == 1
    stats_sock = made[1]
    assert stats_sock.requests == [rtnl_codec.RTM_GETLINK, rtnl_codec.RTM_GETSTATS, rtnl_codec.RTM_GETSTATS]


def test_netlink_without_getstats_falls_back_to_proc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import errno

    _fake_netlink(monkeypatch, error=(rtnl_codec.RTM_GETSTATS, errno.EOPNOTSUPP))
    with pytest.raises(StatsUnsupportedError, match="RTM_GETSTATS dump: kernel replied .*not supported"):
        NetlinkCounters().read()
    f = tmp_path / "dev"
    f.write_text(HEADER + proc_line("eth0", 1, 2, 3, 4, 5, 6))
    src = open_counters(proc_path=f)
    assert isinstance(src, ProcNetDevCounters)
    assert src.fallback_reason is not None and "RTM_GETSTATS unavailable" in src.fallback_reason
    assert src.read() == {"eth0": IfCounters(2, 5, 1, 4, 3, 6)}


def test_other_netlink_errors_do_not_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    _fake_netlink(monkeypatch, error=(rtnl_codec.RTM_GETLINK, errno.ENOMEM))
    with pytest.raises(CounterReadError, match="^netlink RTM_GETLINK dump: kernel replied ENOMEM") as info:
        open_counters()
    assert not isinstance(info.value, StatsUnsupportedError)


def test_open_counters_refuses_unknown_preference() -> None:
    with pytest.raises(ValueError, match="prefer"):
        open_counters(prefer="sysfs")  # type: ignore[arg-type]


# ------------------------------------------------------------------ arrays (the loop's decoder)


def _as_dict(arrays: rtnl_codec.StatsArrays) -> dict[int, IfCounters]:
    cols = [getattr(arrays, f).tolist() for f in ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_drops", "tx_drops")]
    return {ix: IfCounters(*(c[i] for c in cols)) for i, ix in enumerate(arrays.ifindex.tolist())}


@pytest.mark.parametrize("name", NL_RECORDED)
def test_recorded_stats_dump_decodes_to_the_same_arrays(name: str) -> None:
    meta = nl_expected(name)["replies"]["stats"]
    data = (NL / f"{name}.stats.bin").read_bytes()
    arrays, status = rtnl_codec.decode_stats_arrays(data, seq=meta["seq"])
    assert status.done and not status.interrupted and status.foreign == 0
    got = _as_dict(arrays)
    assert got == expected_by_index(name)
    assert list(got) == list(rtnl_codec.decode_stats_dump(data, seq=meta["seq"]))
    sizes = meta["datagram_bytes"]
    off = 0
    for i, size in enumerate(sizes):  # only the last datagram ends the dump
        msg_len = rtnl_codec.stats_msg_len(data)
        assert rtnl_codec.is_stats_datagram(memoryview(data)[off : off + size], msg_len) == (i < len(sizes) - 1)
        off += size


def _stats_messages(data: bytes) -> tuple[bytes, bytes]:
    """The first stats message of a recorded dump and its NLMSG_DONE."""
    (mlen,) = struct.unpack_from("=I", data, 0)
    return data[:mlen], data[-20:]


@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1),
                          st.integers(0, 3)), min_size=0, max_size=60))
def test_arrays_decode_like_the_dict_decoder(rows: list[tuple[int, int, int, int]]) -> None:
    """Repeated ifindexes, foreign and interrupted messages, a message of another shape: same result."""
    msg, done = _stats_messages((NL / "dom0_veth_t1.stats.bin").read_bytes())
    seq = 9
    out = bytearray()
    for ifindex, rxp, rxd, kind in rows:
        m = bytearray(msg)
        struct.pack_into("=I", m, 8, 8 if kind == 1 else seq)  # kind 1: another request's
        if kind == 2:
            struct.pack_into("=H", m, 6, struct.unpack_from("=H", m, 6)[0] | 0x10)  # NLM_F_DUMP_INTR
        struct.pack_into("=I", m, 20, ifindex)
        struct.pack_into("=Q", m, 32, rxp)
        struct.pack_into("=Q", m, 80, rxd)
        if kind == 3:  # an unknown attribute after the stats: another length, the slow path
            m += struct.pack("=HHI", 8, 99, 0)
            struct.pack_into("=I", m, 0, len(m))
        out += m
    d = bytearray(done)
    struct.pack_into("=I", d, 8, seq)
    out += d
    want: dict[int, IfCounters] = {}
    want_status = rtnl_codec.decode_stats_into(bytes(out), want, seq)
    arrays, status = rtnl_codec.decode_stats_arrays(bytes(out), seq)
    assert _as_dict(arrays) == want and list(_as_dict(arrays)) == list(want)
    assert status == want_status


def test_netlink_read_is_a_table_that_keeps_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_netlink(monkeypatch)
    src = NetlinkCounters()
    a, b = src.read(), src.read()
    assert isinstance(a, CounterTable) and a.names is b.names and a.index is b.index
    assert dict(a) == dict(b)
