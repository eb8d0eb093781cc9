"""Authentication of XCo datagrams: a key shared by the controller and its agents.

Without a key, the protocol refuses stale, replayed and unknown-host messages, but anybody who can
send UDP to the controller's port can pretend to be a registered host (its address is checked, and
an address can be forged), and anybody who can reach an agent can send it directives.  With a key
(``auth_key_file`` in the controller's and the agents' configurations), every datagram carries a
tag: the first :data:`TAG_BYTES` bytes of HMAC-SHA256 over the message, appended to it; a datagram
whose tag does not verify is dropped and counted (reason ``auth``) before it is decoded.  Replay
protection stays the protocol's (session, sequence number, clock window), now over messages
nobody without the key can make.

The key file holds the key as hex on one line (32 bytes = 64 hex digits, at least 16 bytes); it
must not be readable by group or others.  ``xtc xco keygen FILE`` writes one; the key files are the
service chassis's (:mod:`xtc.service.keys`, re-exported here).  Nothing here does I/O.
"""

from __future__ import annotations

import hmac

from xtc.service.keys import KEY_BYTES, MIN_KEY_BYTES, AuthError, load_key, write_key

__all__ = ["TAG_BYTES", "KEY_BYTES", "MIN_KEY_BYTES", "AuthError", "seal", "unseal", "opened", "load_key", "write_key"]

#: Bytes of the tag appended to every datagram (HMAC-SHA256 truncated, as RFC 2104 allows).
TAG_BYTES = 16


def seal(data: bytes, key: bytes) -> bytes:
    """``data`` with its tag appended."""
    return data + hmac.digest(key, data, "sha256")[:TAG_BYTES]


def unseal(data: bytes, key: bytes) -> bytes | None:
    """The message of a sealed datagram, or None when its tag does not verify (or it is too short)."""
    if len(data) <= TAG_BYTES:
        return None
    msg, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
    if not hmac.compare_digest(hmac.digest(key, msg, "sha256")[:TAG_BYTES], tag):
        return None
    return msg


def opened(data: bytes, key: bytes | None, dropped: dict[str, int]) -> bytes | None:
    """A received datagram's message: ``data`` itself without a key; with one, the message whose
    tag verifies, or None after counting the datagram in ``dropped["auth"]``."""
    if key is None:
        return data
    msg = unseal(data, key)
    if msg is None:
        dropped["auth"] += 1
    return msg
