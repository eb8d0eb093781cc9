"""A striped read with a barrier (the paper's Figure 3 application; stands in for iSCSI over RAID-0).

Standard library only: run as a script in the namespaces (fast to start, many at once).

``python stripe.py serve PORT``: answer each 8-byte request ``n`` with ``n`` bytes.
``python stripe.py read BLOCK TOTAL ADDR:PORT...``: read ``TOTAL`` bytes in
blocks of ``BLOCK``, each block striped over the servers (``BLOCK / N`` from each); the next block is
requested only when every server has answered (the barrier).  Prints JSON: bytes, seconds,
per-block times.
"""

from __future__ import annotations

import json
import selectors
import socket
import struct
import sys
import threading
import time


def serve(port: int) -> None:
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(16)
    chunk = b"\0" * (1 << 20)

    def one(c: socket.socket) -> None:
        with c:
            while True:
                hdr = b""
                while len(hdr) < 8:
                    d = c.recv(8 - len(hdr))
                    if not d:
                        return
                    hdr += d
                (n,) = struct.unpack("!Q", hdr)
                while n > 0:
                    k = c.send(chunk[:min(n, len(chunk))])
                    n -= k

    while True:
        c, _ = ls.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


def read(block: int, total: int, servers: list[tuple[str, int]]) -> dict:
    socks = []
    for host, port in servers:
        s = socket.create_connection((host, port), timeout=30)
        s.setblocking(False)
        socks.append(s)
    stripe = block // len(socks)
    sel = selectors.DefaultSelector()
    times = []
    got_total = 0
    t0 = time.monotonic()
    while got_total < total:
        tb = time.monotonic()
        left = {}
        for s in socks:
            s.setblocking(True)
            s.sendall(struct.pack("!Q", stripe))
            s.setblocking(False)
            left[s] = stripe
            sel.register(s, selectors.EVENT_READ)
        while left:
            for key, _ in sel.select(timeout=30):
                s = key.fileobj
                d = s.recv(1 << 20)
                if not d:
                    raise SystemExit("server closed the connection")
                left[s] -= len(d)
                if left[s] <= 0:
                    sel.unregister(s)
                    del left[s]
        got_total += stripe * len(socks)
        times.append(time.monotonic() - tb)
    secs = time.monotonic() - t0
    return {"bytes": got_total, "seconds": secs, "block_s": times}


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        b, t = int(sys.argv[2]), int(sys.argv[3])
        srv = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in sys.argv[4:]]
        print(json.dumps(read(b, t, srv)))
