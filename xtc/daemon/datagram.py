"""The samples as UDP datagrams: one period's samples message in one datagram, signed (pure: bytes in, bytes out).

A policer that takes many routers' samples pays for each ZeroMQ message more than for what it carries
(docs/design/samples-udp.md).  So a peer subscribed over the manager socket may ask for them as UDP
datagrams instead (``subscribe`` with ``udp``): it sends, over that authenticated connection, the
address it reads them on and a fresh key, and the daemon sends each period's message, the same frames
it would have sent on the connection, as one datagram::

    magic "XTU1" (4) | key id (8) | sequence number (8, big-endian) | frames (1) | each frame's length (4 each)
    | the frames | tag (16)

The tag is keyed BLAKE2b (16 bytes) over everything before it, with the subscription's key (32 bytes).
The key id names the subscription: the receiver looks the key up by it.  The sequence number grows by
one each datagram of a subscription: the receiver takes a datagram only if its number is above the last
one taken (a replayed or reordered one is dropped).  A datagram is never trusted before its tag is
checked: nothing of it is read but the key id before that.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Mapping

__all__ = [
    "KEY_BYTES",
    "KEY_ID_BYTES",
    "LINK_EVERY",
    "MAGIC",
    "MAX_DATAGRAM_BYTES",
    "TAG_BYTES",
    "DatagramError",
    "decode",
    "encode",
    "key_id_of",
]

MAGIC = b"XTU1"
KEY_BYTES = 32
KEY_ID_BYTES = 8
TAG_BYTES = 16
#: The largest datagram sent: a message that would make a bigger one goes over the connection instead
#: (the UDP payload's limit over IPv4 is 65,507 bytes; a datagram over the path's MTU is sent in IP
#: fragments, which a router carries but any loss of one loses the whole).
MAX_DATAGRAM_BYTES = 65_000
#: A peer that takes its samples as datagrams still gets one period's in every this many on its
#: connection: the daemon so learns that the peer is gone (the send fails) and ends the subscription,
#: and the peer that the connection still carries.
LINK_EVERY = 10
_HEAD = struct.Struct("!4s8sQB")
_LEN = struct.Struct("!I")
#: Most frames in one message (the samples' messages have two or three).
MAX_FRAMES = 8


class DatagramError(ValueError):
    """A datagram that is not a valid samples datagram; ``reason`` is one word for counters:
    ``short``, ``magic``, ``unknown_key``, ``bad_tag``, ``bad_frames``."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def key_id_of(key: bytes) -> bytes:
    """A key's id: the first :data:`KEY_ID_BYTES` of its BLAKE2b digest (names it without telling it)."""
    return hashlib.blake2b(key, digest_size=KEY_ID_BYTES, person=b"xtc-udp-key-id").digest()


def _tag(key: bytes, data: bytes | memoryview) -> bytes:
    return hashlib.blake2b(data, key=key, digest_size=TAG_BYTES).digest()


def encode(key: bytes, key_id: bytes, seq: int, frames: list[bytes]) -> bytes:
    """One datagram carrying ``frames`` (each ``bytes``), numbered ``seq``, signed with ``key``."""
    if len(key) != KEY_BYTES or len(key_id) != KEY_ID_BYTES:
        raise ValueError(f"a key is {KEY_BYTES} bytes and its id {KEY_ID_BYTES}")
    if not 0 < len(frames) <= MAX_FRAMES:
        raise ValueError(f"a datagram carries 1 to {MAX_FRAMES} frames, not {len(frames)}")
    body = b"".join((_HEAD.pack(MAGIC, key_id, seq, len(frames)), *(_LEN.pack(len(f)) for f in frames), *frames))
    return body + _tag(key, body)


def decode(data: bytes | memoryview, keys: Mapping[bytes, bytes]) -> tuple[bytes, int, list[bytes]]:
    """``(key id, sequence number, frames)`` of a datagram whose tag checks with the key ``keys`` holds
    for its id; else :class:`DatagramError` (nothing of the datagram but its id read before the tag)."""
    mv = memoryview(data)
    n = len(mv)
    if n < _HEAD.size + TAG_BYTES:
        raise DatagramError("short", f"a datagram of {n} bytes is shorter than a header and a tag")
    if mv[:4] != MAGIC:
        raise DatagramError("magic", "not a samples datagram (no XTU1 magic)")
    key_id = bytes(mv[4:4 + KEY_ID_BYTES])
    key = keys.get(key_id)
    if key is None:
        raise DatagramError("unknown_key", f"key id {key_id.hex()} names no subscription")
    if not hmac.compare_digest(_tag(key, mv[:n - TAG_BYTES]), mv[n - TAG_BYTES:]):
        raise DatagramError("bad_tag", "the datagram's tag does not check with its subscription's key")
    _, _, seq, count = _HEAD.unpack_from(mv)
    if not 0 < count <= MAX_FRAMES:
        raise DatagramError("bad_frames", f"a datagram of {count} frames")
    at = _HEAD.size + 4 * count
    end = n - TAG_BYTES
    if at > end:
        raise DatagramError("bad_frames", "the frames' lengths run past the datagram")
    frames = []
    for i in range(count):
        (size,) = _LEN.unpack_from(mv, _HEAD.size + 4 * i)
        if at + size > end:
            raise DatagramError("bad_frames", "a frame runs past the datagram")
        frames.append(bytes(mv[at:at + size]))
        at += size
    if at != end:
        raise DatagramError("bad_frames", f"{end - at} bytes after the last frame")
    return key_id, seq, frames
