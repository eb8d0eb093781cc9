"""CURVE authentication and encryption for the daemon's manager sockets (ZeroMQ's zmq.auth).

A daemon that should only talk to known policers gets a server key pair and a directory of the
clients' public keys (``*.key`` certificate files as written by :func:`generate_keypair`).
:func:`secure_context` returns a ZeroMQ context whose new sockets are CURVE servers with that key,
and a running authenticator that admits only the listed clients; hand the context to
:class:`~xtc.daemon.service.DaemonService` (its ``context=`` argument) before it binds.

The daemon takes the keys from its configuration (``[manager] curve_secret_key_file`` and
``curve_clients_dir``; ``run_daemon`` calls :func:`secure_context`); ``xtc check-config`` checks the
same files (:func:`check_server_files`), and ``xtc ctl`` reads its own key pair
(``ctl_curve_secret_key_file`` or ``--curve-key``) and the daemon's public key
(:func:`server_public_key`).  Every key file is checked before anything starts: it must exist and
parse, and a secret key file must be readable by its owner only; a bad one raises
:class:`CurveError` naming the file (docs/guide/manager-api-security.md).
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import zmq
import zmq.auth
import zmq.utils.z85
from zmq.auth.thread import ThreadAuthenticator

__all__ = ["CurveError", "generate_keypair", "load_secret", "load_public", "server_public_key", "check_clients_dir",
           "check_server_files", "z85_key", "secure_context", "client_keys", "client_options"]


class CurveError(ValueError):
    """A key file is missing or malformed (names the file)."""


def generate_keypair(directory: str | Path, name: str) -> tuple[Path, Path]:
    """Write ``<name>.key`` (public) and ``<name>.key_secret`` (secret, mode 0600) into ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    pub, sec = zmq.auth.create_certificates(str(d), name)
    os.chmod(sec, 0o600)
    return Path(pub), Path(sec)


#: Secret key files read and found good: path -> ((device, inode, size, mtime, mode), (public, secret)).
_SECRETS: dict[str, tuple[tuple[int, ...], tuple[bytes, bytes]]] = {}


def z85_key(key: bytes | None) -> bool:
    """A CURVE key as Z85: 40 characters that decode to 32 bytes."""
    if not key or len(key) != 40:
        return False
    try:
        return len(zmq.utils.z85.decode(key)) == 32
    except (ValueError, KeyError, TypeError, struct.error):
        return False


def _certificate(path: str | Path, what: str) -> tuple[bytes, bytes | None]:
    """(public, secret or None) from a zmq.auth certificate file, or CurveError naming the file."""
    p = Path(path)
    if not p.is_file():
        raise CurveError(f"CURVE {what} file {p} does not exist" if not p.exists() else f"CURVE {what} file {p} is not a file")
    try:
        pub, sec = zmq.auth.load_certificate(str(p))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise CurveError(f"cannot read CURVE {what} file {p}: {e}") from None
    if not z85_key(pub) or (sec is not None and not z85_key(sec)):
        raise CurveError(f"CURVE {what} file {p} does not hold a valid key (40 Z85 characters; "
                         f"write key files with `xtc policer keygen`)")
    return pub, sec


def load_secret(path: str | Path) -> tuple[bytes, bytes]:
    """(public, secret) Z85 keys from a ``.key_secret`` certificate file.

    The file must exist, parse, and be readable by its owner only (no group or other permission
    bits: a secret key others can read is no secret); otherwise :class:`CurveError` names it.
    """
    p = Path(path)
    try:
        st = p.stat()
        seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
    except OSError:
        seen = None
    hit = _SECRETS.get(str(p))
    if seen is not None and hit is not None and hit[0] == seen:
        return hit[1]  # the policer opens a socket per exchange: read a file again only when it changed
    pub, sec = _certificate(p, "secret key")
    if not sec:
        raise CurveError(f"CURVE secret key file {p} holds no secret key (give the .key_secret file)")
    mode = p.stat().st_mode & 0o777
    if mode & 0o077:
        raise CurveError(f"CURVE secret key file {p} has mode {mode:04o}: group or others may read it; chmod 600 {p}")
    if seen is not None:
        if len(_SECRETS) >= 64:
            _SECRETS.clear()
        _SECRETS[str(p)] = (seen, (pub, sec))
    return pub, sec


def load_public(path: str | Path) -> bytes:
    """The Z85 public key of a ``.key`` certificate file."""
    return _certificate(path, "public key")[0]


def server_public_key(secret_file: str | Path) -> bytes:
    """A daemon's public key, for its clients, from the configuration's ``curve_secret_key_file``.

    Read from the public certificate beside it (``daemon.key`` for ``daemon.key_secret``, as
    :func:`generate_keypair` writes them) when there is one, so that a client that may not read
    the secret file (a member of the ``xtc`` group) still finds the key; else from the secret file.
    """
    p = Path(secret_file)
    if p.name.endswith("_secret"):
        public = p.with_name(p.name[: -len("_secret")])
        if public.exists():
            return load_public(public)
    return load_secret(p)[0]


def check_clients_dir(clients_dir: str | Path) -> int:
    """Every ``*.key`` in the admitted clients' directory parses.  Returns how many there are."""
    cdir = Path(clients_dir)
    if not cdir.is_dir():
        raise CurveError(f"CURVE clients directory {cdir} does not exist" if not cdir.exists()
                         else f"CURVE clients directory {cdir} is not a directory")
    keys = sorted(cdir.glob("*.key"))
    for k in keys:
        load_public(k)
    return len(keys)


def check_server_files(secret_file: str | Path, clients_dir: str | Path) -> None:
    """The daemon's CURVE files as :func:`secure_context` needs them, or CurveError naming the file."""
    load_secret(secret_file)
    check_clients_dir(clients_dir)


def secure_context(server_secret_file: str | Path, clients_dir: str | Path,
                   context: zmq.Context | None = None) -> tuple[zmq.Context, ThreadAuthenticator]:
    """A context whose sockets are CURVE servers admitting only the public keys in ``clients_dir``.

    Returns the context and its started authenticator (stop it when the daemon stops).
    """
    pub, sec = load_secret(server_secret_file)
    cdir = Path(clients_dir)
    check_clients_dir(cdir)
    ctx = context or zmq.Context()
    auth = ThreadAuthenticator(ctx, log=logging.getLogger("xtc.service.curve"))
    auth.start()
    auth.configure_curve(domain="*", location=str(cdir))
    ctx.setsockopt(zmq.CURVE_SERVER, 1)
    ctx.setsockopt(zmq.CURVE_PUBLICKEY, pub)
    ctx.setsockopt(zmq.CURVE_SECRETKEY, sec)
    return ctx, auth


def client_keys(client_secret_file: str | Path, server_public_key: bytes | str) -> tuple[bytes, bytes, bytes]:
    """A CURVE client's (public, secret) Z85 keys from its ``.key_secret`` file and its server's Z85 public
    key, each checked (:class:`CurveError` names a bad one): what every CURVE client of a daemon takes."""
    pub, sec = load_secret(client_secret_file)
    key = server_public_key.encode() if isinstance(server_public_key, str) else server_public_key
    if len(key) != 40:
        raise CurveError(f"a server public key is 40 Z85 characters, got {len(key)}")
    return pub, sec, key


def client_options(sock: zmq.Socket, client_secret_file: str | Path, server_public_key: bytes | str) -> None:
    """Make ``sock`` (before it connects) a CURVE client of a server with that public key."""
    sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = client_keys(client_secret_file,
                                                                                   server_public_key)
