"""Shared-key files (HMAC keys: XCo's controller and agents): hex on one line, at least
:data:`MIN_KEY_BYTES` bytes, readable by the owner only.  The tag over each datagram is the
protocol's (:mod:`xtc.xco.auth`); CURVE key files are :mod:`xtc.service.curve`."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

__all__ = ["KEY_BYTES", "MIN_KEY_BYTES", "AuthError", "load_key", "write_key"]

#: Bytes of a key written by :func:`write_key`.
KEY_BYTES = 32
MIN_KEY_BYTES = 16


class AuthError(ValueError):
    """A key file that cannot be used; the message names the file and the problem."""


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
