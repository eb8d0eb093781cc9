"""The paper's ``shorttcp``: K parallel sequences of short-lived TCP connections, and their sink.

Each connection sends ``BYTES`` (the paper's 30 KB: a slow-start burst that ends before congestion
control ever backs off) and closes; the next one of its sequence starts at once.  Standard library
only (asyncio), so it starts fast inside a lab VM's namespace.

``python shorttcp.py sink PORT SECONDS``: accept connections, count the bytes received for
``SECONDS`` after the first connection; print JSON.
``python shorttcp.py send ADDR PORT K BYTES SECONDS``: run K sequences for ``SECONDS``; print JSON
(connections completed, failed, bytes sent).

One bulk transfer (a live migration's memory copy): ``python shorttcp.py bulk-sink PORT SECONDS``
accepts one connection and reads it to its end (at most ``SECONDS``), then prints JSON: bytes and
the time from its first byte to its end; ``python shorttcp.py bulk-send ADDR PORT BYTES`` sends.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time


async def _sink(port: int, seconds: float) -> dict:
    total = {"bytes": 0, "connections": 0}
    first: list[float] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not first:
            first.append(time.monotonic())
        total["connections"] += 1
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if time.monotonic() - first[0] <= seconds:
                    total["bytes"] += len(data)
        except OSError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "0.0.0.0", port, backlog=1024, reuse_address=True)
    print("ready", flush=True)
    deadline = time.monotonic() + seconds + 10
    while time.monotonic() < deadline and not (first and time.monotonic() - first[0] > seconds + 1):
        await asyncio.sleep(0.1)
    server.close()
    return {**total, "seconds": seconds}


async def _send(addr: str, port: int, k: int, nbytes: int, seconds: float) -> dict:
    payload = b"\0" * nbytes
    stats = {"completed": 0, "failed": 0, "bytes": 0}
    end = time.monotonic() + seconds

    async def sequence() -> None:
        while time.monotonic() < end:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(addr, port), timeout=5)
                writer.write(payload)
                await writer.drain()
                writer.close()
                await writer.wait_closed()
                stats["completed"] += 1
                stats["bytes"] += nbytes
            except (OSError, asyncio.TimeoutError):
                stats["failed"] += 1
                await asyncio.sleep(0.01)

    await asyncio.gather(*(sequence() for _ in range(k)))
    return {**stats, "sequences": k, "seconds": seconds}


def bulk_sink(port: int, limit_s: float) -> dict:
    import socket

    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    print("ready", flush=True)
    srv.settimeout(limit_s)
    conn, _ = srv.accept()
    deadline = time.monotonic() + limit_s
    n = 0
    first = last = None
    done = False
    while time.monotonic() < deadline:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = conn.recv(1 << 20)
        except TimeoutError:
            break
        now = time.monotonic()
        if not data:
            done = True
            break
        if first is None:
            first = now
        n += len(data)
        last = now
    return {"bytes": n, "complete": done, "seconds": (last - first) if first is not None and last is not None else None}


def bulk_send(addr: str, port: int, nbytes: int) -> dict:
    import socket

    s = socket.create_connection((addr, port), timeout=10)
    s.settimeout(None)
    chunk = b"\0" * (1 << 20)
    left = nbytes
    while left > 0:
        left -= s.send(chunk[:min(left, len(chunk))])
    s.close()
    return {"bytes": nbytes}


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "sink":
        print(json.dumps(asyncio.run(_sink(int(a[1]), float(a[2])))))
    elif a[0] == "send":
        print(json.dumps(asyncio.run(_send(a[1], int(a[2]), int(a[3]), int(a[4]), float(a[5])))))
    elif a[0] == "bulk-sink":
        print(json.dumps(bulk_sink(int(a[1]), float(a[2]))))
    elif a[0] == "bulk-send":
        print(json.dumps(bulk_send(a[1], int(a[2]), int(a[3]))))
    else:
        sys.exit(f"usage: {sys.argv[0]} sink PORT SECONDS | send ADDR PORT K BYTES SECONDS | "
                 "bulk-sink PORT SECONDS | bulk-send ADDR PORT BYTES")
