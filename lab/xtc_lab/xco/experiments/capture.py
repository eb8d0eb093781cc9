"""Arrival times of IPv4 packets towards one address, per source address (a packet capture's role).

This kernel's namespaces have no tcpdump; an AF_PACKET socket with kernel receive timestamps
(``SO_TIMESTAMPNS``, CLOCK_REALTIME: the clock of the XCo agents' logs) does the job.  The kernel
stamps each packet as it arrives, so a reader that lags behind (a loaded host) does not move the
times; the socket's buffer is 64 MiB, and the kernel's drop count (``PACKET_STATISTICS``) is in the
output.  Only packets the namespace receives are kept (not its own outgoing ones).

``python capture.py DST_ADDR SECONDS OUT_JSON [EGRESS_IF]``: print ``ready``, capture for ``SECONDS``
(or until SIGTERM), then write ``{"times_us": {src: [...]}, "sizes": {src: [...]}, "drops": N, "packets": N}``
to ``OUT_JSON`` (times in wall-clock microseconds, sizes in bytes of the IP packet).
Standard library only (it starts fast in a namespace).

With ``EGRESS_IF`` it keeps instead the packets the namespace sends out of that interface (a host's
uplink): the kernel taps them after the interface's queueing discipline, so with XCo's gate there
the stamp is when the gate let the packet go, with no path to a switch in between.
"""

from __future__ import annotations

import ctypes
import json
import select
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003  # a bridge port's packets reach only ETH_P_ALL taps (the bridge consumes them)
ETH_P_IP = 0x0800
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_STATISTICS = 6
SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33


SO_ATTACH_FILTER = 26
SKF_AD_OFF = -0x1000


def _attach_filter(s: socket.socket, dst: bytes, outgoing: bool = False) -> ctypes.Array:
    """A classic BPF program: only IPv4 packets towards ``dst`` that the namespace receives (not its
    outgoing ones; with ``outgoing``, only those), 64 bytes of each; the rest never reaches this
    reader (half the packets in a switch's namespace are the outgoing copies)."""
    ld_w, jeq, ret = 0x20, 0x15, 0x06
    prog = [(ld_w, 0, 0, (SKF_AD_OFF + 4) & 0xFFFFFFFF),  # packet type
            (jeq, 0, 5, PACKET_OUTGOING) if outgoing else (jeq, 5, 0, PACKET_OUTGOING),
            (ld_w, 0, 0, SKF_AD_OFF & 0xFFFFFFFF),  # protocol
            (jeq, 0, 3, ETH_P_IP),
            (ld_w, 0, 0, 16),  # IPv4 destination
            (jeq, 0, 1, int.from_bytes(dst, "big")),
            (ret, 0, 0, 64),
            (ret, 0, 0, 0)]
    buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in prog))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("HL", len(prog), ctypes.addressof(buf)))
    return buf  # the kernel copies the program; kept alive until then anyway


def capture(dst: str, seconds: float, egress_if: str | None = None) -> dict:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    _attach_filter(s, socket.inet_aton(dst), outgoing=egress_if is not None)
    if egress_if is not None:
        s.bind((egress_if, ETH_P_ALL))  # CPython puts the protocol in network order itself
    while True:  # what queued before the filter
        try:
            s.recv(1, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    want = socket.inet_aton(dst)
    times: dict[str, list[int]] = {}
    sizes: dict[str, list[int]] = {}
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    print("ready", flush=True)
    end = time.monotonic() + seconds
    n = 0
    while not stop[0] and time.monotonic() < end:
        r, _w, _x = select.select([s], [], [], 0.2)
        if not r:
            continue
        while True:
            try:
                data, anc, _fl, addr = s.recvmsg(40, socket.CMSG_SPACE(16), socket.MSG_DONTWAIT | socket.MSG_TRUNC)
            except BlockingIOError:
                break
            if ((addr[2] == PACKET_OUTGOING) != (egress_if is not None) or addr[1] != ETH_P_IP or len(data) < 20
                    or data[16:20] != want):
                continue
            t_us = None
            for lvl, typ, val in anc:
                if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", val[:16])
                    t_us = sec * 1_000_000 + nsec // 1000
            if t_us is None:
                t_us = time.time_ns() // 1000
            src = socket.inet_ntoa(data[12:16])
            times.setdefault(src, []).append(t_us)
            sizes.setdefault(src, []).append(struct.unpack("!H", data[2:4])[0])
            n += 1
    st = s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
    _packets, drops = struct.unpack("II", st)
    return {"times_us": times, "sizes": sizes, "drops": drops, "packets": n}


if __name__ == "__main__":
    doc = capture(sys.argv[1], float(sys.argv[2]), sys.argv[4] if len(sys.argv) > 4 else None)
    with open(sys.argv[3], "w") as f:
        json.dump(doc, f)
    print("done", flush=True)
