"""The lab's emulated Dom0 delivery cost (``xtc lab run tcpudp --host-delivery-cost-us``): its eBPF
program run by a small interpreter of the instructions it uses against a fake clock (the spin ends
at the deadline, or at its bound when the clock is implausibly fast, and the packet is counted),
the option's checks, and the alternated run's numbers from the program's counters.  The program in
a real kernel: tests/root/test_lab_hostcost_netns.py."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import pytest
from xtc_lab.lab import hostcost
from xtc_lab.lab.experiments import tcpudp
from xtc_lab.lab.experiments import tcpudp_phases as tp
from xtc_lab.lab.harness import RunContext
from xtc_lab.lab.netlab import VR

from xtc.host.bpfprog import decode

MASK = 2**64 - 1


def run(code: bytes, slots: dict[int, list[int]], clock_step_ns: int, start_ns: int = 10**9) -> tuple[int, int]:
    """Run ``code`` on a fake ``bpf_ktime_get_ns`` that moves ``clock_step_ns`` a read; the map is
    ``slots`` (index -> [packets, spent_ns, cut_short]).  Returns (r0 at exit, clock reads)."""
    insns = decode(code)
    reg = [0] * 11
    stack: dict[int, int] = {}
    now = [start_ns]
    reads = [0]
    pc = 0
    steps = 0

    def s64(v: int) -> int:
        return v - 2**64 if v >= 2**63 else v

    while True:
        steps += 1
        assert steps < 10**6, "the program does not end"
        op, dst, src, off, imm = insns[pc]
        pc += 1
        if op == 0x85:  # call
            if imm == hostcost.HELPER_KTIME_GET_NS:
                now[0] += clock_step_ns
                reads[0] += 1
                reg[0] = now[0]
            elif imm == hostcost.HELPER_MAP_LOOKUP_ELEM:
                assert reg[1] == ("map", 33) and reg[2] == ("fp", -4)
                reg[0] = ("slot", stack[-4]) if stack[-4] in slots else 0
            else:
                raise AssertionError(f"helper {imm}")
        elif op == 0xBF:
            reg[dst] = ("fp", 0) if src == 10 else reg[src]
        elif op == 0xB7:
            reg[dst] = imm & MASK
        elif op == 0x07:
            reg[dst] = (reg[dst][0], reg[dst][1] + imm) if isinstance(reg[dst], tuple) else (reg[dst] + imm) & MASK
        elif op == 0x17:
            reg[dst] = (reg[dst] - imm) & MASK
        elif op == 0x1F:
            reg[dst] = (reg[dst] - reg[src]) & MASK
        elif op == 0x62:  # *(u32 *)(dst + off) = imm
            assert dst == 10
            stack[off] = imm
        elif op == 0x18:  # ld_imm64 of a map fd
            assert src == 1
            reg[dst] = ("map", imm)
            pc += 1
        elif op == 0xDB:  # lock *(u64 *)(dst + off) += src
            kind, i = reg[dst]
            assert kind == "slot" and off in (0, 8, 16)
            slots[i][off // 8] += reg[src]
        elif op == 0xAD:  # jlt (unsigned)
            pc += off if reg[dst] < reg[src] else 0
        elif op == 0x05:
            pc += off
        elif op == 0x55:
            pc += off if reg[dst] != (imm & MASK) else 0
        elif op == 0x15:
            pc += off if reg[dst] == (imm & MASK) else 0
        elif op == 0x95:
            return s64(reg[0]), reads[0]
        else:
            raise AssertionError(f"opcode {op:#x} at {pc - 1}")


def test_the_program_spins_until_the_cost_has_passed_counts_the_packet_and_lets_it_go_on() -> None:
    slots = {0: [0, 0, 0], 1: [0, 0, 0]}
    code = hostcost.program(33, 1, 3000)
    assert len(decode(code)) == hostcost.INSN_COUNT == 26
    r0, reads = run(code, slots, clock_step_ns=40)
    assert r0 == hostcost.TC_ACT_UNSPEC  # the packet goes on to the next filter / the stack
    assert slots[0] == [0, 0, 0]
    packets, spent, cut = slots[1]
    assert (packets, cut) == (1, 0)
    assert 3000 <= spent < 3000 + 40 and reads == 1 + math.ceil(3000 / 40)
    run(code, slots, clock_step_ns=25)  # a second packet adds to the same slot
    assert slots[1][0] == 2 and slots[1][1] >= 6000


def test_the_loop_is_bounded_and_says_when_the_bound_cut_it_short() -> None:
    slots = {0: [0, 0, 0]}
    n = hostcost.max_iterations(2000)
    assert n == 2000 // hostcost.MIN_NS_PER_READ + 64
    r0, reads = run(hostcost.program(33, 0, 2000), slots, clock_step_ns=1)  # a clock faster than any read
    assert r0 == hostcost.TC_ACT_UNSPEC and reads == 1 + n
    assert slots[0][0] == 1 and slots[0][2] == 1 and slots[0][1] < 2000
    slots = {0: [0, 0, 0]}
    run(hostcost.program(33, 0, 2000), slots, clock_step_ns=hostcost.MIN_NS_PER_READ)  # the bound's own floor
    assert slots[0][2] == 0 and slots[0][1] >= 2000


def test_a_missing_slot_passes_the_packet_uncounted() -> None:
    slots: dict[int, list[int]] = {}
    r0, _ = run(hostcost.program(33, 5, 1000), slots, clock_step_ns=30)
    assert r0 == hostcost.TC_ACT_UNSPEC and slots == {}


def test_the_cost_is_carried_in_the_deadline_immediate() -> None:
    insns = decode(hostcost.program(9, 0, 4321))
    assert insns[3] == (0x07, 8, 0, 0, 4321)
    assert insns[4] == (0xB7, 9, 0, 0, hostcost.max_iterations(4321))
    assert insns[13][:3] == (0x18, 1, 1) and insns[13][4] == 9


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, 50.5, "3", True, None])
def test_a_bad_cost_is_one_clear_error(bad: Any) -> None:
    with pytest.raises(ValueError, match="--host-delivery-cost-us"):
        hostcost.check_cost_us(bad)
    with pytest.raises(ValueError, match="--host-delivery-cost-us"):
        hostcost.DeliveryCost("ns", ("eth0",), bad)


def test_a_bad_slot_or_cost_ns_is_refused() -> None:
    with pytest.raises(ValueError, match="slot"):
        hostcost.program(3, -1, 1000)
    with pytest.raises(ValueError, match="cost_ns"):
        hostcost.program(3, 0, 0)
    with pytest.raises(ValueError, match="no interface"):
        hostcost.DeliveryCost("ns", (), 2.0)
    assert hostcost.check_cost_us(3) == 3.0 and hostcost.DeliveryCost("ns", ("eth0",), 2.5).cost_ns == 2500


def test_slots_parse() -> None:
    import struct

    assert hostcost.parse_slot(struct.pack("<QQQ", 5, 12_000, 1)) == hostcost.Slot(5, 12_000, 1)


# ------------------------------------------------------------------ the alternated run
def vr(k: int, kind: str = "netns") -> VR:
    return VR(k=k, name=f"xtcx-ab12-vr{k}", kind=kind, tg_ns=f"xtcx-ab12-tg{k}", tr_ns=f"xtcx-ab12-tr{k}",
              bridges=(f"xtcx-ab12-a{k}", f"xtcx-ab12-b{k}"), vifs=(f"vif10{k}.0", f"vif10{k}.1"),
              tg_addr=f"198.18.{k}.1", tr_addr=f"198.18.{k}.2")


def test_the_costs_sit_on_each_netns_vrs_own_ends() -> None:
    costs = tp.delivery_costs({"tcp": vr(1), "udp": vr(2)}, 3.0)
    assert {k: (c.netns, tuple(c.ifnames), c.cost_us) for k, c in costs.items()} == {
        "tcp": ("xtcx-ab12-vr1", ("eth0", "eth1"), 3.0), "udp": ("xtcx-ab12-vr2", ("eth0", "eth1"), 3.0)}
    assert tp.delivery_costs({"tcp": vr(1)}, None) == {}
    with pytest.raises(ValueError, match="not a netns VR"):
        tp.delivery_costs({"tcp": vr(1, "lxc")}, 3.0)


def test_a_half_done_install_is_taken_back(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, str]] = []

    def install(c: hostcost.DeliveryCost) -> None:
        events.append(("on", c.netns))
        if c.netns.endswith("vr2"):
            raise OSError("refused")

    monkeypatch.setattr(hostcost.DeliveryCost, "install", install)
    monkeypatch.setattr(hostcost.DeliveryCost, "remove", lambda c: events.append(("off", c.netns)))
    costs = tp.delivery_costs({"tcp": vr(1), "udp": vr(2)}, 3.0)
    with pytest.raises(OSError, match="refused"), tp._in_place(costs, lambda m: None):
        raise AssertionError("not reached")
    assert events == [("on", "xtcx-ab12-vr1"), ("on", "xtcx-ab12-vr2"), ("off", "xtcx-ab12-vr1"),
                      ("off", "xtcx-ab12-vr2")]
    events.clear()
    with pytest.raises(SystemExit), tp._in_place({"tcp": costs["tcp"]}, lambda m: None):
        raise SystemExit(143)  # SIGTERM in a lab command (xtc_lab.unwind)
    assert events == [("on", "xtcx-ab12-vr1"), ("off", "xtcx-ab12-vr1")]


def test_a_window_counts_what_paid_the_cost_and_its_cpu() -> None:
    from test_lab_tcpudp_phases import snaps, summary

    e0, e1 = snaps(dt=10.0)
    e0["cost"] = {"tcp": (1_000, 3_000_000), "udp": (5_000, 15_000_000)}
    e1["cost"] = {"tcp": (301_000, 903_000_000), "udp": (205_000, 615_000_000)}
    w = tp.window_record("xtc", 0, summary(), e0, e1, {"udp": 18_000.0, "tcp": 72_000.0})
    assert w["tcp_cost_paid_kpps"] == pytest.approx(30.0) and w["udp_cost_paid_kpps"] == pytest.approx(20.0)
    assert w["tcp_cost_cpu_percent"] == pytest.approx(9.0) and w["udp_cost_cpu_percent"] == pytest.approx(6.0)
    assert w["host_delivery_cost_cpu_percent"] == pytest.approx(15.0)
    e0.pop("cost"), e1.pop("cost")
    w = tp.window_record("xtc", 0, summary(), e0, e1, {"udp": 18_000.0, "tcp": 72_000.0})
    assert math.isnan(w["udp_cost_paid_kpps"]) and math.isnan(w["host_delivery_cost_cpu_percent"])


@pytest.mark.parametrize(("extra", "kind", "words"), [
    (["--host-delivery-cost-us", "0"], "netns", "want a number of microseconds"),
    (["--host-delivery-cost-us", "3"], "netns", "--tcpudp-phases"),
    (["--host-delivery-cost-us", "3", "--tcpudp-phases", "without,xtc"], "lxc", "--kind netns"),
])
def test_the_option_is_refused_where_it_does_not_apply(tmp_path: Path, extra: list[str], kind: str, words: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    p = argparse.ArgumentParser()
    tcpudp.add_arguments(p)
    args = p.parse_args(extra)
    args.model = None
    built: list[str] = []
    monkeypatch.setattr(tcpudp, "experiment_lab", lambda *a, **k: built.append("lab"))
    monkeypatch.setattr(tp, "experiment_lab", lambda *a, **k: built.append("lab"))
    with pytest.raises(ValueError, match=words):
        tcpudp.run(RunContext(out_dir=tmp_path, kind=kind, say=lambda m: None), args)
    assert built == []  # refused before anything is made
