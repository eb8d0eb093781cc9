"""The policer's configuration: a TOML file, validated, unknown keys refused, frozen.

A complete example (defaults shown)::

    schema = "xtc-policer/1"

    [server]
    host = "127.0.0.1"        # the address the REST API listens on
    port = 8080               # the REST API's TCP port
    workers = 1               # API worker processes (SO_REUSEPORT on one port); the engine: engine.shards
    header_timeout_s = 10.0   # a request's line and headers must arrive within this (else 408, closed)
    tls_certificate_file = "" # PEM certificate (chain) and its private key: serve HTTPS (TLS 1.2 or newer)
    tls_key_file = ""         # (the key must not be readable by other users: chmod o-rwx)
    allow_plain_http = false  # true: serve plain HTTP on an address that is not loopback (bearer
                              # tokens then cross the network in clear text)

    [database]
    url = "sqlite:////var/lib/xtc-policer/policer.db"   # sqlite:///relative, sqlite:////absolute, or
                                                # postgresql://user@/dbname?host=/run/postgresql

    [auth]
    tokens_file = ""          # one bearer token per line ('#' comments); writes need one of them
    protect_reads = false     # true: reads need a token too

    [engine]
    period_s = 1.0            # seconds between policy cycles
    request_timeout_s = 1.0   # seconds to wait for a daemon's answer
    max_vrs_per_router = 4096 # a daemon listing more VRs is marked and its reply dropped
    max_reply_bytes = 8388608 # a daemon's reply larger than this (bytes) is dropped
    samples = true            # measure routers registered with a pub_endpoint from their samples
                              # (false: every router by a 'list' each period)
    sample_link = true        # take the samples over the one connection kept to each daemon's manager
                              # endpoint ('subscribe'); a daemon that refuses it (older) through its
                              # pub_endpoint (false: a second connection per router, to pub_endpoint)
    sample_schema = "xtc-samples/3" # the samples' format asked for over that connection: "xtc-samples/3"
                              # (columns in a binary frame: cheaper to decode, dearer for the daemon
                              # to build) or "xtc-samples/2" (JSON rows); a daemon without /3 sends /2
    link_transport = "zmtp"   # how the connections to the daemons are spoken: "zmtp" (ZeroMQ's protocol
                              # spoken by the policer, under 10 KiB a connection) or "libzmq" (a libzmq
                              # socket a daemon, 68-91 KiB a connection); the daemons see no difference
                              # (docs/design/zmtp-link.md)
    shards = 1                # engine processes, each policing the routers whose name hashes to it
                              # (one core each; every policer on one database must give the same number)
    sample_udp = ""           # ADDRESS:PORT: take the samples as signed UDP datagrams on this address
                              # (one the daemons reach; shard i binds PORT + i; port 0: any free port)
                              # instead of messages on the connections: a third less engine CPU per
                              # measurement when rates are steady, a fifth when they move
                              # (docs/design/samples-udp.md); "": on the connections (nothing more listens)
    snapshot_interval_s = 10.0 # seconds between two writes of the routers' live measurements to the
                              # database (decisions and status changes are written at once); a crash
                              # or failover loses at most this long of measurements, and the API's
                              # reads show measurements at most this old

    [curve]
    client_secret_key_file = ""   # the policer's CURVE .key_secret (used for routers with a server key)

    [log]
    format = "json"           # "json" (JSON lines) or "kv" (key=value), on stderr like the other services
    level = "info"            # debug, info, warning, error

Without a certificate the policer serves plain HTTP, and then only on a loopback address (127.0.0.0/8,
``::1``, ``localhost``) unless ``allow_plain_http = true``: its clients' bearer tokens would cross the
network in clear text.  The certificate, the key and that they match are checked when the file is
loaded (``xtc policer check-config``) and again at start.

The tokens file must not be readable or writable by other users (mode ``o-rw``): such a file is
refused (its tokens are no longer secret).  Tokens may also come from the environment, ``XTC_POLICER_TOKENS`` (comma-separated).  Tokens are
never logged or shown; :meth:`PolicerConfig.describe` prints how many there are.  The database URL
may come from the environment too, ``XTC_POLICER_DB_URL``, which then replaces ``database.url`` (a
PostgreSQL password is better kept there, or in ``~/.pgpass``, than in the file).
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Strict, TypeAdapter
from pydantic import dataclasses as pyd

from xtc.daemon.api import udp_address
from xtc.service.curve import CurveError, load_secret
from xtc.validation import DocumentError, Number, parse_document, within

__all__ = ["SCHEMA", "PolicerConfigError", "PolicerConfig", "load_config", "loads_config", "TOKENS_ENV", "DB_URL_ENV",
           "check_transport", "server_ssl_context", "is_loopback", "sample_udp_address"]

SCHEMA = "xtc-policer/1"
TOKENS_ENV = "XTC_POLICER_TOKENS"
DB_URL_ENV = "XTC_POLICER_DB_URL"
MIN_TOKEN_CHARS = 16
#: Most API worker processes (``server.workers``).
MAX_WORKERS = 64
#: Most engine processes (``engine.shards``).
MAX_SHARDS = 64


class PolicerConfigError(DocumentError):
    """A configuration is invalid; ``key`` names the culprit (the daemon's, XCo's and the model
    files' errors share the base, :class:`~xtc.validation.DocumentError`)."""


@dataclass(frozen=True)
class PolicerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    header_timeout_s: float = 10.0
    tls_certificate_file: str | None = None
    tls_key_file: str | None = None
    allow_plain_http: bool = False
    db_url: str = "sqlite:////var/lib/xtc-policer/policer.db"
    tokens: frozenset[str] = field(default=frozenset(), repr=False)
    protect_reads: bool = False
    period_s: float = 1.0
    request_timeout_s: float = 1.0
    curve_secret_key_file: str | None = None
    max_vrs_per_router: int = 4096
    max_reply_bytes: int = 8 * 1024 * 1024
    samples: bool = True
    sample_link: bool = True
    sample_schema: str = "xtc-samples/3"
    sample_udp: str | None = None
    link_transport: str = "zmtp"
    shards: int = 1
    snapshot_interval_s: float = 10.0
    log_format: str = "json"
    log_level: str = "info"

    def describe(self) -> dict[str, Any]:
        """The effective configuration without secrets."""
        return {"host": self.host, "port": self.port, "workers": self.workers, "header_timeout_s": self.header_timeout_s,
                "tls": self.tls_certificate_file is not None, "tls_certificate_file": self.tls_certificate_file,
                "tls_key_file": self.tls_key_file, "allow_plain_http": self.allow_plain_http,
                "db_url": self.db_url, "tokens": len(self.tokens),
                "protect_reads": self.protect_reads, "period_s": self.period_s,
                "request_timeout_s": self.request_timeout_s, "curve_secret_key_file": self.curve_secret_key_file,
                "max_vrs_per_router": self.max_vrs_per_router, "max_reply_bytes": self.max_reply_bytes,
                "samples": self.samples, "sample_link": self.sample_link, "sample_schema": self.sample_schema,
                "sample_udp": self.sample_udp, "link_transport": self.link_transport, "shards": self.shards,
                "snapshot_interval_s": self.snapshot_interval_s, "log_format": self.log_format,
                "log_level": self.log_level}


# ------------------------------------------------------------------------------ the file's schema


def sample_udp_address(text: str, shard: int = 0) -> tuple[str, int]:
    """``engine.sample_udp`` as the address shard ``shard`` binds: ``(IP address, PORT + shard)``, port 0
    (any free one) staying 0.  ValueError naming the problem: not an IP address and port, or a wildcard
    address (the daemons are told this address: it must be one they reach)."""
    host, port = udp_address(text, any_port=True)
    if ipaddress.ip_address(host).is_unspecified:
        raise ValueError(f"{text!r} is a wildcard address; give the address the daemons reach (they are told it)")
    if port and port + shard > 65535:
        raise ValueError(f"{text!r}: shard {shard} would bind port {port + shard}, past 65535")
    return host, port + shard if port else 0


def _sample_udp(v: str) -> str:
    if v:
        sample_udp_address(v)
    return v


def _host(v: Any) -> Any:
    if not isinstance(v, str) or not v:
        raise ValueError("must be a non-empty string")
    return v


def _db_url(v: Any) -> Any:
    from .store import StoreError, parse_db_url

    try:
        parse_db_url(v)
    except StoreError as e:
        raise ValueError(str(e)) from None
    return v


def _existing_file(p: str) -> str:
    if p and not Path(p).is_file():
        raise ValueError(f"no such file: {p!r}")
    return p


_TABLE = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
_DEFAULT = PolicerConfig()


@pyd.dataclass(config=_TABLE)
class _Server:
    host: Annotated[str, BeforeValidator(_host)] = _DEFAULT.host
    port: Annotated[Number, within(0, 65535)] = _DEFAULT.port
    workers: Annotated[int, Strict(), within(1, MAX_WORKERS)] = _DEFAULT.workers
    header_timeout_s: Annotated[Number, within(0.1, 3600)] = _DEFAULT.header_timeout_s
    tls_certificate_file: Annotated[str, Strict()] = ""
    tls_key_file: Annotated[str, Strict()] = ""
    allow_plain_http: Annotated[bool, Strict()] = _DEFAULT.allow_plain_http


@pyd.dataclass(config=_TABLE)
class _Database:
    url: Annotated[str, BeforeValidator(_db_url)] = _DEFAULT.db_url


@pyd.dataclass(config=_TABLE)
class _Auth:
    tokens_file: Annotated[str, Strict()] = ""
    protect_reads: Annotated[bool, Strict()] = _DEFAULT.protect_reads


@pyd.dataclass(config=_TABLE)
class _Engine:
    period_s: Annotated[Number, within(0.05, 3600)] = _DEFAULT.period_s
    request_timeout_s: Annotated[Number, within(0.01, 60)] = _DEFAULT.request_timeout_s
    max_vrs_per_router: Annotated[int, Strict(), within(1, 1_000_000)] = _DEFAULT.max_vrs_per_router
    max_reply_bytes: Annotated[int, Strict(), within(1024, 1 << 30)] = _DEFAULT.max_reply_bytes
    samples: Annotated[bool, Strict()] = _DEFAULT.samples
    sample_link: Annotated[bool, Strict()] = _DEFAULT.sample_link
    sample_schema: Literal["xtc-samples/2", "xtc-samples/3"] = "xtc-samples/3"
    sample_udp: Annotated[str, Strict(), AfterValidator(_sample_udp)] = ""
    link_transport: Literal["zmtp", "libzmq"] = "zmtp"
    shards: Annotated[int, Strict(), within(1, MAX_SHARDS)] = _DEFAULT.shards
    snapshot_interval_s: Annotated[Number, within(0.05, 3600)] = _DEFAULT.snapshot_interval_s


@pyd.dataclass(config=_TABLE)
class _Curve:
    client_secret_key_file: Annotated[str, Strict(), AfterValidator(_existing_file)] = ""


@pyd.dataclass(config=_TABLE)
class _Log:
    format: Literal["json", "kv"] = "json"
    level: Literal["debug", "info", "warning", "error"] = "info"


@pyd.dataclass(config=_TABLE)
class _Document:
    schema: Literal["xtc-policer/1"] = SCHEMA
    server: _Server = field(default_factory=_Server)
    database: _Database = field(default_factory=_Database)
    auth: _Auth = field(default_factory=_Auth)
    engine: _Engine = field(default_factory=_Engine)
    curve: _Curve = field(default_factory=_Curve)
    log: _Log = field(default_factory=_Log)


_DOCUMENT = TypeAdapter(_Document)


def read_tokens(path: str | Path) -> frozenset[str]:
    """Tokens from a file: one per line, blank lines and '#' comments ignored."""
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PolicerConfigError("auth.tokens_file", f"cannot read {path}: {e}") from None
    if mode & 0o006:
        raise PolicerConfigError("auth.tokens_file", f"{path} is readable or writable by every user (mode {mode & 0o777:o});"
                                              f" make it private: chmod o-rw {path}")
    toks = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return check_tokens("auth.tokens_file", toks)


def check_tokens(key: str, toks: list[str]) -> frozenset[str]:
    for i, t in enumerate(toks):
        if len(t) < MIN_TOKEN_CHARS or not t.isascii() or any(c.isspace() for c in t):
            raise PolicerConfigError(key, f"token #{i + 1} must be at least {MIN_TOKEN_CHARS} ASCII characters without spaces")
    return frozenset(toks)


def loads_config(text: str, env: Mapping[str, str] | None = None) -> PolicerConfig:
    """Parse configuration text (and ``XTC_POLICER_TOKENS``, ``XTC_POLICER_DB_URL`` from ``env``)."""
    d = parse_document(text, _DOCUMENT, _Document, PolicerConfigError)
    tokens = read_tokens(d.auth.tokens_file) if d.auth.tokens_file else frozenset()
    env = os.environ if env is None else env
    if env.get(TOKENS_ENV):
        tokens |= check_tokens(TOKENS_ENV, [t.strip() for t in env[TOKENS_ENV].split(",") if t.strip()])
    db_url = d.database.url
    if env.get(DB_URL_ENV):
        try:
            _db_url(env[DB_URL_ENV])
        except ValueError as e:
            raise PolicerConfigError(DB_URL_ENV, str(e)) from None
        db_url = env[DB_URL_ENV]
    cfg = PolicerConfig(
        host=d.server.host,
        port=int(d.server.port),
        workers=d.server.workers,
        header_timeout_s=d.server.header_timeout_s,
        tls_certificate_file=d.server.tls_certificate_file or None,
        tls_key_file=d.server.tls_key_file or None,
        allow_plain_http=d.server.allow_plain_http,
        db_url=db_url,
        tokens=tokens,
        protect_reads=d.auth.protect_reads,
        period_s=d.engine.period_s,
        request_timeout_s=d.engine.request_timeout_s,
        curve_secret_key_file=d.curve.client_secret_key_file or None,
        max_vrs_per_router=d.engine.max_vrs_per_router,
        max_reply_bytes=d.engine.max_reply_bytes,
        samples=d.engine.samples,
        sample_link=d.engine.sample_link,
        sample_schema=d.engine.sample_schema,
        sample_udp=d.engine.sample_udp or None,
        link_transport=d.engine.link_transport,
        shards=d.engine.shards,
        snapshot_interval_s=d.engine.snapshot_interval_s,
        log_format=d.log.format,
        log_level=d.log.level,
    )
    check_transport(cfg)
    if cfg.sample_udp:
        try:
            sample_udp_address(cfg.sample_udp, cfg.shards - 1)
        except ValueError as e:
            raise PolicerConfigError("engine.sample_udp", str(e)) from None
    if cfg.curve_secret_key_file:  # refused now, not at the first exchange with a daemon
        try:
            load_secret(cfg.curve_secret_key_file)
        except (CurveError, OSError, ValueError) as e:
            raise PolicerConfigError("curve.client_secret_key_file", str(e)) from None
    return cfg


# ------------------------------------------------------------------------------ transport (TLS)


def is_loopback(host: str) -> bool:
    """``host`` (an address or ``localhost``) is this machine's loopback only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # another host name: it may resolve to anything
        return False


def _private_key_file(path: str) -> None:
    try:
        mode = os.stat(path).st_mode
        with open(path, "rb"):
            pass
    except OSError as e:
        raise PolicerConfigError("server.tls_key_file", f"cannot read {path}: {e.strerror}") from None
    if mode & 0o007:
        raise PolicerConfigError("server.tls_key_file", f"{path} is accessible to every user (mode {mode & 0o777:o}); "
                                                 f"a private key must be private: chmod o-rwx {path}")


def server_ssl_context(certificate_file: str, key_file: str) -> ssl.SSLContext:
    """The server's TLS context (TLS 1.2 or newer, Python's default ciphers) from a PEM certificate
    (chain) and its PEM private key (unencrypted).  Each problem is a :class:`PolicerConfigError` naming the
    file: missing or unreadable, not a certificate, not a key, a key accessible to every user, or a
    key that does not belong to the certificate."""
    try:
        with open(certificate_file, "rb"):
            pass
    except OSError as e:
        raise PolicerConfigError("server.tls_certificate_file", f"cannot read {certificate_file}: {e.strerror}") from None
    _private_key_file(key_file)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:  # the certificate alone first, so that a bad one is named as such
        ssl.create_default_context(cafile=certificate_file)
    except (ssl.SSLError, ValueError) as e:
        raise PolicerConfigError("server.tls_certificate_file",
                          f"{certificate_file} holds no valid PEM certificate ({e})") from None

    def no_password() -> bytes:  # an encrypted key is refused, never prompted for
        raise ValueError("encrypted")

    try:
        ctx.load_cert_chain(certificate_file, key_file, password=no_password)
    except ssl.SSLError as e:
        if getattr(e, "reason", None) == "KEY_VALUES_MISMATCH":
            raise PolicerConfigError("server.tls_key_file", f"{key_file} is not the private key of the certificate "
                                                     f"{certificate_file}") from None
        raise PolicerConfigError("server.tls_key_file", f"{key_file} holds no usable private key for "
                                                 f"{certificate_file} ({e})") from None
    except ValueError:
        raise PolicerConfigError("server.tls_key_file", f"{key_file} is encrypted; give the key unencrypted "
                                                 "(a service cannot type a passphrase)") from None
    return ctx


def check_transport(cfg: PolicerConfig) -> None:
    """Refuse a configuration that would take bearer tokens in clear text from the network (plain HTTP
    on an address that is not loopback, without ``server.allow_plain_http``), and check the TLS
    certificate and key when given (both or neither).  Raises :class:`PolicerConfigError`."""
    if (cfg.tls_certificate_file is None) != (cfg.tls_key_file is None):
        given, missing = (("tls_certificate_file", "tls_key_file") if cfg.tls_key_file is None
                          else ("tls_key_file", "tls_certificate_file"))
        raise PolicerConfigError(f"server.{missing}", f"server.{given} is set: HTTPS needs both a certificate and its key")
    if cfg.tls_certificate_file is not None and cfg.tls_key_file is not None:
        server_ssl_context(cfg.tls_certificate_file, cfg.tls_key_file)
    elif not is_loopback(cfg.host) and not cfg.allow_plain_http:
        raise PolicerConfigError("server.host", f"{cfg.host} is not a loopback address and no TLS certificate is "
                                         "configured: clients' bearer tokens would cross the network in clear "
                                         "text; set server.tls_certificate_file and server.tls_key_file, or "
                                         "server.allow_plain_http = true to accept that")


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> PolicerConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PolicerConfigError("<file>", f"cannot read {path}: {e}") from None
    try:
        return loads_config(text, env)
    except PolicerConfigError as e:  # the same message as the daemon's and XCo's: the file first
        raise PolicerConfigError(e.key, e.problem, str(path)) from None
