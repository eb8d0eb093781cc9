"""The XCo wire protocol: round trips, strict decoding, and a fuzz of malformed datagrams that the
controller core must drop and count, never crash on, never answer with a directive."""

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xtc.xco import protocol as P
from xtc.xco.controller import DROP_REASONS, ControllerCore
from xtc.xco.topology import load_topology

DATA = Path(__file__).parent / "data"
NOW = 1_700_000_000_000_000
H = P.Header(3, 77, 12, NOW)

MESSAGES = [
    P.Register(H, b"\x01" * 8, "s1", ("10.0.1.1", "fd00::1")),
    P.Register(H, b"\x00" * 8, "h" * 64, ()),
    P.Backlog(H, (1, 2, 0xFFFFFFFE)),
    P.GiveUp(H, 5),
    P.Heartbeat(H),
    P.Leave(H),
    P.Directive(H, 4, NOW + 500, 10_000),
    P.Directive(H, None, NOW + 500, 0),
    P.Directive(H, 4, NOW + 500, 10_000, 100_000_000),
    P.RateDirective(H, NOW, ((1, 200_000_000), (2, 0))),
    P.Welcome(H, 10_000, "rate", 100_000),
    P.Ack(H, 41, ()),
    P.Ack(H, 0xFFFFFFFF, (0, 5, 0xFFFFFFFE)),
    P.Demand(H, ((1, 5_000_000), (2, 0))),
]


@pytest.mark.parametrize("m", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_survives_a_round_trip(m):
    assert P.decode(P.encode(m)) == m


def test_ack_is_30_bytes_plus_4_per_destination():
    assert len(P.encode(P.Ack(H, 9, ()))) == 30 and len(P.encode(P.Ack(H, 9, (1, 2)))) == 38


def test_directive_is_41_bytes():
    assert len(P.encode(P.Directive(H, 4, NOW, 10_000))) == 41


def test_a_slice_without_a_rate_is_the_plain_timeslice_directive():
    # kind 0, byte for byte: an agent that predates hybrid mode reads every timeslice directive
    plain = P.encode(P.Directive(H, 4, NOW, 10_000))
    assert plain[P.HEADER.size] == 0
    rated = P.encode(P.Directive(H, 4, NOW, 10_000, 50_000_000))
    assert rated[P.HEADER.size] == 2 and len(rated) == 49 and rated[:-8][P.HEADER.size + 1:] == plain[P.HEADER.size + 1:]


def test_hybrid_is_a_mode_of_the_welcome():
    assert P.decode(P.encode(P.Welcome(H, 10_000, "hybrid", 100_000))).mode == "hybrid"


@pytest.mark.parametrize("data, why", [
    (b"", "shorter than the header"),
    (b"XD" + P.encode(P.Heartbeat(H))[2:], "bad magic"),
    (P.encode(P.Heartbeat(H)) + b"\0", "heartbeat with a 1-byte body"),
    (P.encode(P.Backlog(H, (1,)))[:-1], "backlog of 1 destinations"),
    (P.encode(P.Heartbeat(H))[:3] + b"\x63" + P.encode(P.Heartbeat(H))[4:], "unknown message type 99"),
    (P.HEADER.pack(b"XC", 1, 4, 3, 77, 0, NOW), "seq 0"),
    (P.encode(P.Directive(H, None, NOW, 0))[:-1] + b"\x01", "a hold has no slice length"),
    (P.encode(P.Register(H, b"\x01" * 8, "s1", ("10.0.1.1",))) + b"\0", "trailing bytes"),
    (P.encode(P.Welcome(H, 10_000, "rate", 1))[:-5] + b"\x09" + b"\0\0\0\1", "bad mode"),
    (P.encode(P.Ack(H, 1, (3,)))[:-1], "ack of seq 1 with 1 destinations"),
    (P.encode(P.Ack(H, 1, (3,))) + b"\0", "ack of seq 1 with 1 destinations"),
    (P.encode(P.Ack(H, 1, ()))[:-1], "ack too short"),
    (P.encode(P.Ack(H, 1, ()))[:-6] + b"\0\0\0\0\0\0", "ack of seq 0"),
    (P.encode(P.Directive(H, 4, NOW, 10_000, 1))[:-8] + b"\0" * 8, "a rated slice needs a destination and a rate"),
    (P.encode(P.Directive(H, 4, NOW, 10_000, 1))[:P.HEADER.size + 1] + b"\xff" * 4
     + P.encode(P.Directive(H, 4, NOW, 10_000, 1))[P.HEADER.size + 5:], "a rated slice needs a destination"),
    (P.encode(P.Directive(H, 4, NOW, 10_000, 1))[:-1], "rated timeslice directive body of 24 bytes"),
    (P.encode(P.Demand(H, ((1, 5),)))[:-1], "demand of 1 flows in a 13-byte body"),
    (P.encode(P.Demand(H, ((1, 5),)))[:P.HEADER.size] + b"\0\0", "demand of 0 flows"),
    (P.encode(P.Demand(H, ((1, 5),)))[:P.HEADER.size + 1], "demand without a count"),
])
def test_malformed_datagrams_are_refused_with_the_reason(data, why):
    with pytest.raises(P.DecodeError, match=why) as e:
        P.decode(data)
    assert e.value.reason == "malformed"


def test_another_version_is_told_apart():
    data = bytearray(P.encode(P.Heartbeat(H)))
    data[2] = 2
    with pytest.raises(P.DecodeError) as e:
        P.decode(bytes(data))
    assert e.value.reason == "version"


def test_encode_refuses_fields_that_do_not_fit():
    with pytest.raises(ValueError):
        P.encode(P.GiveUp(H, 1 << 32))
    with pytest.raises(ValueError):
        P.encode(P.Register(H, b"\x01" * 8, "x" * 65, ()))
    with pytest.raises(ValueError):
        P.encode(P.Backlog(H, tuple(range(3000))))  # over MAX_DATAGRAM
    with pytest.raises(ValueError, match="a hold has none"):
        P.encode(P.Directive(H, None, NOW, 0, 1_000_000))
    with pytest.raises(ValueError, match="must be positive"):
        P.encode(P.Directive(H, 4, NOW, 10_000, 0))
    with pytest.raises(ValueError, match="at least one flow"):
        P.encode(P.Demand(H, ()))
    with pytest.raises(ValueError):
        P.encode(P.Demand(H, ((1, -1),)))


# --------------------------------------------------------------------------------------- fuzzing

def _core():
    p = DATA / "fig1a.toml"
    topo = load_topology(p)
    digest = P.topology_digest(p.read_bytes())
    core = ControllerCore(topo, digest, NOW, slice_us=10_000, lead_us=500, clock_window_us=1_000_000)
    # s1 (host 0) and r1 (host 5) registered from known addresses; s1 backlogged towards r1.
    for x in (0, 5):
        core.handle(P.encode(P.Register(P.Header(x, 9, 1, NOW), digest, topo.hosts[x], ())), ("127.0.0.1", 9000 + x), NOW)
    core.handle(P.encode(P.Backlog(P.Header(0, 9, 2, NOW), (5,))), ("127.0.0.1", 9000), NOW)
    return core, digest


def _check_drop(core, data, addr, now):
    before = sum(core.dropped.values())
    regs = dict(core.hosts)
    out = core.handle(data, addr, now)
    # Every datagram sent goes to a registered host, at the address it registered from.
    for s in out:
        assert s.host in core.hosts and s.addr == core.hosts[s.host].addr
    return sum(core.dropped.values()) - before, regs, out


def test_thousands_of_random_byte_strings_are_dropped_and_counted():
    core, _ = _core()
    rng = random.Random(7)
    n = 5000
    now = NOW
    for i in range(n):
        k = rng.choice((0, 1, 5, 23, 24, 25, 40, 200, 9000))
        data = bytes(rng.getrandbits(8) for _ in range(k))
        if i % 2 and k >= 4:
            data = b"XC\x01" + data[3:]  # get past magic and version to reach the body checks
        now += 1
        dropped, _, out = _check_drop(core, data, ("127.0.0.1", 40000), now)
        assert dropped == 1, data
        assert not [s for s in out if s.addr == ("127.0.0.1", 40000)]
    assert sum(core.dropped.values()) == n
    assert set(core.dropped) <= set(DROP_REASONS)


def _mutations():
    valid = [P.encode(m) for m in MESSAGES] + [
        P.encode(P.Backlog(P.Header(0, 9, 3, NOW), (5,))),
        P.encode(P.GiveUp(P.Header(0, 9, 3, NOW), 5)),
        P.encode(P.Heartbeat(P.Header(5, 9, 2, NOW))),
    ]
    return st.tuples(st.sampled_from(valid), st.integers(0, 60), st.binary(max_size=8),
                     st.sampled_from(("flip", "insert", "truncate", "replace")))


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutations())
def test_mutated_messages_never_crash_and_never_reach_an_unregistered_host(case):
    core, _ = _core()
    data, pos, junk, how = case
    pos = min(pos, len(data))
    if how == "flip":
        data = data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1:] if pos < len(data) else data + b"\x01"
    elif how == "insert":
        data = data[:pos] + junk + data[pos:]
    elif how == "truncate":
        data = data[:pos]
    else:
        data = data[:pos] + junk + data[pos + len(junk):]
    dropped, regs, out = _check_drop(core, data, ("127.0.0.1", 9000), NOW + 10)
    try:
        P.decode(data)
        valid = True
    except P.DecodeError:
        valid = False
    if not valid:
        # Dropped, counted once, and nobody registered or unregistered by it.
        assert dropped == 1
        assert set(core.hosts) == set(regs)


def test_stale_replayed_unknown_and_spoofed_messages_are_counted_by_reason():
    core, digest = _core()
    addr = ("127.0.0.1", 9000)
    cases = [
        (P.Heartbeat(P.Header(0, 9, 3, NOW - 2_000_000)), addr, "stale"),
        (P.Heartbeat(P.Header(0, 9, 3, NOW + 2_000_000)), addr, "stale"),
        (P.Heartbeat(P.Header(0, 9, 2, NOW)), addr, "replay"),          # seq 2 was the backlog
        (P.Heartbeat(P.Header(0, 8, 3, NOW)), addr, "session"),
        (P.Heartbeat(P.Header(0, 9, 3, NOW)), ("127.0.0.2", 9000), "address"),
        (P.Heartbeat(P.Header(1, 9, 1, NOW)), addr, "unknown_host"),    # s2 never registered
        (P.Heartbeat(P.Header(99, 9, 1, NOW)), addr, "unknown_host"),   # not in the topology
        (P.Register(P.Header(1, 9, 1, NOW), digest, "s3", ()), addr, "unknown_host"),  # id/name mismatch
        (P.Register(P.Header(1, 9, 1, NOW), b"\0" * 8, "s2", ()), addr, "topology"),
        (P.Register(P.Header(1, 9, 1, NOW), digest, "s2", ("10.0.1.1",)), addr, "invalid"),  # s1's VM
        (P.Register(P.Header(0, 3, 1, NOW - 1), digest, "s1", ()), addr, "replay"),  # older session's register
        (P.Backlog(P.Header(0, 9, 3, NOW), (0,)), addr, "invalid"),     # to itself
        (P.Directive(P.Header(0, 9, 3, NOW), 5, NOW, 10), addr, "invalid"),
    ]
    for m, a, reason in cases:
        before = core.dropped[reason]
        assert core.handle(P.encode(m), a, NOW + 1) == [], (m, reason)
        assert core.dropped[reason] == before + 1, (m, reason, core.dropped)
    assert set(core.hosts) == {0, 5}


def test_the_controller_acks_each_heartbeat_with_the_backlog_it_holds():
    core, digest = _core()
    (s,) = core.handle(P.encode(P.Heartbeat(P.Header(0, 9, 3, NOW + 10))), ("127.0.0.1", 9000), NOW + 10)
    ack = P.decode(s.data)
    assert s.addr == ("127.0.0.1", 9000) and isinstance(ack, P.Ack)
    assert (ack.header.host, ack.header.session, ack.seq, ack.backlog) == (0, core.session, 3, (5,))
    (s,) = core.handle(P.encode(P.Heartbeat(P.Header(5, 9, 2, NOW + 20))), ("127.0.0.1", 9005), NOW + 20)
    assert P.decode(s.data).backlog == ()
    # an ack sent to the controller is refused
    assert core.handle(P.encode(P.Ack(P.Header(0, 9, 4, NOW), 1, ())), ("127.0.0.1", 9000), NOW + 30) == []
    assert core.dropped["invalid"] == 1
