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
must not be readable by group or others.  ``xtc xco keygen FILE`` writes one.  Nothing here does
I/O but :func:`load_key` and :func:`write_key`.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

__all__ = ["TAG_BYTES", "KEY_BYTES", "AuthError", "seal", "unseal", "opened", "load_key", "write_key"]

#: Bytes of the tag appended to every datagram (HMAC-SHA256 truncated, as RFC 2104 allows).
TAG_BYTES = 16
#: Bytes of a key written by :func:`write_key`.
KEY_BYTES = 32
MIN_KEY_BYTES = 16


class AuthError(ValueError):
    """A key file that cannot be used; the message names the file and the problem."""


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


def load_key(path: str | Path) -> bytes:
    """Read a key file (hex on one line, not readable by group or others).

    Raises
    ------
    AuthError
        Missing or unreadable file, loose permissions, not hex, or a key shorter than 16 bytes.
    """
    p = Path(path)
    try:
        st = p.stat()
        text = p.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        raise AuthError(f"{p}: cannot read the key file ({e})") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AuthError(f"{p}: the key file is open to group or others (mode {stat.S_IMODE(st.st_mode):o}); "
                        f"chmod 600 it")
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise AuthError(f"{p}: the key must be hex digits on one line") from None
    if len(key) < MIN_KEY_BYTES:
        raise AuthError(f"{p}: the key has {len(key)} bytes; at least {MIN_KEY_BYTES} are needed")
    return key


def write_key(path: str | Path) -> None:
    """Write a new random key to ``path`` (mode 0600); refuses to overwrite an existing file."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise AuthError(f"{p}: exists; refusing to overwrite a key") from None
    except OSError as e:
        raise AuthError(f"{p}: cannot create the key file ({e})") from None
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secrets.token_hex(KEY_BYTES) + "\n")
