"""The protocol core's parse of a samples message (three frames: the delimiter, the topic, 1,200 bytes), one,
ten or a hundred messages a read, in microseconds a message: ``python parse_micro.py`` (prints JSON)."""

from __future__ import annotations

import json
import struct
import time

from xtc.policer.zmtp import ZmtpClient

GREETING = b"\xff" + b"\x00" * 8 + b"\x7f\x03\x01" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
READY = b"\x05READY" + bytes([11]) + b"Socket-Type" + struct.pack(">I", 6) + b"ROUTER"


def _frame(body: bytes, more: bool) -> bytes:
    if len(body) < 256:
        return bytes([1 if more else 0, len(body)]) + body
    return bytes([3 if more else 2]) + struct.pack(">Q", len(body)) + body


def main() -> None:
    message = _frame(b"", True) + _frame(b"samples", True) + _frame(b"x" * 1200, False)
    out = {}
    for per_read in (1, 10, 100):
        c = ZmtpClient()
        c.receive(GREETING + b"\x04" + bytes([len(READY)]) + READY)
        chunk, reads = message * per_read, 20000 // per_read
        t = time.perf_counter()
        for _ in range(reads):
            c.receive(chunk)
        out[f"us_per_message_{per_read}_a_read"] = round((time.perf_counter() - t) / (reads * per_read) * 1e6, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
