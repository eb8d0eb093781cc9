"""The policer's HTTP parser (uvicorn's httptools protocol with the request head bounded), on a real
uvicorn server on loopback: where the bound lies, that it counts per request on a kept-alive
connection, and that a body sent in the same write as its head is not counted as head."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from procs import free_port, wait_for
from xtc.policer.httpproto import MAX_HEADER_BYTES, BoundedHttpToolsProtocol


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    size = 0
    more = True
    while more:
        msg = await receive()
        size += len(msg.get("body", b""))
        more = msg.get("more_body", False)
    body = f"{scope['method']} {size}".encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def server() -> Iterator[int]:
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(_app, host="127.0.0.1", port=port, log_level="error", lifespan="off",
                                        http=BoundedHttpToolsProtocol))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    wait_for(lambda: srv.started, 10, "uvicorn started")
    try:
        yield port
    finally:
        srv.should_exit = True
        t.join(10)


def _status_of_raw(port: int, pieces: list[bytes]) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        try:
            for p in pieces:
                s.sendall(p)
                time.sleep(0.001)
        except (BrokenPipeError, ConnectionResetError):
            pass
        resp = b""
        try:
            while b"\r\n" not in resp:
                b = s.recv(4096)
                if not b:
                    break
                resp += b
        except ConnectionResetError:
            pass
    return resp.split(b"\r\n", 1)[0]


def test_a_head_at_the_bound_passes_and_one_past_it_gets_431(server: int) -> None:
    line = b"GET / HTTP/1.1\r\nHost: x\r\n"
    # The counted head: target plus each header's name and value and 4 bytes each (": ", CRLF).
    fixed = len(b"/") + (len(b"host") + 1 + 4) + (len(b"x-pad") + 4)
    ok = line + b"X-Pad: " + b"a" * (MAX_HEADER_BYTES - fixed) + b"\r\n\r\n"
    assert _status_of_raw(server, [ok]) == b"HTTP/1.1 200 OK"
    over = line + b"X-Pad: " + b"a" * (MAX_HEADER_BYTES - fixed + 1) + b"\r\n\r\n"
    assert _status_of_raw(server, [over]).startswith(b"HTTP/1.1 431")
    # Many small headers, sent piece by piece: the sum counts.
    many = [line] + [b"X-H%d: %s\r\n" % (i, b"b" * 200) for i in range(100)] + [b"\r\n"]
    assert _status_of_raw(server, many).startswith(b"HTTP/1.1 431")


def test_an_endless_header_is_refused_after_about_the_bound(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sent = 0
        resp = b""
        s.setblocking(False)
        t0 = time.monotonic()
        while not resp and time.monotonic() - t0 < 5:
            try:
                sent += s.send(b"c" * 1024)
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                pass
            time.sleep(0.0005)
            try:
                resp = s.recv(4096)
            except BlockingIOError:
                pass
    assert resp.startswith(b"HTTP/1.1 431"), resp[:80]
    # Refused after the bound and within a few reads of it, not after the stream ran on.
    assert MAX_HEADER_BYTES <= sent + 40 < 8 * MAX_HEADER_BYTES, sent


def test_the_bound_is_per_request_and_a_body_is_not_head(server: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=5)
    try:
        for _ in range(4):  # 4 x 10 KB of headers on one kept-alive connection
            conn.request("GET", "/", headers={"X-Pad": "p" * 10_000})
            r = conn.getresponse()
            assert (r.status, r.read()) == (200, b"GET 0")
        body = b"{" + b"x" * 100_000 + b"}"
        conn.request("POST", "/", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert (r.status, r.read()) == (200, f"POST {len(body)}".encode())
    finally:
        conn.close()
    # The same body in the very write that carries its head.
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    assert _status_of_raw(server, [head + body]) == b"HTTP/1.1 200 OK"


def test_a_response_head_leaves_with_its_body() -> None:
    """OneWrite (logic): the head is held for the body and both go in one write; a head alone (HEAD, a
    streamed body's first chunk later) leaves at the event loop's next turn; close sends what is held."""
    import asyncio

    from xtc.policer.httpproto import OneWrite

    class Transport:
        def __init__(self) -> None:
            self.writes: list[bytes] = []
            self.closed = False

        def write(self, data: bytes) -> None:
            self.writes.append(data)

        def close(self) -> None:
            self.closed = True

    async def run() -> None:
        t = Transport()
        w = OneWrite(t)
        w.write(b"HEAD\r\n\r\n")
        assert t.writes == []
        w.write(b"body")
        assert t.writes == [b"HEAD\r\n\r\nbody"]
        w.write(b"more")
        assert t.writes == [b"HEAD\r\n\r\nbody", b"more"]
        t2 = Transport()
        w2 = OneWrite(t2)
        w2.write(b"HEAD only")
        await asyncio.sleep(0)
        assert t2.writes == [b"HEAD only"]
        t3 = Transport()
        w3 = OneWrite(t3)
        w3.write(b"HEAD then close")
        w3.close()
        assert t3.writes == [b"HEAD then close"] and t3.closed

    asyncio.run(run())


def test_pipelined_requests_with_a_head_only_answer_in_order(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nHEAD / HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        resp = b""
        deadline = time.monotonic() + 5
        while (resp.count(b"HTTP/1.1 200 OK") < 3 or not resp.endswith(b"POST 3")) and time.monotonic() < deadline:
            b = s.recv(4096)
            if not b:
                break
            resp += b
    parts = resp.split(b"HTTP/1.1 200 OK")[1:]
    assert len(parts) == 3, resp
    assert parts[0].endswith(b"\r\n\r\nGET 0") and parts[1].endswith(b"\r\n\r\n") and parts[2].endswith(b"POST 3"), resp
