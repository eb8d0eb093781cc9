"""Early drop's eBPF program: a queue-less packet-rate bucket per interface.  Pure: bytes in, bytes
out (loaded by :mod:`xtc.host.bpflimiter` through :mod:`xtc.host.bpfsys`).

The program is a ``cls_bpf`` classifier in direct-action mode on the ``clsact`` egress of a VR's
host-side interface (the host's hand-over to the VR).  It looks the packet's interface
(``skb->ifindex``, the egress device) up in the **limits** map; an interface without an entry is
not limited and the packet goes on (``TC_ACT_UNSPEC``: the next filter, if any, still sees it).
For one with an entry it runs GCRA (a "theoretical arrival time" ``tat_ns``, an ``interval_ns`` =
1e9 / rate, a credit of ``credit_ns``): a packet that would put ``tat`` more than ``credit_ns``
ahead of now is dropped (``TC_ACT_SHOT``) and counted in the **drops** map (an atomic add to the
interface's u64); the others pass and move ``tat`` on by one interval.  Nothing is queued or delayed.

Two maps, so that user space never writes a counter the kernel adds to: a rate change rewrites the
interface's limits entry (``interval_ns``, ``credit_ns``, ``tat_ns``) and leaves its drops entry
alone.  Concurrency: ``tat`` is read and written without a lock (two CPUs may both pass a packet on
the same ``tat``: the bucket errs towards passing, by at most a packet per CPU at a time).

Map layouts (little-endian, the host's): key u32 ifindex; limits value ``{interval_ns, credit_ns,
tat_ns}`` (3 x u64, :func:`limits_value`); drops value u64.

Public API
----------
program, limits_value, parse_limits_value, ifindex_key, insn, decode, INSN_COUNT
"""

from __future__ import annotations

import struct

__all__ = [
    "DROPS_VALUE_BYTES",
    "INSN_COUNT",
    "KEY_BYTES",
    "LIMITS_VALUE_BYTES",
    "TC_ACT_SHOT",
    "TC_ACT_UNSPEC",
    "decode",
    "ifindex_key",
    "insn",
    "limits_value",
    "parse_limits_value",
    "program",
]

KEY_BYTES, LIMITS_VALUE_BYTES, DROPS_VALUE_BYTES = 4, 24, 8
SKB_IFINDEX = 40  # offsetof(struct __sk_buff, ifindex)
TC_ACT_UNSPEC, TC_ACT_SHOT = -1, 2
BPF_PSEUDO_MAP_FD = 1
HELPER_MAP_LOOKUP_ELEM, HELPER_KTIME_GET_NS = 1, 5
_INSN = struct.Struct("<BBhi")
_LIMITS = struct.Struct("<QQQ")


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One eBPF instruction: opcode, dst and src registers, offset, immediate."""
    return _INSN.pack(code, (src << 4) | dst, off, imm)


def decode(code: bytes) -> list[tuple[int, int, int, int, int]]:
    """The instructions of ``code`` as (opcode, dst, src, off, imm) (for tests and reading)."""
    out = []
    for i in range(0, len(code), 8):
        op, regs, off, imm = _INSN.unpack_from(code, i)
        out.append((op, regs & 0xF, regs >> 4, off, imm))
    return out


def _ld_map(dst: int, map_fd: int) -> list[bytes]:
    return [insn(0x18, dst, BPF_PSEUDO_MAP_FD, 0, map_fd), insn(0x00)]  # ld_imm64 of a map fd: two slots


def program(limits_fd: int, drops_fd: int) -> bytes:
    """The classifier's instructions (see the module), the two maps' fds in their ``ld_imm64``."""
    head = [
        insn(0xBF, 6, 1),                        # 0  r6 = skb
        insn(0x61, 2, 6, SKB_IFINDEX),           # 1  r2 = skb->ifindex (u32)
        insn(0x63, 10, 2, -4),                   # 2  key (fp-4) = r2
        *_ld_map(1, limits_fd),                  # 3,4  r1 = limits map
        insn(0xBF, 2, 10),                       # 5  r2 = fp
        insn(0x07, 2, 0, 0, -4),                 # 6  r2 = &key
        insn(0x85, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),  # 7  r0 = lookup(limits, &key)
    ]
    # 8: if r0 == 0 goto PASS (not a limited interface): jump filled in below
    body = [
        insn(0xBF, 7, 0),                        # 9  r7 = entry
        insn(0x85, 0, 0, 0, HELPER_KTIME_GET_NS),  # 10 r0 = now (ns)
        insn(0x79, 1, 7, 16),                    # 11 r1 = tat
        insn(0x3D, 1, 0, 1),                     # 12 if tat >= now (unsigned) skip the next
        insn(0xBF, 1, 0),                        # 13 tat = now
        insn(0xBF, 2, 1),                        # 14 r2 = tat
        insn(0x1F, 2, 0),                        # 15 r2 -= now: how far ahead the bucket runs
        insn(0x79, 3, 7, 8),                     # 16 r3 = credit_ns
    ]
    # 17: if r2 > r3 goto DROP
    tail = [
        insn(0x79, 4, 7, 0),                     # 18 r4 = interval_ns
        insn(0x0F, 1, 4),                        # 19 tat += interval
        insn(0x7B, 7, 1, 16),                    # 20 entry.tat = tat
    ]
    pass_ = [insn(0xB7, 0, 0, 0, TC_ACT_UNSPEC), insn(0x95)]  # PASS: r0 = -1 (next filter / default); exit
    drop = [
        *_ld_map(1, drops_fd),                   # DROP: r1 = drops map
        insn(0xBF, 2, 10),                       #   r2 = fp
        insn(0x07, 2, 0, 0, -4),                 #   r2 = &key
        insn(0x85, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),  # r0 = lookup(drops, &key)
        insn(0x15, 0, 0, 2, 0),                  #   if r0 == 0 skip the count
        insn(0xB7, 1, 0, 0, 1),                  #   r1 = 1
        insn(0xDB, 0, 1, 0, 0),                  #   lock *(u64 *)(r0 + 0) += r1
        insn(0xB7, 0, 0, 0, TC_ACT_SHOT), insn(0x95),  # r0 = SHOT; exit
    ]
    pass_at = len(head) + 1 + len(body) + 1 + len(tail)
    drop_at = pass_at + len(pass_)
    jump_pass = insn(0x15, 0, 0, pass_at - (len(head) + 1), 0)  # off is relative to the next instruction
    at17 = len(head) + 1 + len(body)
    jump_drop = insn(0x2D, 2, 3, drop_at - (at17 + 1))
    return b"".join([*head, jump_pass, *body, jump_drop, *tail, *pass_, *drop])


#: Instructions in :func:`program` (the two ``ld_imm64`` count two each).
INSN_COUNT = len(program(0, 0)) // 8


def ifindex_key(ifindex: int) -> bytes:
    """A map key: the interface index as a u32."""
    if isinstance(ifindex, bool) or not isinstance(ifindex, int) or not 0 < ifindex < 2**32:
        raise ValueError(f"interface index {ifindex!r}: want 1..2**32-1")
    return struct.pack("<I", ifindex)


def limits_value(rate_pps: float, credit_s: float, tat_ns: int = 0) -> bytes:
    """A limits entry: the bucket of ``rate_pps`` packets/s with ``credit_s`` seconds of credit."""
    if not (isinstance(rate_pps, (int, float)) and isinstance(credit_s, (int, float))
            and 0 < rate_pps <= 1e9 and 0 < credit_s <= 60):
        raise ValueError(f"bucket rate_pps {rate_pps!r} (0..1e9) and credit_s {credit_s!r} (0..60) must be positive")
    return _LIMITS.pack(max(1, round(1e9 / rate_pps)), round(credit_s * 1e9), int(tat_ns))


def parse_limits_value(value: bytes) -> tuple[float, float, int]:
    """(rate_pps, credit_s, tat_ns) of a limits entry."""
    interval, credit, tat = _LIMITS.unpack(value[:LIMITS_VALUE_BYTES])
    return 1e9 / interval, credit / 1e9, tat
