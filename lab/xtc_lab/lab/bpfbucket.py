"""A packet-rate bucket in eBPF on the host's input port, keyed by the VR's MAC (issue 48 item 3).

The candidate product mechanism for dropping a capped VR's excess where it enters the host
(docs/design/early-drop.md, "The input side"): a ``cls_bpf`` classifier in direct-action mode on
the input port's ``clsact`` ingress, whose program looks the frame's destination MAC up in a hash
map and, for a VR that has an entry, runs a GCRA bucket (a "theoretical arrival time" ``tat``,
``interval_ns`` = 1e9 / rate, a bucket of ``burst_ns``): a frame that would put ``tat`` more than
``burst_ns`` ahead of now is dropped (``TC_ACT_SHOT``, counted in the entry), the others pass
(``TC_ACT_OK``) with no queue and no extra hop (unlike the IFB + TBF of :mod:`xtc_lab.lab.inputdrop`).
It counts packets, not bytes.

No compiler: the 35 instructions are assembled here (:func:`program`) and loaded with the
``bpf()`` system call through the product's :mod:`xtc.host.bpfsys` (``BPF_MAP_CREATE``,
``BPF_PROG_LOAD`` as ``BPF_PROG_TYPE_SCHED_CLS``);
pyroute2 attaches the program's fd (``TCA_BPF_FD``, ``TCA_BPF_FLAG_ACT_DIRECT``).  The map's
entry is read and written with ``BPF_MAP_LOOKUP_ELEM`` / ``BPF_MAP_UPDATE_ELEM`` (about 25 us).
Concurrency: ``tat`` is read and written without a lock (two CPUs may both let a frame through
on the same ``tat``: the bucket errs towards passing, by at most a frame per CPU at a time); the
drop counter is an atomic add.

Lab-only (the ``xtc+input-bpf`` phase of ``xtc lab run tcpudp --tcpudp-phases``): the product's
limiter is the same bucket on the VR's host-side interface, keyed by its index
(:mod:`xtc.host.bpflimiter`).
Units: ns, packets/s.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from xtc.host import bpfsys
from xtc_lab.lab.cgroups import LabError

KEY_BYTES, VALUE_BYTES = 8, 32  # key: the MAC, 2 bytes of padding; value: tat, interval, burst, dropped (u64 each)
SKB_DATA, SKB_DATA_END = 76, 80  # offsetof(struct __sk_buff, data / data_end)
TC_ACT_OK, TC_ACT_SHOT = 0, 2
CLSACT_INGRESS = "ffff:fff2"


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(map_fd: int) -> bytes:
    """The classifier's eBPF instructions (8 bytes each), the map ``map_fd`` in its ``ld_imm64``."""
    p: list[bytes | None] = [
        _insn(0xBF, 6, 1),                  # r6 = skb
        _insn(0x61, 2, 6, SKB_DATA),        # r2 = skb->data
        _insn(0x61, 3, 6, SKB_DATA_END),    # r3 = skb->data_end
        _insn(0xBF, 4, 2),                  # r4 = r2
        _insn(0x07, 4, 0, 0, 6),            # r4 += 6
        None,                               # 5: if r4 > r3 goto PASS (no whole MAC)
        _insn(0x61, 5, 2, 0),               # r5 = dst MAC bytes 0..3
        _insn(0x63, 10, 5, -8),             # key[0..3] = r5
        _insn(0x69, 5, 2, 4),               # r5 = dst MAC bytes 4..5
        _insn(0x6B, 10, 5, -4),             # key[4..5] = r5
        _insn(0x6A, 10, 0, -2, 0),          # key[6..7] = 0
        _insn(0x18, 1, 1, 0, map_fd),       # r1 = the map (ld_imm64, BPF_PSEUDO_MAP_FD)
        _insn(0x00),
        _insn(0xBF, 2, 10),                 # r2 = fp
        _insn(0x07, 2, 0, 0, -8),           # r2 = &key
        _insn(0x85, 0, 0, 0, 1),            # r0 = bpf_map_lookup_elem(map, &key)
        None,                               # 16: if r0 == 0 goto PASS (not a limited VR)
        _insn(0xBF, 7, 0),                  # r7 = entry
        _insn(0x85, 0, 0, 0, 5),            # r0 = bpf_ktime_get_ns()
        _insn(0x79, 1, 7, 0),               # r1 = tat
        _insn(0x3D, 1, 0, 1),               # if tat >= now skip the next
        _insn(0xBF, 1, 0),                  # tat = now
        _insn(0xBF, 2, 1),                  # r2 = tat
        _insn(0x1F, 2, 0),                  # r2 -= now (how far ahead the bucket runs)
        _insn(0x79, 3, 7, 16),              # r3 = burst_ns
        None,                               # 25: if r2 > r3 goto DROP
        _insn(0x79, 4, 7, 8),               # r4 = interval_ns
        _insn(0x0F, 1, 4),                  # tat += interval
        _insn(0x7B, 7, 1, 0),               # entry.tat = tat
    ]
    pass_at = len(p)
    p += [_insn(0xB7, 0, 0, 0, TC_ACT_OK), _insn(0x95)]
    drop_at = len(p)
    p += [_insn(0xB7, 1, 0, 0, 1),          # r1 = 1
          _insn(0xDB, 7, 1, 24, 0),         # atomic entry.dropped += r1
          _insn(0xB7, 0, 0, 0, TC_ACT_SHOT), _insn(0x95)]
    p[5] = _insn(0x2D, 4, 3, pass_at - 6)
    p[16] = _insn(0x15, 0, 0, pass_at - 17, 0)
    p[25] = _insn(0x2D, 2, 3, drop_at - 26)
    return b"".join(x for x in p if x is not None)


def mac_key(mac: str) -> bytes:
    """The map key of a MAC address ``aa:bb:cc:dd:ee:ff``."""
    parts = mac.split(":")
    if len(parts) != 6 or not all(len(x) == 2 for x in parts):
        raise ValueError(f"not a MAC address: {mac!r}")
    return bytes.fromhex("".join(parts)) + b"\0\0"


def entry(rate_pps: float, burst_s: float, dropped: int = 0, tat_ns: int = 0) -> bytes:
    """A map value: the bucket of ``rate_pps`` with ``burst_s`` seconds of credit."""
    if not (rate_pps > 0 and burst_s > 0):
        raise ValueError(f"bucket rate_pps {rate_pps!r} and burst_s {burst_s!r} must be positive")
    return struct.pack("<QQQQ", tat_ns, max(1, round(1e9 / rate_pps)), round(burst_s * 1e9), dropped)


def entry_dropped(value: bytes) -> int:
    """The drop counter of a map value."""
    return struct.unpack("<QQQQ", value)[3]


def ns_mac(ns: str, ifname: str = "eth0") -> str:
    """The MAC address of ``ifname`` in network namespace ``ns``."""
    import json
    import subprocess

    r = subprocess.run(["ip", "-n", ns, "-j", "link", "show", ifname], capture_output=True, text=True, timeout=10,
                       check=False)
    try:
        return str(json.loads(r.stdout)[0]["address"])
    except (ValueError, IndexError, KeyError) as e:
        raise LabError(f"no MAC for {ifname} in {ns}: {r.stderr.strip() or e}") from e


@dataclass
class BpfBucket:
    """The bucket on ``port``'s ingress for frames to ``mac`` at ``rate_pps`` (see the module)."""

    port: str
    mac: str
    rate_pps: float
    burst_s: float = 0.02
    _fds: list[int] = field(default_factory=list, repr=False)

    def install(self) -> None:
        """Create the map and the program, set the VR's entry, attach (a clsact qdisc on the port)."""
        try:
            map_fd = bpfsys.map_create(bpfsys.MAP_HASH, KEY_BYTES, VALUE_BYTES, 64, "xtc_lab_bucket")
            self._fds.append(map_fd)
            try:
                prog_fd = bpfsys.prog_load(bpfsys.PROG_SCHED_CLS, program(map_fd), "xtc_lab_bucket")
            except bpfsys.BpfError as e:
                raise LabError(f"the kernel refused the bucket program: {e}") from e
            self._fds.append(prog_fd)
            bpfsys.map_update(map_fd, mac_key(self.mac), entry(self.rate_pps, self.burst_s))
            from pyroute2 import IPRoute

            with IPRoute() as ipr:
                idx = ipr.link_lookup(ifname=self.port)
                if not idx:
                    raise LabError(f"bpf bucket: no interface {self.port}")
                ipr.tc("add", "clsact", idx[0])
                ipr.tc("add-filter", "bpf", idx[0], ":1", fd=prog_fd, name="xtc_ed", parent=CLSACT_INGRESS,
                       direct_action=True)
        except Exception:
            self.remove(missing_ok=True)
            raise

    def dropped_packets(self) -> int:
        """Frames to the VR the bucket dropped so far (0 when it is not installed)."""
        if not self._fds:
            return 0
        v = bpfsys.map_lookup(self._fds[0], mac_key(self.mac), VALUE_BYTES)
        return 0 if v is None else entry_dropped(v)

    def remove(self, missing_ok: bool = False) -> None:
        """Take the clsact qdisc (and with it the filter) off the port and close the fds."""
        error = None
        try:
            from pyroute2 import IPRoute

            with IPRoute() as ipr:
                idx = ipr.link_lookup(ifname=self.port)
                if idx:
                    ipr.tc("del", "clsact", idx[0])
        except Exception as e:  # noqa: BLE001 - reported below unless asked not to
            error = e
        for fd in self._fds:
            bpfsys.close(fd)
        self._fds.clear()
        if error is not None and not missing_ok:
            raise LabError(f"bpf bucket on {self.port}: cannot remove its clsact qdisc: {error}") from error
