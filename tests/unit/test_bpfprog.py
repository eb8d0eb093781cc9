"""Early drop's eBPF program (xtc.host.bpfprog): its instructions one by one where they matter, and
what it does, run by a small interpreter of the opcodes it uses (the kernel's verifier and real
packets: tests/root/test_early_drop_bpf.py)."""

from __future__ import annotations

import struct

import pytest

from xtc.host import bpfprog
from xtc.host.bpfprog import TC_ACT_SHOT, TC_ACT_UNSPEC, decode, ifindex_key, limits_value, parse_limits_value, program

LIMITS_FD, DROPS_FD = 7, 9


def test_the_program_reads_the_egress_ifindex_and_looks_it_up_in_the_limits_map():
    ins = decode(program(LIMITS_FD, DROPS_FD))
    assert len(ins) == bpfprog.INSN_COUNT == 33
    assert ins[0] == (0xBF, 6, 1, 0, 0)  # r6 = skb
    assert ins[1] == (0x61, 2, 6, 40, 0)  # r2 = skb->ifindex (u32 at offsetof(struct __sk_buff, ifindex))
    assert ins[2] == (0x63, 10, 2, -4, 0)  # the key on the stack
    assert ins[3] == (0x18, 1, 1, 0, LIMITS_FD) and ins[4] == (0, 0, 0, 0, 0)  # ld_imm64 of the limits map fd
    assert ins[7] == (0x85, 0, 0, 0, 1)  # bpf_map_lookup_elem
    op, dst, _src, off, imm = ins[8]
    assert (op, dst, imm) == (0x15, 0, 0) and ins[8 + 1 + off][:2] == (0xB7, 0)
    assert ins[8 + 1 + off][4] == TC_ACT_UNSPEC  # no entry: the next filter / the default, not TC_ACT_OK


def test_the_bucket_compares_how_far_ahead_tat_runs_with_the_credit_and_counts_a_drop_atomically():
    ins = decode(program(LIMITS_FD, DROPS_FD))
    assert ins[10] == (0x85, 0, 0, 0, 5)  # bpf_ktime_get_ns
    assert ins[11] == (0x79, 1, 7, 16, 0)  # tat at offset 16 of the limits value
    assert ins[16] == (0x79, 3, 7, 8, 0)  # credit_ns at 8
    op, dst, src, off, _ = ins[17]
    assert (op, dst, src) == (0x2D, 2, 3)  # if ahead > credit (unsigned) goto DROP
    drop = 17 + 1 + off
    assert ins[drop] == (0x18, 1, 1, 0, DROPS_FD)  # the drops map, not the limits map
    assert ins[18] == (0x79, 4, 7, 0, 0) and ins[20] == (0x7B, 7, 1, 16, 0)  # tat += interval, stored back
    assert (0xDB, 0, 1, 0, 0) in ins[drop:]  # lock xadd: the counter is an atomic add
    assert ins[-2] == (0xB7, 0, 0, 0, TC_ACT_SHOT) and ins[-1][0] == 0x95


class _Vm:
    """Just enough eBPF to run the program: 64-bit registers, a stack, map values as bytearrays."""

    def __init__(self, maps: dict[int, dict[bytes, bytearray]], clock_ns: list[int]) -> None:
        self.maps, self.clock = maps, clock_ns

    def run(self, code: bytes, ifindex: int) -> int:
        ins = decode(code)
        stack = bytearray(512)
        skb = bytearray(200)
        struct.pack_into("<I", skb, 40, ifindex)
        r: list[object] = [0] * 11
        r[1], r[10] = (skb, 0), (stack, 512)
        pc = 0
        mask = (1 << 64) - 1

        def mem(p: object, off: int) -> tuple[bytearray, int]:
            buf, base = p  # type: ignore[misc]
            return buf, base + off

        while True:
            op, dst, src, off, imm = ins[pc]
            pc += 1
            if op == 0xBF:
                r[dst] = r[src]
            elif op == 0xB7:
                r[dst] = imm
            elif op == 0x18:
                r[dst] = ("map", ins[pc][4] << 32 | imm & 0xFFFFFFFF)
                pc += 1
            elif op == 0x07:
                if isinstance(r[dst], tuple):
                    r[dst] = (r[dst][0], r[dst][1] + imm)  # type: ignore[index]
                else:
                    r[dst] = (r[dst] + imm) & mask  # type: ignore[operator]
            elif op == 0x0F:
                r[dst] = (r[dst] + r[src]) & mask  # type: ignore[operator]
            elif op == 0x1F:
                r[dst] = (r[dst] - r[src]) & mask  # type: ignore[operator]
            elif op in (0x61, 0x79):
                b, at = mem(r[src], off)
                r[dst] = struct.unpack_from("<I" if op == 0x61 else "<Q", b, at)[0]
            elif op in (0x63, 0x7B):
                b, at = mem(r[dst], off)
                struct.pack_into("<I" if op == 0x63 else "<Q", b, at, r[src] & mask)  # type: ignore[operator]
            elif op == 0xDB:
                b, at = mem(r[dst], off)
                struct.pack_into("<Q", b, at, struct.unpack_from("<Q", b, at)[0] + r[src])  # type: ignore[operator]
            elif op == 0x85:
                if imm == 1:
                    m = self.maps[r[1][1]]  # type: ignore[index]
                    b, at = mem(r[2], 0)
                    v = m.get(bytes(b[at:at + 4]))
                    r[0] = 0 if v is None else (v, 0)
                elif imm == 5:
                    r[0] = self.clock[0]
                else:
                    raise AssertionError(f"helper {imm}")
            elif op in (0x15, 0x3D, 0x2D):
                a = r[dst] if not isinstance(r[dst], tuple) else 1
                b = imm if op == 0x15 else r[src]
                if (op == 0x15 and a == b) or (op == 0x3D and a >= b) or (op == 0x2D and a > b):  # type: ignore[operator]
                    pc += off
            elif op == 0x95:
                return r[0] if r[0] < 2**31 else r[0] - 2**64  # type: ignore[operator,return-value]
            else:
                raise AssertionError(f"opcode {op:#x}")


def _run(rate_pps: float, credit_s: float, arrivals_ns: list[int], ifindex: int = 5) -> tuple[list[int], int]:
    limits = {ifindex_key(ifindex): bytearray(limits_value(rate_pps, credit_s))}
    drops = {ifindex_key(ifindex): bytearray(8)}
    clock = [0]
    vm = _Vm({LIMITS_FD: limits, DROPS_FD: drops}, clock)
    code = program(LIMITS_FD, DROPS_FD)
    verdicts = []
    for t in arrivals_ns:
        clock[0] = t
        verdicts.append(vm.run(code, ifindex))
    return verdicts, struct.unpack("<Q", drops[ifindex_key(ifindex)])[0]


def test_a_burst_passes_up_to_the_credit_then_the_rate_and_every_drop_is_counted():
    # 1000 pps (1 ms apart) with 10 ms of credit: a burst of 100 at one instant passes 11 (the first, then 10 of credit)
    t0 = 10**12
    verdicts, dropped = _run(1000.0, 0.010, [t0] * 100)
    assert verdicts.count(TC_ACT_UNSPEC) == 11 and verdicts[:11] == [TC_ACT_UNSPEC] * 11
    assert dropped == 89 == verdicts.count(TC_ACT_SHOT)
    # then 5x the rate for a second: about the rate passes (1000 + what the credit had), the rest is dropped
    verdicts, dropped = _run(1000.0, 0.010, [t0 + i * 200_000 for i in range(5000)])
    assert 1000 <= verdicts.count(TC_ACT_UNSPEC) <= 1012
    assert dropped == verdicts.count(TC_ACT_SHOT)


def test_below_the_rate_nothing_is_dropped_and_another_interface_is_not_limited():
    verdicts, dropped = _run(1000.0, 0.010, [10**12 + i * 1_100_000 for i in range(500)])
    assert dropped == 0 and set(verdicts) == {TC_ACT_UNSPEC}
    limits = {ifindex_key(5): bytearray(limits_value(1.0, 0.001))}
    vm = _Vm({LIMITS_FD: limits, DROPS_FD: {}}, [10**12])
    assert [vm.run(program(LIMITS_FD, DROPS_FD), 6) for _ in range(50)] == [TC_ACT_UNSPEC] * 50


def test_map_values_and_keys():
    assert ifindex_key(7) == b"\x07\0\0\0"
    rate, credit, tat = parse_limits_value(limits_value(20_000.0, 0.3, tat_ns=5))
    assert rate == pytest.approx(20_000.0) and credit == pytest.approx(0.3) and tat == 5
    for bad in ((0.0, 0.3), (20_000.0, 0.0), (float("nan"), 0.3)):
        with pytest.raises(ValueError, match="rate_pps"):
            limits_value(*bad)
    with pytest.raises(ValueError, match="interface index"):
        ifindex_key(0)


def test_the_filter_and_clsact_messages_round_trip_through_the_dump_decoder():
    from xtc.host import tccodec
    from xtc.host.netlink import NLMSGHDR

    msg = tccodec.encode_bpf_filter(3, ifindex=12, parent=tccodec.CLSACT_EGRESS, prio=0xED0, handle=0xED0,
                                    prog_fd=42, name="xtc_ed+clsact")
    _len, mtype, flags, seq, _ = NLMSGHDR.unpack_from(msg)
    assert (mtype, seq) == (tccodec.RTM_NEWTFILTER, 3)
    assert flags & 0x400 and not flags & 0x200  # NLM_F_CREATE, not NLM_F_EXCL: a leftover's is replaced
    (f,) = tccodec.decode_filters(msg)
    assert (f.ifindex, f.parent, f.handle, f.prio, f.protocol, f.kind, f.bpf_name) == (
        12, 0xFFFFFFF3, 0xED0, 0xED0, tccodec.ETH_P_ALL, "bpf", "xtc_ed+clsact")
    dele = bytearray(tccodec.encode_filter_delete(4, ifindex=12, parent=tccodec.CLSACT_EGRESS, prio=0xED0,
                                                  handle=0xED0, kind="bpf"))
    assert struct.unpack_from("=H", dele, 4)[0] == tccodec.RTM_DELTFILTER
    struct.pack_into("=H", dele, 4, tccodec.RTM_NEWTFILTER)  # read back by the dump decoder
    (d,) = tccodec.decode_filters(bytes(dele))
    assert (d.handle, d.prio, d.kind) == (0xED0, 0xED0, "bpf")
    add = tccodec.encode_clsact("add", 5, 12)
    o = tccodec.decode_tc_dump(add)[0]
    assert (o.ifindex, o.handle, o.parent, o.kind) == (12, 0xFFFF0000, 0xFFFFFFF1, "clsact")
