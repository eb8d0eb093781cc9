"""The policer's configuration: a TOML file, validated, unknown keys refused, frozen.

A complete example (defaults shown)::

    schema = "xtc-policer/1"

    [server]
    host = "127.0.0.1"
    port = 8080

    [database]
    url = "sqlite:////var/lib/xtc/policer.db"   # SQLite only (sqlite:///relative, sqlite:////absolute)

    [auth]
    tokens_file = ""          # one bearer token per line ('#' comments); writes need one of them
    protect_reads = false     # true: reads need a token too

    [engine]
    period_s = 1.0            # seconds between policy cycles
    request_timeout_s = 1.0   # seconds to wait for a daemon's answer

    [curve]
    client_secret_key_file = ""   # the policer's CURVE .key_secret (used for routers with a server key)

Tokens may also come from the environment, ``XTC_POLICER_TOKENS`` (comma-separated).  Tokens are
never logged or shown; :meth:`PolicerConfig.describe` prints how many there are.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

__all__ = ["SCHEMA", "ConfigError", "PolicerConfig", "load_config", "loads_config", "TOKENS_ENV"]

SCHEMA = "xtc-policer/1"
TOKENS_ENV = "XTC_POLICER_TOKENS"
MIN_TOKEN_CHARS = 16


class ConfigError(ValueError):
    """A configuration is invalid; ``key`` names the culprit."""

    def __init__(self, key: str, problem: str):
        self.key = key
        super().__init__(f"'{key}': {problem}")


@dataclass(frozen=True)
class PolicerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    db_url: str = "sqlite:////var/lib/xtc/policer.db"
    tokens: frozenset[str] = field(default=frozenset(), repr=False)
    protect_reads: bool = False
    period_s: float = 1.0
    request_timeout_s: float = 1.0
    curve_secret_key_file: str | None = None

    def describe(self) -> dict[str, Any]:
        """The effective configuration without secrets."""
        return {"host": self.host, "port": self.port, "db_url": self.db_url, "tokens": len(self.tokens),
                "protect_reads": self.protect_reads, "period_s": self.period_s,
                "request_timeout_s": self.request_timeout_s, "curve_secret_key_file": self.curve_secret_key_file}


_KEYS = {
    "server": {"host", "port"},
    "database": {"url"},
    "auth": {"tokens_file", "protect_reads"},
    "engine": {"period_s", "request_timeout_s"},
    "curve": {"client_secret_key_file"},
}


def _num(key: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise ConfigError(key, f"must be a number within {lo:g}..{hi:g}, got {v!r}")
    return float(v)


def read_tokens(path: str | Path) -> frozenset[str]:
    """Tokens from a file: one per line, blank lines and '#' comments ignored."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("auth.tokens_file", f"cannot read {path}: {e}") from None
    toks = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return check_tokens("auth.tokens_file", toks)


def check_tokens(key: str, toks: list[str]) -> frozenset[str]:
    for i, t in enumerate(toks):
        if len(t) < MIN_TOKEN_CHARS or not t.isascii() or any(c.isspace() for c in t):
            raise ConfigError(key, f"token #{i + 1} must be at least {MIN_TOKEN_CHARS} ASCII characters without spaces")
    return frozenset(toks)


def loads_config(text: str, env: Mapping[str, str] | None = None) -> PolicerConfig:
    """Parse configuration text (and ``XTC_POLICER_TOKENS`` from ``env``)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("<file>", f"not valid TOML: {e}") from None
    bad = sorted(set(doc) - {"schema", *_KEYS})
    if bad:
        raise ConfigError(bad[0], f"unknown key (allowed: schema, {', '.join(sorted(_KEYS))})")
    if doc.get("schema", SCHEMA) != SCHEMA:
        raise ConfigError("schema", f"must be {SCHEMA!r}, got {doc.get('schema')!r}")
    for sec, keys in _KEYS.items():
        t = doc.get(sec, {})
        if not isinstance(t, dict):
            raise ConfigError(sec, "must be a table")
        extra = sorted(set(t) - keys)
        if extra:
            raise ConfigError(f"{sec}.{extra[0]}", f"unknown key (allowed: {', '.join(sorted(keys))})")
    c = PolicerConfig()
    kw: dict[str, Any] = {}
    s = doc.get("server", {})
    if "host" in s:
        if not isinstance(s["host"], str) or not s["host"]:
            raise ConfigError("server.host", "must be a non-empty string")
        kw["host"] = s["host"]
    if "port" in s:
        kw["port"] = int(_num("server.port", s["port"], 0, 65535))
    d = doc.get("database", {})
    if "url" in d:
        from .store import StoreError, parse_db_url

        try:
            parse_db_url(d["url"])
        except StoreError as e:
            raise ConfigError("database.url", str(e)) from None
        kw["db_url"] = d["url"]
    a = doc.get("auth", {})
    tokens: frozenset[str] = frozenset()
    if a.get("tokens_file"):
        tokens = read_tokens(a["tokens_file"])
    if "protect_reads" in a:
        if not isinstance(a["protect_reads"], bool):
            raise ConfigError("auth.protect_reads", "must be true or false")
        kw["protect_reads"] = a["protect_reads"]
    env = os.environ if env is None else env
    if env.get(TOKENS_ENV):
        tokens |= check_tokens(TOKENS_ENV, [t.strip() for t in env[TOKENS_ENV].split(",") if t.strip()])
    kw["tokens"] = tokens
    e = doc.get("engine", {})
    if "period_s" in e:
        kw["period_s"] = _num("engine.period_s", e["period_s"], 0.05, 3600)
    if "request_timeout_s" in e:
        kw["request_timeout_s"] = _num("engine.request_timeout_s", e["request_timeout_s"], 0.01, 60)
    cv = doc.get("curve", {})
    if cv.get("client_secret_key_file"):
        p = cv["client_secret_key_file"]
        if not isinstance(p, str) or not Path(p).is_file():
            raise ConfigError("curve.client_secret_key_file", f"no such file: {p!r}")
        kw["curve_secret_key_file"] = p
    return replace(c, **kw)


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> PolicerConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("<file>", f"cannot read {path}: {e}") from None
    return loads_config(text, env)
