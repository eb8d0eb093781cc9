"""The daemon's configuration: a TOML file, validated, unknown keys refused, frozen after load.

A complete example (every key shown with its default unless marked required)::

    schema = "xtc-daemon/1"

    [daemon]
    backend = "sim"                  # "sim" (simulated plant, no root), "libvirt" or "cgroup"
    control_period_s = 1.0           # 0.1 .. 60 s, on a monotonic clock
    meter_samples_per_s = 10.0       # /proc/net/dev reads per second (>= 1 per period)
    state_dir = "/var/lib/xtc"       # where state.json lives (atomic writes)
    proc_net_dev = "/proc/net/dev"   # libvirt and cgroup backends: the file the meter reads
    max_setpoint_pps = 100000000.0   # larger setpoints are refused
    reassert_period_s = 30.0         # rewrite every cap this often (0 = never), see below

    [controller]
    model = "paper"                  # "paper" or the path of a model file
    kind = "xtc"                     # "xtc" (XTC's own), "pi", "deadbeat" (the paper's) or "fixed"
    # cap_min_percent = 3.0          # optional, overrides the model file's caps.min_percent
    # cap_max_percent = 100.0        # optional, overrides the model file's caps.max_percent

    [manager]
    endpoint = "tcp://127.0.0.1:7700"      # REP socket for requests (ZeroMQ endpoint)
    pub_endpoint = "tcp://127.0.0.1:7701"  # PUB socket for per-VR samples
    max_message_bytes = 65536

    [metrics]
    enabled = true
    address = "127.0.0.1"
    port = 9108                      # 0 = an ephemeral port (logged at start)

    [log]
    format = "json"                  # "json" (JSON lines) or "kv" (key=value)
    level = "info"                   # debug, info, warning, error

    [libvirt]
    uri = "lxc:///"
    domains = []                     # empty: every running domain is a VR

    [sim]                            # backend = "sim" only
    seed = 1
    [[sim.vr]]
    name = "vr1"                     # required
    offered_pps = 100000.0
    initial_cap_percent = 100.0      # the VR's cap before XTC touches it
    traffic = "udp"                  # "udp" (does not back off) or "tcp" (backs off)
    interfaces = 2

:func:`load_config` and :func:`loads_config` return a frozen :class:`DaemonConfig` or raise
:class:`ConfigError` naming the offending key; nothing is half-loaded.  On SIGHUP the daemon
reloads the file; only the keys in :data:`RELOADABLE` may change without a restart
(:func:`reload_diff` names the first one that may not).

The cgroup backend (``backend = "cgroup"``, :mod:`xtc.host.cgroup`) controls VRs
that are cgroups, with no hypervisor: hosts without libvirt, and the lab's netns VRs (``xtc lab
up --mode netns``; ``xtc lab status --daemon-config`` prints this section for a lab)::

    [[cgroup.vr]]
    name = "vr1"                               # required
    path = "/sys/fs/cgroup/cpu/xtc-lab-vr1"    # required: the VR's cgroup directory (absolute):
                                               # cgroup v1 (cpu.cfs_quota_us, cpu.cfs_period_us)
                                               # or v2 (cpu.max), whichever files it has
    interfaces = ["vif123.0", "vif123.1"]      # required: host-side interfaces in /proc/net/dev;
                                               # their RX packets are the packets the VR forwarded

A VR whose directory does not exist is reported missing (not an error); the cap is written as a
CFS quota with the period found, never "no limit" except to restore an unlimited original, and
the exact original setting is restored on stop.  Each interface belongs to one VR; VR names and
paths are unique.  ``[[cgroup.vr]]`` is refused with any other backend.

``reassert_period_s``: the daemon writes a cap only when it changes, but a VR that reboots (or a
hypervisor that restarts) may come back with its configured cap; the daemon therefore also
rewrites every controlled cap this often, and at once when it sees a VR's counters reset.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "SCHEMA",
    "ConfigError",
    "DaemonSection",
    "ControllerSection",
    "ManagerSection",
    "MetricsSection",
    "LogSection",
    "LibvirtSection",
    "SimVr",
    "SimSection",
    "CgroupVr",
    "CgroupSection",
    "DaemonConfig",
    "load_config",
    "loads_config",
    "reload_diff",
    "RELOADABLE",
]

SCHEMA = "xtc-daemon/1"
BACKENDS = ("sim", "libvirt", "cgroup")
CONTROLLER_KINDS = ("xtc", "pi", "deadbeat", "fixed")
LOG_FORMATS = ("json", "kv")
LOG_LEVELS = ("debug", "info", "warning", "error")
TRAFFIC_KINDS = ("udp", "tcp")

#: Keys (section.key) that SIGHUP may change; anything else needs a restart.
RELOADABLE = frozenset(
    {
        "daemon.control_period_s",
        "daemon.meter_samples_per_s",
        "daemon.max_setpoint_pps",
        "daemon.reassert_period_s",
        "controller.model",
        "controller.kind",
        "controller.cap_min_percent",
        "controller.cap_max_percent",
        "log.format",
        "log.level",
    }
)


class ConfigError(ValueError):
    """A configuration is invalid.  ``key`` names the culprit (``section.key``)."""

    def __init__(self, key: str, problem: str, source: str | None = None):
        self.key = key
        self.problem = problem
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}'{key}': {problem}")


@dataclass(frozen=True)
class DaemonSection:
    backend: str = "sim"
    control_period_s: float = 1.0
    meter_samples_per_s: float = 10.0
    state_dir: str = "/var/lib/xtc"
    proc_net_dev: str = "/proc/net/dev"
    max_setpoint_pps: float = 1e8
    reassert_period_s: float = 30.0


@dataclass(frozen=True)
class ControllerSection:
    model: str = "paper"
    kind: str = "xtc"
    cap_min_percent: float | None = None
    cap_max_percent: float | None = None


@dataclass(frozen=True)
class ManagerSection:
    endpoint: str = "tcp://127.0.0.1:7700"
    pub_endpoint: str = "tcp://127.0.0.1:7701"
    max_message_bytes: int = 65536
    # CURVE (optional): the daemon's secret key file and a directory of the clients' public keys
    # (zmq.auth certificate files, as written by `xtc policer keygen`).  Both or neither.
    curve_secret_key_file: str | None = None
    curve_clients_dir: str | None = None


@dataclass(frozen=True)
class MetricsSection:
    enabled: bool = True
    address: str = "127.0.0.1"
    port: int = 9108


@dataclass(frozen=True)
class LogSection:
    format: str = "json"
    level: str = "info"


@dataclass(frozen=True)
class LibvirtSection:
    uri: str = "lxc:///"
    domains: tuple[str, ...] = ()


@dataclass(frozen=True)
class SimVr:
    name: str
    offered_pps: float = 100_000.0
    initial_cap_percent: float = 100.0
    traffic: str = "udp"
    interfaces: int = 2


@dataclass(frozen=True)
class SimSection:
    seed: int = 1
    vr: tuple[SimVr, ...] = ()


@dataclass(frozen=True)
class CgroupVr:
    name: str
    path: str
    interfaces: tuple[str, ...]


@dataclass(frozen=True)
class CgroupSection:
    vr: tuple[CgroupVr, ...] = ()


@dataclass(frozen=True)
class DaemonConfig:
    """The whole configuration, frozen.  Runtime state never lives here."""

    daemon: DaemonSection = field(default_factory=DaemonSection)
    controller: ControllerSection = field(default_factory=ControllerSection)
    manager: ManagerSection = field(default_factory=ManagerSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    log: LogSection = field(default_factory=LogSection)
    libvirt: LibvirtSection = field(default_factory=LibvirtSection)
    sim: SimSection = field(default_factory=SimSection)
    cgroup: CgroupSection = field(default_factory=CgroupSection)
    source: str | None = None

    @property
    def state_path(self) -> Path:
        """The state file, ``<state_dir>/state.json``."""
        return Path(self.daemon.state_dir) / "state.json"

    def flat(self) -> dict[str, Any]:
        """``{"section.key": value}`` for every key (used to compare two configs)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "source":
                continue
            sec = getattr(self, f.name)
            for g in fields(sec):
                out[f"{f.name}.{g.name}"] = getattr(sec, g.name)
        return out


# ---------------------------------------------------------------------------------------- parsing

_SECTIONS: dict[str, type] = {
    "daemon": DaemonSection,
    "controller": ControllerSection,
    "manager": ManagerSection,
    "metrics": MetricsSection,
    "log": LogSection,
    "libvirt": LibvirtSection,
    "sim": SimSection,
    "cgroup": CgroupSection,
}

# Keys that look like a unit mistake get a specific hint.
_HINTS = {
    "control_period_ms": "control_period_s (seconds)",
    "period_s": "control_period_s",
    "period": "control_period_s",
    "meter_hz": "meter_samples_per_s",
    "max_setpoint_kpps": "max_setpoint_pps (packets/s)",
    "cap_min": "cap_min_percent",
    "cap_max": "cap_max_percent",
    "offered_kpps": "offered_pps (packets/s)",
    "initial_cap": "initial_cap_percent",
    "vrs": "vr (as [[sim.vr]] or [[cgroup.vr]])",
    "cgroup": "path (the VR's cgroup directory)",
    "dir": "path (the VR's cgroup directory)",
    "ifaces": "interfaces",
    "vifs": "interfaces",
}


def _unknown(section: str, keys: set[str], allowed: set[str]) -> None:
    bad = sorted(keys - allowed)
    if bad:
        k = bad[0]
        name = f"{section}.{k}" if section else k
        hint = _HINTS.get(k)
        if hint:
            raise ConfigError(name, f"unknown key; did you mean '{hint}'?")
        raise ConfigError(name, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _number(key: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(key, f"must be a number, got {type(v).__name__} {v!r}")
    if not math.isfinite(v):
        raise ConfigError(key, f"must be finite, got {v}")
    if not (lo <= v <= hi):
        raise ConfigError(key, f"must be within {lo:g}..{hi:g}, got {v}")
    return float(v)


def _integer(key: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(key, f"must be an integer, got {type(v).__name__} {v!r}")
    if not (lo <= v <= hi):
        raise ConfigError(key, f"must be within {lo}..{hi}, got {v}")
    return v


def _string(key: str, v: Any, choices: tuple[str, ...] | None = None, nonempty: bool = True) -> str:
    if not isinstance(v, str):
        raise ConfigError(key, f"must be a string, got {type(v).__name__} {v!r}")
    if nonempty and not v:
        raise ConfigError(key, "must not be empty")
    if choices is not None and v not in choices:
        raise ConfigError(key, f"must be one of {', '.join(repr(c) for c in choices)}, got {v!r}")
    return v


def _boolean(key: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(key, f"must be true or false, got {type(v).__name__} {v!r}")
    return v


def _endpoint(key: str, v: Any) -> str:
    s = _string(key, v)
    if not (s.startswith("tcp://") or s.startswith("ipc://") or s.startswith("inproc://")):
        raise ConfigError(key, f"must be a ZeroMQ endpoint (tcp://host:port, ipc://path), got {s!r}")
    return s


def _table(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    t = doc.get(key, {})
    if not isinstance(t, dict):
        raise ConfigError(key, f"must be a table, got {type(t).__name__}")
    return t


def _vr_name(key: str, v: Any) -> str:
    s = _string(key, v)
    if len(s) > 64 or not all(c.isalnum() or c in "-_.:" for c in s):
        raise ConfigError(key, f"must be 1..64 characters of letters, digits, '-', '_', '.', ':', got {s!r}")
    return s


def _parse_daemon(t: Mapping[str, Any]) -> DaemonSection:
    _unknown("daemon", set(t), {f.name for f in fields(DaemonSection)})
    d = DaemonSection()
    kw: dict[str, Any] = {}
    if "backend" in t:
        kw["backend"] = _string("daemon.backend", t["backend"], BACKENDS)
    if "control_period_s" in t:
        kw["control_period_s"] = _number("daemon.control_period_s", t["control_period_s"], 0.1, 60.0)
    if "meter_samples_per_s" in t:
        kw["meter_samples_per_s"] = _number("daemon.meter_samples_per_s", t["meter_samples_per_s"], 0.1, 100.0)
    for k in ("state_dir", "proc_net_dev"):
        if k in t:
            kw[k] = _string(f"daemon.{k}", t[k])
    if "max_setpoint_pps" in t:
        kw["max_setpoint_pps"] = _number("daemon.max_setpoint_pps", t["max_setpoint_pps"], 1.0, 1e10)
    if "reassert_period_s" in t:
        kw["reassert_period_s"] = _number("daemon.reassert_period_s", t["reassert_period_s"], 0.0, 86400.0)
    d = replace(d, **kw)
    if d.meter_samples_per_s * d.control_period_s < 1.0 - 1e-9:
        raise ConfigError(
            "daemon.meter_samples_per_s",
            f"must give at least one meter sample per control period "
            f"({d.meter_samples_per_s:g}/s x {d.control_period_s:g} s < 1)",
        )
    return d


def _parse_controller(t: Mapping[str, Any]) -> ControllerSection:
    _unknown("controller", set(t), {f.name for f in fields(ControllerSection)})
    kw: dict[str, Any] = {}
    if "model" in t:
        kw["model"] = _string("controller.model", t["model"])
    if "kind" in t:
        kw["kind"] = _string("controller.kind", t["kind"], CONTROLLER_KINDS)
    for k in ("cap_min_percent", "cap_max_percent"):
        if k in t:
            kw[k] = _number(f"controller.{k}", t[k], 1.0, 100.0)
    c = ControllerSection(**kw)
    if c.cap_min_percent is not None and c.cap_max_percent is not None and c.cap_min_percent > c.cap_max_percent:
        raise ConfigError("controller.cap_min_percent", f"must not exceed cap_max_percent ({c.cap_min_percent} > {c.cap_max_percent})")
    return c


def _parse_manager(t: Mapping[str, Any]) -> ManagerSection:
    _unknown("manager", set(t), {f.name for f in fields(ManagerSection)})
    kw: dict[str, Any] = {}
    for k in ("endpoint", "pub_endpoint"):
        if k in t:
            kw[k] = _endpoint(f"manager.{k}", t[k])
    if "max_message_bytes" in t:
        kw["max_message_bytes"] = _integer("manager.max_message_bytes", t["max_message_bytes"], 256, 16 * 1024 * 1024)
    for k in ("curve_secret_key_file", "curve_clients_dir"):
        if k in t:
            if not isinstance(t[k], str) or not t[k]:
                raise ConfigError(f"manager.{k}", "must be a non-empty path")
            kw[k] = t[k]
    if ("curve_secret_key_file" in kw) != ("curve_clients_dir" in kw):
        raise ConfigError("manager.curve_clients_dir", "curve_secret_key_file and curve_clients_dir go together")
    m = ManagerSection(**kw)
    if m.endpoint == m.pub_endpoint:
        raise ConfigError("manager.pub_endpoint", f"must differ from manager.endpoint ({m.endpoint})")
    return m


def _parse_metrics(t: Mapping[str, Any]) -> MetricsSection:
    _unknown("metrics", set(t), {f.name for f in fields(MetricsSection)})
    kw: dict[str, Any] = {}
    if "enabled" in t:
        kw["enabled"] = _boolean("metrics.enabled", t["enabled"])
    if "address" in t:
        kw["address"] = _string("metrics.address", t["address"])
    if "port" in t:
        kw["port"] = _integer("metrics.port", t["port"], 0, 65535)
    return MetricsSection(**kw)


def _parse_log(t: Mapping[str, Any]) -> LogSection:
    _unknown("log", set(t), {f.name for f in fields(LogSection)})
    kw: dict[str, Any] = {}
    if "format" in t:
        kw["format"] = _string("log.format", t["format"], LOG_FORMATS)
    if "level" in t:
        kw["level"] = _string("log.level", t["level"], LOG_LEVELS)
    return LogSection(**kw)


def _parse_libvirt(t: Mapping[str, Any]) -> LibvirtSection:
    _unknown("libvirt", set(t), {f.name for f in fields(LibvirtSection)})
    kw: dict[str, Any] = {}
    if "uri" in t:
        kw["uri"] = _string("libvirt.uri", t["uri"])
    if "domains" in t:
        doms = t["domains"]
        if not isinstance(doms, list):
            raise ConfigError("libvirt.domains", f"must be a list of domain names, got {type(doms).__name__}")
        names = tuple(_vr_name(f"libvirt.domains[{i}]", d) for i, d in enumerate(doms))
        if len(set(names)) != len(names):
            raise ConfigError("libvirt.domains", "lists a domain twice")
        kw["domains"] = names
    return LibvirtSection(**kw)


def _parse_sim(t: Mapping[str, Any]) -> SimSection:
    _unknown("sim", set(t), {"seed", "vr"})
    seed = _integer("sim.seed", t["seed"], 0, 2**63 - 1) if "seed" in t else 1
    raw = t.get("vr", [])
    if not isinstance(raw, list):
        raise ConfigError("sim.vr", "must be an array of tables ([[sim.vr]])")
    vrs = []
    allowed = {f.name for f in fields(SimVr)}
    for i, v in enumerate(raw):
        p = f"sim.vr[{i}]"
        if not isinstance(v, dict):
            raise ConfigError(p, "must be a table")
        _unknown(p, set(v), allowed)
        if "name" not in v:
            raise ConfigError(f"{p}.name", "missing")
        kw: dict[str, Any] = {"name": _vr_name(f"{p}.name", v["name"])}
        if "offered_pps" in v:
            kw["offered_pps"] = _number(f"{p}.offered_pps", v["offered_pps"], 0.0, 1e9)
        if "initial_cap_percent" in v:
            kw["initial_cap_percent"] = _number(f"{p}.initial_cap_percent", v["initial_cap_percent"], 1.0, 100.0)
        if "traffic" in v:
            kw["traffic"] = _string(f"{p}.traffic", v["traffic"], TRAFFIC_KINDS)
        if "interfaces" in v:
            kw["interfaces"] = _integer(f"{p}.interfaces", v["interfaces"], 1, 16)
        vrs.append(SimVr(**kw))
    names = [v.name for v in vrs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError("sim.vr", f"names a VR twice: {dup[0]!r}")
    return SimSection(seed=seed, vr=tuple(vrs))


_IFNAME_BAD = set("/: \t\n\r\x00")


def _parse_cgroup(t: Mapping[str, Any]) -> CgroupSection:
    _unknown("cgroup", set(t), {"vr"})
    raw = t.get("vr", [])
    if not isinstance(raw, list):
        raise ConfigError("cgroup.vr", "must be an array of tables ([[cgroup.vr]])")
    vrs = []
    owner: dict[str, str] = {}
    paths: dict[str, str] = {}
    for i, v in enumerate(raw):
        p = f"cgroup.vr[{i}]"
        if not isinstance(v, dict):
            raise ConfigError(p, "must be a table")
        _unknown(p, set(v), {f.name for f in fields(CgroupVr)})
        for k in ("name", "path", "interfaces"):
            if k not in v:
                raise ConfigError(f"{p}.{k}", "missing")
        name = _vr_name(f"{p}.name", v["name"])
        path = _string(f"{p}.path", v["path"])
        if not path.startswith("/") or "\x00" in path or any(part == ".." for part in path.split("/")):
            raise ConfigError(f"{p}.path", f"must be an absolute directory path without '..', got {path!r}")
        norm = str(Path(path))
        if norm in paths:
            raise ConfigError(f"{p}.path", f"{norm} is already the cgroup of VR {paths[norm]!r}")
        paths[norm] = name
        ifs = v["interfaces"]
        if not isinstance(ifs, list) or not ifs:
            raise ConfigError(f"{p}.interfaces", "must be a non-empty list of interface names")
        names = []
        for j, n in enumerate(ifs):
            key = f"{p}.interfaces[{j}]"
            n = _string(key, n)
            if len(n) > 15 or n in (".", "..") or _IFNAME_BAD & set(n):
                raise ConfigError(key, f"not an interface name (1..15 characters, no '/', ':' or spaces): {n!r}")
            if n in names:
                raise ConfigError(key, f"interface {n!r} listed twice")
            if n in owner:
                raise ConfigError(key, f"interface {n!r} already belongs to VR {owner[n]!r}")
            owner[n] = name
            names.append(n)
        vrs.append(CgroupVr(name=name, path=norm, interfaces=tuple(names)))
    seen = [v.name for v in vrs]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    if dup:
        raise ConfigError("cgroup.vr", f"names a VR twice: {dup[0]!r}")
    return CgroupSection(vr=tuple(vrs))


def _from_doc(doc: Mapping[str, Any]) -> DaemonConfig:
    _unknown("", set(doc), {"schema", *_SECTIONS})
    schema = doc.get("schema", SCHEMA)
    if schema != SCHEMA:
        raise ConfigError("schema", f"must be {SCHEMA!r}, got {schema!r}")
    cfg = DaemonConfig(
        daemon=_parse_daemon(_table(doc, "daemon")),
        controller=_parse_controller(_table(doc, "controller")),
        manager=_parse_manager(_table(doc, "manager")),
        metrics=_parse_metrics(_table(doc, "metrics")),
        log=_parse_log(_table(doc, "log")),
        libvirt=_parse_libvirt(_table(doc, "libvirt")),
        sim=_parse_sim(_table(doc, "sim")),
        cgroup=_parse_cgroup(_table(doc, "cgroup")),
    )
    if cfg.daemon.backend == "sim" and not cfg.sim.vr:
        raise ConfigError("sim.vr", "backend 'sim' needs at least one [[sim.vr]]")
    if cfg.daemon.backend != "sim" and cfg.sim.vr:
        raise ConfigError("sim.vr", f"only meaningful with backend 'sim' (backend is {cfg.daemon.backend!r})")
    if cfg.daemon.backend == "cgroup" and not cfg.cgroup.vr:
        raise ConfigError("cgroup.vr", "backend 'cgroup' needs at least one [[cgroup.vr]]")
    if cfg.daemon.backend != "cgroup" and cfg.cgroup.vr:
        raise ConfigError("cgroup.vr", f"only meaningful with backend 'cgroup' (backend is {cfg.daemon.backend!r})")
    _check_model(cfg.controller)
    return cfg


def _check_model(c: ControllerSection) -> None:
    """The model file must load and the cap overrides must fit it."""
    from xtc.models import ModelError, PAPER_MODEL, load_model

    try:
        mf = PAPER_MODEL if c.model == "paper" else load_model(c.model)
        mf.with_caps(c.cap_min_percent, c.cap_max_percent)
    except ModelError as e:
        raise ConfigError("controller.model", str(e)) from None


def loads_config(text: str, source: str | None = None) -> DaemonConfig:
    """Parse and validate configuration text.  Raises :class:`ConfigError`."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("<file>", f"not valid TOML: {e}", source) from None
    try:
        cfg = _from_doc(doc)
    except ConfigError as e:
        raise ConfigError(e.key, e.problem, source) from None
    return replace(cfg, source=source)


def load_config(path: str | Path) -> DaemonConfig:
    """Load and validate a configuration file.  Raises :class:`ConfigError` naming the bad key."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError("<file>", f"cannot read: {e.strerror or e}", str(p)) from None
    except UnicodeDecodeError:
        raise ConfigError("<file>", "not UTF-8 text", str(p)) from None
    return loads_config(text, source=str(p))


def reload_diff(old: DaemonConfig, new: DaemonConfig) -> list[str]:
    """Keys that differ between two configs and cannot change without a restart (sorted)."""
    a, b = old.flat(), new.flat()
    return sorted(k for k in a if a[k] != b[k] and k not in RELOADABLE)
