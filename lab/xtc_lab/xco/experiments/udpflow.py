"""A paced UDP sender and a counting sink (netperf UDP_STREAM's role, with the count at the receiver).

iperf3 is not used for UDP here: its results come back over a TCP control connection that crosses
the same congested port, and under heavy loss they arrive late or not at all.

``python udpflow.py sink PORT SECONDS``: count the datagrams that arrive for
``SECONDS`` after the first one (or until SECONDS + 5 s pass without any); print JSON.
``python udpflow.py send ADDR PORT RATE_BPS SIZE SECONDS``: send datagrams
of ``SIZE`` bytes paced at ``RATE_BPS``; print JSON.
``python udpflow.py alt ADDR PORT RATE_BPS SIZE T0 PERIOD PHASE PERIODS``: the same, but only in the
periods ``k`` (``[T0 + k PERIOD, T0 + (k+1) PERIOD)``, wall-clock seconds, ``k < PERIODS``) with
``k % 2 == PHASE``; print JSON.
"""

from __future__ import annotations

import json
import socket
import sys
import time


def sink(port: int, seconds: float) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("0.0.0.0", port))
    print("ready", flush=True)
    s.settimeout(seconds + 5)
    n = b = 0
    first = last = None
    try:
        while True:
            d = s.recv(70000)
            now = time.monotonic()
            if first is None:
                first = now
                s.settimeout(0.5)
            elif now - first > seconds:
                break
            n += 1
            b += len(d)
            last = now
    except TimeoutError:
        pass
    return {"datagrams": n, "bytes": b, "seconds": seconds, "active_s": (last - first) if first and last else 0.0}


def _paced(s: socket.socket, dest: tuple[str, int], payload: bytes, gap_s: float, start: float, end: float,
           clock) -> tuple[int, int]:
    """Send ``payload`` to ``dest`` every ``gap_s`` seconds from ``start`` until ``end`` (times of
    ``clock``, seconds); return (datagrams sent, send errors).  A send that blocks (the socket's
    buffer full: a gate on the VM's own interface holds what the socket sent, as Xen's ring holds a
    guest) delays the ones after it, which then go as fast as the socket takes them; none is sent
    at or after ``end``, so a held sender sends less, as netperf's does, instead of its rate's count
    late."""
    sent = errors = j = 0
    while True:
        due = start + j * gap_s
        if due >= end:
            break
        now = clock()
        if now >= end:
            break
        if due > now:
            time.sleep(due - now)
        try:
            s.sendto(payload, dest)
            sent += 1
        except OSError:
            errors += 1
        j += 1
    return sent, errors


def send(addr: str, port: int, rate_bps: float, size: int, seconds: float) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    t0 = time.monotonic()
    sent, errors = _paced(s, (addr, port), b"\0" * size, size * 8 / rate_bps, t0, t0 + seconds, time.monotonic)
    return {"datagrams": sent, "errors": errors, "bytes": sent * size, "seconds": time.monotonic() - t0}


def alternate(addr: str, port: int, rate_bps: float, size: int, t0: float, period: float, phase: int,
              periods: int) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = b"\0" * size
    gap = size * 8 / rate_bps
    sent = errors = 0
    for k in range(phase, periods, 2):
        start = t0 + k * period
        n, e = _paced(s, (addr, port), payload, gap, start, start + period, time.time)
        sent += n
        errors += e
    return {"datagrams": sent, "errors": errors, "bytes": sent * size}


if __name__ == "__main__":
    if sys.argv[1] == "alt":
        a = sys.argv[2:]
        print(json.dumps(alternate(a[0], int(a[1]), float(a[2]), int(a[3]), float(a[4]), float(a[5]), int(a[6]),
                                   int(a[7]))))
    elif sys.argv[1] == "sink":
        print(json.dumps(sink(int(sys.argv[2]), float(sys.argv[3]))))
    else:
        a = sys.argv[2:]
        print(json.dumps(send(a[0], int(a[1]), float(a[2]), int(a[3]), float(a[4]))))
