"""The policer's HTTP/1.1 parser: uvicorn's httptools protocol with the request head bounded.

httptools (llhttp, in C) costs the API about a fifth less CPU per request than h11 (pure Python),
measured with ``xtc policer bench`` (docs/results/2026-11-26-policer/policer.md, "Load"), but neither it nor uvicorn's protocol
around it bounds a request's head: llhttp hands a header to Python only once it is complete, so a
client that streams one endless header would be buffered without end.  This protocol counts what
arrives while a request's head is still open and refuses with **431** once it passes
:data:`MAX_HEADER_BYTES` (whatever has been buffered is then at most that plus one read from the
socket), and refuses a complete head (request target plus header names and values) over the same
bound the same way.

Nor does uvicorn time out a request's head: a client that trickles its headers a byte at a time (or
opens a connection and sends nothing) holds its connection for ever.  Here a request's line and
headers must be complete within :attr:`BoundedHttpToolsProtocol.header_timeout_s` (default
:data:`HEADER_TIMEOUT_S`; :func:`bounded_protocol` makes the class with another one, the policer's
``server.header_timeout_s``) of the connection's opening or of the first byte of the request
(between two requests on a kept-alive connection uvicorn's keep-alive timeout applies); else it is
answered **408** and closed.  A response's head leaves with its body in one write (:class:`OneWrite`).
Everything else is uvicorn's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["BoundedHttpToolsProtocol", "MAX_HEADER_BYTES", "HEADER_TIMEOUT_S", "bounded_protocol", "OneWrite"]

#: Largest request line plus headers accepted, bytes (a bigger head is refused before it is read on).
MAX_HEADER_BYTES = 16 * 1024
#: Seconds a request's line and headers may take to arrive, by default.
HEADER_TIMEOUT_S = 10.0


class _HeadTooLarge(Exception):
    pass


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; a request head over :data:`MAX_HEADER_BYTES` gets 431, one that
    takes longer than :attr:`header_timeout_s` to arrive 408, and the connection is closed."""

    #: Seconds from a connection's opening, or from a request's first byte, to the end of its headers.
    header_timeout_s: float = HEADER_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_open = True  # the bytes arriving belong to a request's head
        self._head_read = 0  # bytes received since the head began (whole reads: an upper bound)
        self._head_size = 0  # the parsed head's target and headers so far
        self._head_refused = False

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _start_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # no earlier request's answer under way
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                                 b"content-length: 27\r\nconnection: close\r\n\r\nRequest headers timed out.\n")
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._head_open:
            self._head_read += len(data)
            self._start_head_timer()
        super().data_received(data)
        if self._head_open and self._head_read > MAX_HEADER_BYTES and not self.transport.is_closing():
            self._head_refused = True
            self.send_400_response("Request header fields too large.")

    def on_message_begin(self) -> None:
        self._head_size = 0
        self._start_head_timer()  # (a pipelined request's head, begun in the same read as the one before)
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        self._check_head()
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        self._check_head()
        super().on_header(name, value)

    def _check_head(self) -> None:
        if self._head_size > MAX_HEADER_BYTES:
            # Raised through httptools, which reports it as a parser error: uvicorn's data_received
            # then calls send_400_response, which answers 431 for it.
            self._head_refused = True
            raise _HeadTooLarge

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._stop_head_timer()
        super().on_headers_complete()
        if self.cycle is not None:  # the response's head leaves with its body (see OneWrite)
            self.cycle.transport = OneWrite(self.transport)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_open = True
        self._head_read = 0

    def send_400_response(self, msg: str) -> None:
        if not self._head_refused:
            super().send_400_response(msg)
            return
        body = b"Request header fields too large."
        self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                             b"content-type: text/plain; charset=utf-8\r\n"
                             b"content-length: " + str(len(body)).encode("ascii") + b"\r\n"
                             b"connection: close\r\n\r\n" + body)
        self.transport.close()


class OneWrite:
    """A response's transport that holds back the response's first write (uvicorn writes the status
    line and headers, then the body, each at once) until the next write or, at the latest, the event
    loop's next turn: a head and a body sent at once leave in one ``send`` and one TCP segment
    instead of two (each a system call and, on loopback, the receiver's work too).  Every other
    attribute is the connection's transport's."""

    __slots__ = ("_transport", "_first", "_held")

    def __init__(self, transport: Any):
        self._transport = transport
        self._first = True
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._first:
            self._first, self._held = False, data
            asyncio.get_running_loop().call_soon(self._flush)
        elif self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held + data)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def bounded_protocol(header_timeout_s: float) -> type[BoundedHttpToolsProtocol]:
    """:class:`BoundedHttpToolsProtocol` with another header timeout (seconds)."""
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"header_timeout_s": float(header_timeout_s)})
