"""CURVE authentication and encryption for the daemon's manager sockets (ZeroMQ's zmq.auth).

A daemon that should only talk to known policers gets a server key pair and a directory of the
clients' public keys (``*.key`` certificate files as written by :func:`generate_keypair`).
:func:`secure_context` returns a ZeroMQ context whose new sockets are CURVE servers with that key,
and a running authenticator that admits only the listed clients; hand the context to
:class:`~xtc.daemon.service.DaemonService` (its ``context=`` argument) before it binds.

The daemon's one-line hook (in ``run_daemon``, when the configuration names the keys)::

    ctx, auth = curve.secure_context(cfg.manager.curve_secret_key_file, cfg.manager.curve_clients_dir)

Until that lands, ``python -m xtc.daemon.curve --config FILE --server-key FILE --clients DIR`` runs
the daemon with CURVE on both of its sockets.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

__all__ = ["CurveError", "generate_keypair", "load_secret", "load_public", "secure_context", "client_options", "main"]


class CurveError(ValueError):
    """A key file is missing or malformed (names the file)."""


def generate_keypair(directory: str | Path, name: str) -> tuple[Path, Path]:
    """Write ``<name>.key`` (public) and ``<name>.key_secret`` (secret, mode 0600) into ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    pub, sec = zmq.auth.create_certificates(str(d), name)
    os.chmod(sec, 0o600)
    return Path(pub), Path(sec)


def load_secret(path: str | Path) -> tuple[bytes, bytes]:
    """(public, secret) Z85 keys from a ``.key_secret`` certificate file."""
    try:
        pub, sec = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as e:
        raise CurveError(f"cannot read CURVE secret key file {path}: {e}") from None
    if not sec:
        raise CurveError(f"{path} holds no secret key (give the .key_secret file)")
    return pub, sec


def load_public(path: str | Path) -> bytes:
    """The Z85 public key of a ``.key`` certificate file."""
    try:
        pub, _ = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as e:
        raise CurveError(f"cannot read CURVE public key file {path}: {e}") from None
    return pub


def secure_context(server_secret_file: str | Path, clients_dir: str | Path,
                   context: zmq.Context | None = None) -> tuple[zmq.Context, ThreadAuthenticator]:
    """A context whose sockets are CURVE servers admitting only the public keys in ``clients_dir``.

    Returns the context and its started authenticator (stop it when the daemon stops).
    """
    pub, sec = load_secret(server_secret_file)
    cdir = Path(clients_dir)
    if not cdir.is_dir():
        raise CurveError(f"CURVE clients directory {cdir} does not exist")
    ctx = context or zmq.Context()
    auth = ThreadAuthenticator(ctx, log=logging.getLogger("xtc.daemon.curve"))
    auth.start()
    auth.configure_curve(domain="*", location=str(cdir))
    ctx.setsockopt(zmq.CURVE_SERVER, 1)
    ctx.setsockopt(zmq.CURVE_PUBLICKEY, pub)
    ctx.setsockopt(zmq.CURVE_SECRETKEY, sec)
    return ctx, auth


def client_options(sock: zmq.Socket, client_secret_file: str | Path, server_public_key: bytes | str) -> None:
    """Make ``sock`` (before it connects) a CURVE client of a server with that public key."""
    pub, sec = load_secret(client_secret_file)
    key = server_public_key.encode() if isinstance(server_public_key, str) else server_public_key
    if len(key) != 40:
        raise CurveError(f"a server public key is 40 Z85 characters, got {len(key)}")
    sock.curve_publickey = pub
    sock.curve_secretkey = sec
    sock.curve_serverkey = key


def main(argv: list[str] | None = None) -> int:
    """Run the daemon with CURVE on its manager sockets."""
    p = argparse.ArgumentParser(prog="python -m xtc.daemon.curve", description=main.__doc__)
    p.add_argument("--config", "-c", required=True)
    p.add_argument("--server-key", required=True, help="the daemon's .key_secret file")
    p.add_argument("--clients", required=True, help="directory of the admitted clients' .key files")
    args = p.parse_args(argv)
    from .config import ConfigError, load_config
    from .logs import setup_logging
    from .service import DaemonService, make_host

    try:
        cfg = load_config(args.config)
        ctx, auth = secure_context(args.server_key, args.clients)
    except (ConfigError, CurveError) as e:
        print(f"xtc daemon: {e}", flush=True)
        return 2
    setup_logging(cfg.log.format, cfg.log.level)
    try:
        svc = DaemonService(cfg, make_host(cfg), config_path=args.config, context=ctx)
        svc.install_signal_handlers()
        return svc.run()
    finally:
        auth.stop()


if __name__ == "__main__":
    raise SystemExit(main())
