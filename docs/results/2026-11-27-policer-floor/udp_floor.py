"""Sizing a mechanism not built: what receiving one router's samples message costs over UDP.

One receiving UDP socket on 127.0.0.1 for the whole fleet, read by the smallest Python loop (a thread
that sleeps 10 ms, as the link pool's ``epoll`` is paced, then reads with ``recv_into`` until the socket
is empty), against a sender process that sends ``--per-s`` datagrams a second of ``--bytes`` bytes (a
16-VR ``xtc-samples/3`` message is 7 + 90 + 774 bytes), evenly spread, from ``--senders`` sockets.
Prints JSON: datagrams received a second, lost, and the receiving process's CPU per datagram (ms),
its receive thread's and the whole process's.  Compare with ``python -m xtc_lab.policer_floor
--consumer raw`` and ``--consumer none`` (the same message over libzmq).  Addresses: loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

SENDER = r"""
import socket, sys, time
port, per_s, nbytes, senders, seconds = (int(a) for a in sys.argv[1:6])
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(senders)]
msg = bytes(nbytes)
dt = 1.0 / per_s
t = time.monotonic()
end = t + seconds
i = 0
while t < end:
    socks[i % senders].sendto(msg, ("127.0.0.1", port))
    i += 1
    t += dt
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)
"""


def _thread_cpu_s(tid: int) -> float:
    fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--per-s", type=int, default=1000)
    p.add_argument("--bytes", type=int, default=871)
    p.add_argument("--senders", type=int, default=50)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    a = p.parse_args()
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    port = rx.getsockname()[1]
    count = [0]
    stop = threading.Event()
    tid = [0]

    def run() -> None:
        tid[0] = threading.get_native_id()
        buf = bytearray(65536)
        while not stop.is_set():
            time.sleep(0.01)
            while True:
                try:
                    rx.recv_into(buf)
                except BlockingIOError:
                    break
                count[0] += 1

    th = threading.Thread(target=run, name="udp-recv", daemon=True)
    th.start()
    seconds = a.warmup + a.window + 2
    sender = subprocess.Popen([sys.executable, "-c", SENDER, str(port), str(a.per_s), str(a.bytes), str(a.senders),
                               str(int(seconds))])
    time.sleep(a.warmup)
    n0, p0, t0, w0 = count[0], time.process_time(), _thread_cpu_s(tid[0]), time.monotonic()
    time.sleep(a.window)
    n1, p1, t1, w1 = count[0], time.process_time(), _thread_cpu_s(tid[0]), time.monotonic()
    stop.set()
    sender.wait()
    n = n1 - n0
    print(json.dumps({"per_s_sent": a.per_s, "bytes": a.bytes, "senders": a.senders, "window_s": a.window,
                      "per_s_received": round(n / (w1 - w0), 1), "received": n,
                      "cpu_ms_per_datagram": round(1000 * (p1 - p0) / n, 4),
                      "thread_cpu_ms_per_datagram": round(1000 * (t1 - t0) / n, 4),
                      "loadavg": " ".join(open("/proc/loadavg").read().split()[:3])}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
