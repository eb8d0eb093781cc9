"""A UDP receiver in a network namespace that keeps each datagram's kernel receive time (root tests)."""

from __future__ import annotations

import socket
import struct
import threading
import time

from xtc.host.tcgate import in_netns

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # asm-generic/socket.h (x86_64, arm64)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)
SO_RXQ_OVFL = getattr(socket, "SO_RXQ_OVFL", 40)


class TimestampReceiver:
    """A UDP socket bound to ``(addr, port)`` in the namespace ``netns``; a thread hands each datagram
    to :meth:`record` with its source, its destination address (with ``pktinfo``; else "") and its
    kernel receive time (ns; None if the kernel gave none).  Subclasses set up what :meth:`record`
    fills before calling this ``__init__`` (the thread starts in it).

    :attr:`dropped` is the kernel's count of datagrams this socket dropped because its buffer was
    full (``SO_RXQ_OVFL``): a measurement whose receiver dropped any did not see everything that
    arrived, and says nothing about the traffic.  :meth:`close` reads what is still queued first."""

    #: How long :meth:`close` may spend reading what is queued (s).
    drain_s = 5.0

    def __init__(self, netns: str, addr: str, port: int, pktinfo: bool = False) -> None:
        def make() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            # RCVBUFFORCE (root): held packets leave in bursts of hundreds; nothing may be lost here
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
            if pktinfo:
                s.setsockopt(socket.SOL_IP, IP_PKTINFO, 1)
            s.bind((addr, port))
            return s

        self.sock = in_netns(netns, make)
        self.sock.settimeout(0.2)
        self.dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def record(self, data: bytes, src: str, dst: str, t_ns: int | None) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        deadline = None
        while deadline is None or time.monotonic() < deadline:
            if deadline is None and self._stop.is_set():
                # asked to stop: what the kernel holds already arrived, so it is read first (the
                # thread can lag far behind a busy measurement loop: it waits for the GIL)
                deadline = time.monotonic() + self.drain_s
            try:
                data, anc, _flags, addr = self.sock.recvmsg(2048, 256)
            except TimeoutError:  # 0.2 s with nothing queued: drained, if asked to stop
                if self._stop.is_set():
                    return
                continue
            except OSError:
                return
            t, dst = None, ""
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("=qq", payload[:16])
                    t = sec * 1_000_000_000 + nsec
                elif level == socket.SOL_SOCKET and kind == SO_RXQ_OVFL:
                    (self.dropped,) = struct.unpack("=I", payload[:4])
                elif level == socket.SOL_IP and kind == IP_PKTINFO:
                    dst = socket.inet_ntoa(payload[8:12])
            self.record(data, addr[0], dst, t)

    def close(self) -> None:
        """Stop after reading what is queued (at most :attr:`drain_s`), then close the socket."""
        self._stop.set()
        self._thread.join()
        self.sock.close()
