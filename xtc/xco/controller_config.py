"""The XCo controller's configuration: a TOML file, validated, unknown keys refused naming the key.

A complete example (every key with its default unless marked required)::

    schema = "xco-controller/1"
    topology = "xco-topology.toml"   # required; relative to this file's directory
    slice_us = 10000                 # timeslot, microseconds (100 .. 10,000,000)
    mode = "timeslice"               # "timeslice" (Algorithm 1), "rate" (rate limiting) or "hybrid"
                                     # (timeslices; a rate inside the slice for hosts whose NIC is
                                     # faster than a link on one of their paths)
    lead_us = 500                    # directives are sent this long before their slice starts
    rate_link_fraction = 1.0         # rate mode: share this fraction of each link (0.5 .. 1.1; below 1
                                     # the link's queue stays near empty, at the cost of the rest;
                                     # above 1, for TCP traffic: late flows catch up, the queue takes
                                     # the excess)
    listen = "0.0.0.0:7800"          # UDP address:port the controller receives on
    heartbeat_interval_us = 100000   # hosts send a heartbeat this often
    heartbeat_misses = 3             # a host silent for misses x interval is dropped
    clock_window_us = 1000000        # a message whose t_us is further than this from now is stale
    state_file = "/var/lib/xtc-xco-controller/state.json"  # the hosts and their state, kept across restarts
    state_save_interval_s = 1.0      # save a changed state at most this often (and at stop)
    auth_key_file = "xco.key"        # optional: authenticate every datagram with this shared key
                                     # (xtc/xco/auth.py; `xtc xco keygen FILE` writes one)

    [metrics]
    enabled = true
    address = "127.0.0.1"
    port = 8972                      # 0 = an ephemeral port (logged at start)

    [log]
    format = "json"                  # "json" or "kv"
    level = "info"

:func:`load_controller_config` returns a frozen :class:`ControllerConfig` or raises
:class:`ControllerConfigError` naming the key (``'heartbeat_misses': must be within 1..100``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, TypeAdapter

from xtc.validation import DocumentError, Fail, parse_document, read_text_file, within
from xtc.xco.scheduler.rate import MAX_LINK_FRACTION

__all__ = ["SCHEMA", "ControllerConfig", "ControllerConfigError", "load_controller_config",
           "loads_controller_config", "parse_listen"]

SCHEMA = "xco-controller/1"


class ControllerConfigError(DocumentError):
    """A controller configuration is invalid.  ``key`` names the culprit."""


def parse_listen(s: str) -> tuple[str, int]:
    """``"addr:port"`` (``"[v6]:port"`` for IPv6) as ``(address, port)``; raises ValueError."""
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"must be address:port (port 0..65535), got {s!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"must be a numeric IP address and a port, got {s!r}") from None
    return host, int(port)


def checked_address(s: str) -> str:
    """``s`` if it is an ``address:port`` :func:`parse_listen` takes (ValueError otherwise)."""
    parse_listen(s)
    return s


_T = TypeVar("_T", bound=BaseModel)

#: A TOML integer (no float, no string).
Int = Annotated[int, Strict()]


class StrictTable(BaseModel):
    """A table of the XCo configuration files: unknown keys refused, strict types, frozen; a key with
    an alias (``schema``) is given by its alias only."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=False)


class MetricsConfig(StrictTable):
    enabled: bool = True
    address: Annotated[str, AfterValidator(lambda s: (ipaddress.ip_address(s), s)[1])] = "127.0.0.1"
    port: Annotated[Int, within(0, 65535)] = 8972


class LogConfig(StrictTable):
    format: Literal["json", "kv"] = "json"
    level: Literal["debug", "info", "warning", "error"] = "info"


class ControllerConfig(StrictTable):
    """The validated configuration (frozen).  ``topology`` is resolved against the file's directory."""

    schema_: Literal["xco-controller/1"] = Field(alias="schema")
    topology: Annotated[str, Field(min_length=1)]
    slice_us: Annotated[Int, within(100, 10_000_000)] = 10_000
    mode: Literal["timeslice", "rate", "hybrid"] = "timeslice"
    lead_us: Annotated[Int, within(0, 1_000_000)] = 500
    rate_link_fraction: Annotated[float, within(0.5, MAX_LINK_FRACTION)] = 1.0
    listen: Annotated[str, AfterValidator(checked_address)] = "0.0.0.0:7800"
    heartbeat_interval_us: Annotated[Int, within(1_000, 60_000_000)] = 100_000
    heartbeat_misses: Annotated[Int, within(1, 100)] = 3
    clock_window_us: Annotated[Int, within(1_000, 600_000_000)] = 1_000_000
    state_file: Annotated[str, Field(min_length=1)] = "/var/lib/xtc-xco-controller/state.json"
    state_save_interval_s: Annotated[float, within(0.0, 3600.0)] = 1.0
    auth_key_file: Annotated[str, Field(min_length=1)] | None = None
    metrics: MetricsConfig = MetricsConfig()
    log: LogConfig = LogConfig()

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_listen(self.listen)


def resolve_paths(cfg: _T, base_dir: str | Path | None, keys: tuple[str, ...]) -> _T:
    """``cfg`` with its relative paths ``keys`` (those not None) resolved against ``base_dir``
    (None: ``cfg`` as it is)."""
    if base_dir is None:
        return cfg
    upd = {k: str(Path(base_dir) / v) for k in keys if (v := getattr(cfg, k)) is not None and not Path(v).is_absolute()}
    return cfg.model_copy(update=upd)


class ConfigFile(Generic[_T]):
    """How an XCo configuration file is read: its TOML text validated as ``model`` (unknown keys
    refused, ``hints``: unknown key -> the key meant), then ``check`` across keys, then the relative
    paths among ``paths`` resolved against the file's directory.

    Parameters
    ----------
    model : type
        The configuration's :class:`StrictTable`.
    error : type
        The :class:`~xtc.validation.DocumentError` raised, naming the first bad key.
    hints : mapping
        Unknown key -> the key it probably means.
    paths : tuple of str
        The keys that hold file paths, relative to the configuration file's directory.
    check : callable
        ``check(cfg, fail)``: what the table's types cannot say (a key against another); raises
        ``fail(key, problem)``.
    """

    def __init__(self, model: type[_T], error: type[DocumentError], hints: Mapping[str, str],
                 paths: tuple[str, ...], check: Callable[[_T, Fail], None]):
        self.model = model
        self.error = error
        self.hints = hints
        self.paths = paths
        self.check = check
        self._adapter = TypeAdapter(model)

    def loads(self, text: str, source: str | None = None, base_dir: str | Path | None = None) -> _T:
        """Parse and validate configuration text; relative paths are resolved against ``base_dir``.

        Raises
        ------
        DocumentError
            The configuration's own error class (:attr:`error`), naming the first bad key.
        """
        fail = self.error.failing(source)
        cfg: _T = parse_document(text, self._adapter, self.model, fail, self.hints)
        self.check(cfg, fail)
        return resolve_paths(cfg, base_dir, self.paths)

    def load(self, path: str | Path) -> _T:
        """Load and validate a configuration file.  Raises :attr:`error` naming the key."""
        p = Path(path)
        text = read_text_file(p, self.error.failing(str(p)))
        return self.loads(text, source=str(p), base_dir=p.parent)


def _check_lead(cfg: ControllerConfig, fail: Fail) -> None:
    if (cfg.lead_us >= cfg.slice_us) and cfg.mode != "rate":
        raise fail("lead_us", f"must be less than slice_us ({cfg.slice_us}), got {cfg.lead_us}")


CONTROLLER_CONFIG = ConfigFile(
    ControllerConfig, ControllerConfigError,
    {"slice": "slice_us", "lead": "lead_us", "heartbeat_interval": "heartbeat_interval_us",
     "topology_file": "topology", "state": "state_file", "metrics_port": "metrics.port"},
    ("topology", "state_file", "auth_key_file"), _check_lead)
#: Parse and validate configuration text (:meth:`ConfigFile.loads`): a :class:`ControllerConfig`.
loads_controller_config = CONTROLLER_CONFIG.loads
#: Load and validate a configuration file (:meth:`ConfigFile.load`): a :class:`ControllerConfig`.
load_controller_config = CONTROLLER_CONFIG.load
