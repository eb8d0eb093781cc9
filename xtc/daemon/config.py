"""The daemon's configuration: a TOML file, validated, unknown keys refused, frozen after load.

A complete example (every key shown with its default unless marked required)::

    schema = "xtc-daemon/1"

    [daemon]
    backend = "libvirt"              # "libvirt", "cgroup", or an installed backend (below)
    control_period_s = 1.0           # 0.1 .. 60 s, on a monotonic clock
    state_dir = "/var/lib/xtc-daemon"  # where state.json lives (atomic writes)
    proc_net_dev = "/proc/net/dev"   # libvirt and cgroup backends: the default reads the counters
                                     # over netlink (this file where netlink is not available);
                                     # another path (/proc/<pid>/net/dev) is read as such
    max_setpoint_pps = 100000000.0   # larger setpoints are refused
    reassert_period_s = 30.0         # rewrite every cap this often (0 = never), see below
    cfs_period_us = 0                # libvirt LXC/QEMU and cgroup VRs: 0 keeps each VR's CFS period;
                                     # N (1000..1000000 us) writes period N with each quota, doubled
                                     # where the quota would be under 1 ms (25000: caps >= 4% on
                                     # 25 ms, 2-4% on 50 ms, 1-2% on 100 ms); the original period
                                     # is restored with the quota.  Not with Xen.  See below.
    early_drop = false               # drop a capped VR's excess at the host (a limiter on its host-side
                                     # interfaces) for activations that do not say; docs/guide/early-drop.md
    early_drop_limiter = "bpf"       # "bpf": a queue-less eBPF packet-rate bucket on the interfaces'
                                     # clsact egress; "tbf": a TBF root qdisc (docs/design/early-drop.md)
    # early_drop_margin_fraction = 0.05  # the limit is at least this much above what the VR forwards
                                     # at its cap (default: the limiter's, 0.05 for bpf, 0.2 for tbf)
    # early_drop_credit_s = 0.3      # the limiter's bucket, seconds at its rate (default: the
                                     # limiter's, 0.3 s for bpf, 0.02 s for tbf)
    # early_drop_loss_bound_fraction = 0.25  # off (0) by default; the VR's own losses (its cap not
                                     # binding) may raise its limit up to (1 + this) x its setpoint:
                                     # its rate reached, what the host hands it above 1.1x

    [controller]
    model = "paper"                  # "paper" or the path of a model file
    kind = "xtc"                     # "xtc" (XTC's own), "pi", "deadbeat" (the paper's) or "fixed"
    # cap_min_percent = 3.0          # optional, overrides the model file's controller.cap_min_percent
    # cap_max_percent = 100.0        # optional, overrides the model file's controller.cap_max_percent
    # lag_probe = true               # "xtc" only, on by default there: measure each VR's lag with
                                     # one probe and step its transients with it; false steps the
                                     # law without it (docs/results/2026-11-26-control-settling/control-settling.md, "The lag probe")

    [manager]                        # docs/guide/manager-api-security.md
    endpoint = "ipc:///run/xtc/manager.sock"      # socket for requests, and samples to whoever subscribes there (ZeroMQ endpoint)
    pub_endpoint = "ipc:///run/xtc/samples.sock"  # PUB socket for the samples (one message per period)
    max_message_bytes = 65536
    # An ipc:// socket is made mode 0660, group "xtc" when that group exists (its directory made
    # 0750 if missing): only root and the xtc group connect.  A tcp:// endpoint beyond loopback
    # (and an abstract ipc://@name) is refused unless CURVE is configured:
    # curve_secret_key_file = "/etc/xtc/curve/daemon.key_secret"  # the daemon's key pair (0600)
    # curve_clients_dir = "/etc/xtc/curve/clients"               # the admitted clients' .key files
    # ctl_curve_secret_key_file = "/etc/xtc/curve/ctl.key_secret" # the key pair `xtc ctl -c` uses

    [metrics]
    enabled = true
    address = "127.0.0.1"
    port = 8971                      # 0 = an ephemeral port (logged at start)

    [log]
    format = "json"                  # "json" (JSON lines) or "kv" (key=value)
    level = "info"                   # debug, info, warning, error

    [libvirt]
    uri = "lxc:///"                  # the libvirt connection URI (xen:///system, qemu:///system, lxc:///)
    domains = []                     # empty: every running domain is a VR


:func:`load_config` and :func:`loads_config` return a frozen :class:`DaemonConfig` or raise
:class:`ConfigError` naming the offending key; nothing is half-loaded.  On SIGHUP the daemon
reloads the file; only the keys in :data:`RELOADABLE` may change without a restart
(:func:`reload_diff` names the first one that may not).  A file (:func:`load_config`: the daemon's
start, its reload, ``xtc check-config``) must hold the ``schema`` line: an empty file is refused.

Other backends are found among the installed distributions' ``xtc.hosts`` entry points
(:func:`xtc.host.base.host_plugin`); the table named after such a backend (``[sim]`` for
``backend = "sim"``, the testbed's simulated plant, :mod:`xtc_lab.sim.host`) is that backend's
own: it validates it with its ``CONFIG_TABLE`` and errors still name the key (``sim.vr[0].name``).
A table named after another backend than the configured one is refused.

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

``cfs_period_us``: a capped VR that has work runs its whole quota at the start of each CFS period
and then waits for the next one, so a packet may wait up to a period inside it, and a 1 s control
period sees the rate of a slice of bursts cut at both ends.  libvirt's and the kernel's default
period is 100 ms; 25000 gives bursts a quarter as long: on the lab, steadier 1 s rates, and a
higher median RTT through a VR held far below its offered rate, because more of what it forwards
has waited in its full queue (docs/results/2026-11-26-lab/README.md, "The CFS period").

``reassert_period_s``: the daemon writes a cap only when it changes, but a VR that reboots (or a
hypervisor that restarts) may come back with its configured cap; the daemon therefore also
rewrites every controlled cap this often, and at once when it sees a VR's counters reset.
"""

from __future__ import annotations

from dataclasses import field, fields, is_dataclass
import ipaddress
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Strict, TypeAdapter, ValidationError, model_validator
from pydantic.dataclasses import dataclass

from xtc.host.base import HostPluginError, host_plugin
from xtc.models import PAPER_MODEL, ModelError, load_model

from xtc.validation import (
    DocumentError,
    FieldProblem,
    Number,
    key_path,
    parse_toml,
    read_text_file,
    validate_document,
    validation_problem,
    within,
)

__all__ = [
    "SCHEMA",
    "ConfigError",
    "DaemonSection",
    "ControllerSection",
    "ManagerSection",
    "MetricsSection",
    "LogSection",
    "LibvirtSection",
    "CgroupVr",
    "CgroupSection",
    "DaemonConfig",
    "load_config",
    "loads_config",
    "reload_diff",
    "reachable_without_curve",
    "RELOADABLE",
    "DEFAULT_ENDPOINT",
    "DEFAULT_PUB_ENDPOINT",
]

SCHEMA = "xtc-daemon/1"
#: The manager API's default endpoints: Unix sockets only root and the ``xtc`` group can reach.
DEFAULT_ENDPOINT = "ipc:///run/xtc/manager.sock"
DEFAULT_PUB_ENDPOINT = "ipc:///run/xtc/samples.sock"
#: The backends of the product; any other name is an installed ``xtc.hosts`` entry point.
BUILTIN_BACKENDS = ("libvirt", "cgroup")
ControllerKind = Literal["xtc", "pi", "deadbeat", "fixed"]
LogFormat = Literal["json", "kv"]
#: Early drop's limiters (xtc.host.bpflimiter, xtc.host.tclimiter).
EarlyDropLimiter = Literal["bpf", "tbf"]
LogLevel = Literal["debug", "info", "warning", "error"]
CONTROLLER_KINDS = get_args(ControllerKind)
LOG_FORMATS = get_args(LogFormat)
LOG_LEVELS = get_args(LogLevel)

#: Keys (section.key) that SIGHUP may change; anything else needs a restart.
RELOADABLE = frozenset(
    {
        "daemon.control_period_s",
        "daemon.max_setpoint_pps",
        "daemon.reassert_period_s",
        "controller.model",
        "controller.kind",
        "controller.cap_min_percent",
        "controller.cap_max_percent",
        "controller.lag_probe",
        "log.format",
        "log.level",
        "manager.ctl_curve_secret_key_file",  # xtc ctl's, never read by the daemon
    }
)


class ConfigError(DocumentError):
    """A configuration is invalid.  ``key`` names the culprit (``section.key``)."""


# ------------------------------------------------------------------------------------ field types


def _vr_name(s: str) -> str:
    if len(s) > 64 or not all(c.isalnum() or c in "-_.:" for c in s):
        raise ValueError(f"must be 1..64 characters of letters, digits, '-', '_', '.', ':', got {s!r}")
    return s


def _backend_name(s: str) -> str:
    if not (s[:1].isascii() and s[:1].isalpha() and s.isascii() and s.replace("_", "").isalnum() and s.islower()):
        raise ValueError(f"must be 'libvirt', 'cgroup' or the name of an installed backend (lowercase), got {s!r}")
    return s


def _endpoint(s: str) -> str:
    if not s.startswith(("tcp://", "ipc://", "inproc://")):
        raise ValueError(f"must be a ZeroMQ endpoint (tcp://host:port, ipc://path), got {s!r}")
    return s


def reachable_without_curve(endpoint: str) -> str | None:
    """Why ``endpoint`` would let other hosts or users in without CURVE, or None.

    A tcp:// endpoint whose host is not a loopback address (127.0.0.0/8, ::1, ``localhost``) is
    reachable from the network; an abstract ipc:// socket (``ipc://@name``) has no file permissions,
    so any user of the host connects.  A path ipc:// socket is guarded by its mode (0660).
    """
    if endpoint.startswith("ipc://@"):
        return "is an abstract Unix socket, which any local user can connect to"
    if not endpoint.startswith("tcp://"):
        return None
    host = endpoint[6:].rsplit(":", 1)[0]
    host = host.split(";")[-1].strip("[]")
    if host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass
    return "is reachable beyond loopback"


def list_of(what: str, nonempty: bool = False) -> BeforeValidator:
    """A TOML array (of ``what``), refused with a message saying so."""

    def check(v: Any) -> Any:
        if nonempty and (not isinstance(v, (list, tuple)) or not v):
            raise ValueError(f"must be a non-empty list of {what}")
        if not isinstance(v, (list, tuple)):
            raise ValueError(f"must be a list of {what}, got {type(v).__name__}")
        return v

    return BeforeValidator(check)


def _path(v: Any) -> Any:
    if not isinstance(v, str) or not v:
        raise ValueError("must be a non-empty path")
    return v


def _nonempty(s: str) -> str:
    if not s:
        raise ValueError("must not be empty")
    return s


Str = Annotated[str, Strict(), AfterValidator(_nonempty)]
Bool = Annotated[bool, Strict()]
Endpoint = Annotated[Str, AfterValidator(_endpoint)]
VrName = Annotated[Str, AfterValidator(_vr_name)]
FilePath = Annotated[str, BeforeValidator(_path)]


#: A TOML integer.
Integer = Annotated[int, Strict()]


#: Every table: unknown keys refused, frozen, no NaN or infinity.
TABLE = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _twice(names: list[str], where: str) -> None:
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise FieldProblem(where, f"names a VR twice: {dup[0]!r}")


# --------------------------------------------------------------------------------------- sections


@dataclass(config=TABLE)
class DaemonSection:
    backend: Annotated[Str, AfterValidator(_backend_name)] = "libvirt"
    control_period_s: Annotated[Number, within(0.1, 60.0)] = 1.0
    state_dir: Str = "/var/lib/xtc-daemon"
    proc_net_dev: Str = "/proc/net/dev"
    max_setpoint_pps: Annotated[Number, within(1.0, 1e10)] = 1e8
    reassert_period_s: Annotated[Number, within(0.0, 86400.0)] = 30.0
    cfs_period_us: Annotated[Integer, within(0, 1_000_000)] = 0
    early_drop: Bool = False
    early_drop_limiter: EarlyDropLimiter = "bpf"
    early_drop_margin_fraction: Annotated[Number, within(0.0, 10.0)] | None = None
    early_drop_credit_s: Annotated[Number, within(0.001, 1.0)] | None = None
    early_drop_loss_bound_fraction: Annotated[Number, within(0.0, 1.0)] | None = None

    @model_validator(mode="after")
    def _cfs_period(self) -> DaemonSection:
        if 0 < self.cfs_period_us < 1000:
            raise FieldProblem("cfs_period_us", f"must be 0 (keep the period found) or 1000..1000000 microseconds "
                                                f"(the kernel's CFS periods), got {self.cfs_period_us}")
        if self.cfs_period_us and self.backend not in BUILTIN_BACKENDS:
            raise FieldProblem("cfs_period_us", f"applies to the libvirt and cgroup backends only, not {self.backend!r}")
        return self


@dataclass(config=TABLE)
class ControllerSection:
    model: Str = "paper"
    kind: ControllerKind = "xtc"
    cap_min_percent: Annotated[Number, within(1.0, 100.0)] | None = None
    cap_max_percent: Annotated[Number, within(1.0, 100.0)] | None = None
    lag_probe: Bool | None = None  # None: the controller's default (the probe on for "xtc")

    @model_validator(mode="after")
    def _min_le_max(self) -> ControllerSection:
        lo, hi = self.cap_min_percent, self.cap_max_percent
        if lo is not None and hi is not None and lo > hi:
            raise FieldProblem("cap_min_percent", f"must not exceed cap_max_percent ({lo} > {hi})")
        if self.lag_probe and self.kind != "xtc":
            raise FieldProblem("lag_probe", f"applies to kind \"xtc\" only, not {self.kind!r}")
        return self


@dataclass(config=TABLE)
class ManagerSection:
    endpoint: Endpoint = DEFAULT_ENDPOINT
    pub_endpoint: Endpoint = DEFAULT_PUB_ENDPOINT
    max_message_bytes: Annotated[Integer, within(256, 16 * 1024 * 1024)] = 65536
    # CURVE (optional): the daemon's secret key file and a directory of the clients' public keys
    # (zmq.auth certificate files, as written by `xtc policer keygen`).  Both or neither.
    curve_secret_key_file: FilePath | None = None
    curve_clients_dir: FilePath | None = None
    # The client key pair `xtc ctl --config THIS_FILE` uses (its public .key must be in
    # curve_clients_dir); the daemon itself never reads it.
    ctl_curve_secret_key_file: FilePath | None = None

    @model_validator(mode="after")
    def _pairs(self) -> ManagerSection:
        if (self.curve_secret_key_file is None) != (self.curve_clients_dir is None):
            raise FieldProblem("curve_clients_dir", "curve_secret_key_file and curve_clients_dir go together")
        if self.ctl_curve_secret_key_file is not None and self.curve_secret_key_file is None:
            raise FieldProblem("ctl_curve_secret_key_file", "applies only with CURVE (curve_secret_key_file and "
                                                            "curve_clients_dir)")
        if self.endpoint == self.pub_endpoint:
            raise FieldProblem("pub_endpoint", f"must differ from manager.endpoint ({self.endpoint})")
        if self.curve_secret_key_file is None:
            for key in ("endpoint", "pub_endpoint"):
                why = reachable_without_curve(getattr(self, key))
                if why:
                    raise FieldProblem(key, f"{getattr(self, key)} {why}: refused without CURVE (set "
                                            f"manager.curve_secret_key_file and manager.curve_clients_dir, or use "
                                            f"an ipc:///path or a tcp://127.0.0.1 endpoint)")
        return self


@dataclass(config=TABLE)
class MetricsSection:
    enabled: Bool = True
    address: Str = "127.0.0.1"
    port: Annotated[Integer, within(0, 65535)] = 8971


@dataclass(config=TABLE)
class LogSection:
    format: LogFormat = "json"
    level: LogLevel = "info"


def _unique_domains(names: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(names)) != len(names):
        raise ValueError("lists a domain twice")
    return names


@dataclass(config=TABLE)
class LibvirtSection:
    uri: Str = "lxc:///"
    domains: Annotated[tuple[VrName, ...], list_of("domain names"), AfterValidator(_unique_domains)] = ()


_IFNAME_BAD = set("/: \t\n\r\x00")


def _cgroup_path(path: str) -> str:
    if not path.startswith("/") or "\x00" in path or any(part == ".." for part in path.split("/")):
        raise ValueError(f"must be an absolute directory path without '..', got {path!r}")
    return str(Path(path))


def _ifname(n: str) -> str:
    if len(n) > 15 or n in (".", "..") or _IFNAME_BAD & set(n):
        raise ValueError(f"not an interface name (1..15 characters, no '/', ':' or spaces): {n!r}")
    return n


def _interfaces(ifs: tuple[str, ...]) -> tuple[str, ...]:
    for j, n in enumerate(ifs):
        if n in ifs[:j]:
            raise FieldProblem(f"[{j}]", f"interface {n!r} listed twice")
    return ifs


@dataclass(config=TABLE)
class CgroupVr:
    name: VrName
    path: Annotated[Str, AfterValidator(_cgroup_path)]
    interfaces: Annotated[
        tuple[Annotated[Str, AfterValidator(_ifname)], ...], list_of("interface names", nonempty=True),
        AfterValidator(_interfaces),
    ]


@dataclass(config=TABLE)
class CgroupSection:
    vr: tuple[CgroupVr, ...] = ()

    @model_validator(mode="after")
    def _each_path_and_interface_once(self) -> CgroupSection:
        owner: dict[str, str] = {}
        paths: dict[str, str] = {}
        for i, v in enumerate(self.vr):
            if v.path in paths:
                raise FieldProblem(f"vr[{i}].path", f"{v.path} is already the cgroup of VR {paths[v.path]!r}")
            paths[v.path] = v.name
            for j, n in enumerate(v.interfaces):
                if n in owner:
                    raise FieldProblem(f"vr[{i}].interfaces[{j}]", f"interface {n!r} already belongs to VR {owner[n]!r}")
                owner[n] = v.name
        _twice([v.name for v in self.vr], "vr")
        return self


@dataclass(config=TABLE)
class _Sections:
    daemon: DaemonSection = field(default_factory=DaemonSection)
    controller: ControllerSection = field(default_factory=ControllerSection)
    manager: ManagerSection = field(default_factory=ManagerSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    log: LogSection = field(default_factory=LogSection)
    libvirt: LibvirtSection = field(default_factory=LibvirtSection)
    cgroup: CgroupSection = field(default_factory=CgroupSection)

    @model_validator(mode="after")
    def _vrs_fit_the_backend(self) -> _Sections:
        backend = self.daemon.backend
        if backend == "cgroup" and not self.cgroup.vr:
            raise FieldProblem("cgroup.vr", "backend 'cgroup' needs at least one [[cgroup.vr]]")
        if backend != "cgroup" and self.cgroup.vr:
            raise FieldProblem("cgroup.vr", f"only meaningful with backend 'cgroup' (backend is {backend!r})")
        if backend == "libvirt" and self.daemon.cfs_period_us and self.libvirt.uri.startswith("xen"):
            raise FieldProblem("daemon.cfs_period_us", "Xen's credit scheduler has no CFS period: leave it 0 with a xen URI")
        return self


@dataclass(config=TABLE)
class _Document(_Sections):
    """A configuration file as written: the sections and ``schema``."""

    schema: Literal["xtc-daemon/1"] = SCHEMA


@dataclass(config=TABLE)
class DaemonConfig(_Sections):
    """The whole configuration, frozen.  Runtime state never lives here."""

    source: str | None = None
    #: The table of a backend that is not the product's (``[sim]``), as its ``CONFIG_TABLE`` validated it.
    backend_options: Any = None

    @property
    def state_path(self) -> Path:
        """The state file, ``<state_dir>/state.json``."""
        return Path(self.daemon.state_dir) / "state.json"

    def flat(self) -> dict[str, Any]:
        """``{"section.key": value}`` for every key (used to compare two configs).

        A plug-in backend's own table is named as in the file (``sim.seed``, ``sim.vr``).
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "source":
                continue
            sec = getattr(self, f.name)
            name = self.daemon.backend if f.name == "backend_options" else f.name
            if sec is None and f.name == "backend_options":
                continue
            if not is_dataclass(sec):
                out[name] = sec
                continue
            for g in fields(sec):
                out[f"{name}.{g.name}"] = getattr(sec, g.name)
        return out


# ---------------------------------------------------------------------------------------- errors

# Keys that look like a unit mistake get a specific hint.
_HINTS = {
    "control_period_ms": "control_period_s (seconds)",
    "period_s": "control_period_s",
    "period": "control_period_s",
    "meter_hz": "unknown key: the meter reads the counters once per control period; remove it",
    "meter_samples_per_s": "unknown key: the meter reads the counters once per control period; remove it",
    "max_setpoint_kpps": "max_setpoint_pps (packets/s)",
    "cap_min": "cap_min_percent",
    "cap_max": "cap_max_percent",
    "offered_kpps": "offered_pps (packets/s)",
    "initial_cap": "initial_cap_percent",
    "vrs": "vr (as [[cgroup.vr]], or the table of the backend)",
    "cgroup": "path (the VR's cgroup directory)",
    "dir": "path (the VR's cgroup directory)",
    "ifaces": "interfaces",
    "vifs": "interfaces",
}


# ---------------------------------------------------------------------------------------- loading

_DOCUMENT = TypeAdapter(_Document)


def _check_model(c: ControllerSection) -> None:
    """The model file must load and the cap overrides must fit it."""

    try:
        mf = PAPER_MODEL if c.model == "paper" else load_model(c.model)
        mf.with_caps(c.cap_min_percent, c.cap_max_percent)
    except ModelError as e:
        raise ConfigError("controller.model", str(e)) from None


def _backend_table(doc: dict[str, Any], fail: Any) -> tuple[str | None, Any]:
    """Take the table of a backend that is not the product's out of ``doc``: (its name, the table).

    ``(None, None)`` for a product backend, or when ``daemon.backend`` is not a plain name (the
    schema then says what is wrong with it).
    """
    daemon = doc.get("daemon")
    name = daemon.get("backend") if isinstance(daemon, dict) else None
    if not isinstance(name, str) or name in BUILTIN_BACKENDS:
        return None, None
    try:
        _backend_name(name)
    except ValueError:
        return None, None
    if name in {f.name for f in fields(_Document)}:
        raise fail("daemon.backend", f"{name!r} is a section of the configuration, not a backend")
    return name, doc.pop(name, {})


def _refuse_other_backend_tables(doc: dict[str, Any], fail: Any) -> None:
    """A table named after an installed backend other than the configured one: say so."""

    sections = {f.name for f in fields(_Document)}
    daemon = doc.get("daemon", {})
    if not isinstance(daemon, dict):
        raise fail("daemon", f"must be a table, got {type(daemon).__name__}")
    backend = daemon.get("backend", "libvirt")
    for key in list(doc):
        if key in sections:
            continue
        try:
            host_plugin(key)
        except (HostPluginError, ValueError):
            continue
        if not isinstance(backend, str):
            del doc[key]  # the schema names what is wrong with daemon.backend
            continue
        raise fail(key, f"only meaningful with backend {key!r} (backend is {backend!r})")


def _plugin(name: str, fail: Any) -> Any:
    """The installed backend ``name`` (:func:`xtc.host.base.host_plugin`), or ``daemon.backend``'s error."""

    try:
        return host_plugin(name)
    except HostPluginError as e:
        raise fail("daemon.backend", str(e)) from None


def _validate_backend_table(name: str, plugin: Any, table: Any, fail: Any) -> Any:
    """The backend's own table, validated by the installed backend's ``CONFIG_TABLE``."""
    schema = getattr(plugin, "CONFIG_TABLE", None)
    if schema is None:
        if table:
            raise fail(name, f"backend {name!r} takes no table")
        return None
    if not isinstance(table, dict):
        raise fail(name, f"must be a table, got {type(table).__name__}")
    try:
        return TypeAdapter(schema).validate_python(table)
    except ValidationError as e:
        key, problem = validation_problem(e, schema, _HINTS)
        raise fail(key_path((name,), key), problem) from None


def loads_config(text: str, source: str | None = None, require_schema: bool = False) -> DaemonConfig:
    """Parse and validate configuration text.  Raises :class:`ConfigError`.

    ``require_schema``: refuse a text without its ``schema`` line (an empty one too), as
    :func:`load_config` does for a file; without it the line may be left out (library use).
    """
    fail = ConfigError.failing(source)
    doc = parse_toml(text, fail)
    if require_schema and "schema" not in doc:
        what = "the file is empty" if not doc else "missing"
        raise fail("schema", f'{what}: a daemon configuration starts with schema = "{SCHEMA}"')
    name, table = _backend_table(doc, fail)
    plugin = None if name is None else _plugin(name, fail)
    _refuse_other_backend_tables(doc, fail)
    parsed = validate_document(doc, _DOCUMENT, _Document, fail, _HINTS)
    options = None if name is None else _validate_backend_table(name, plugin, table, fail)
    cfg = DaemonConfig(**{f.name: getattr(parsed, f.name) for f in fields(_Sections)}, source=source,
                       backend_options=options)
    try:
        _check_model(cfg.controller)
    except ConfigError as e:
        raise ConfigError(e.key, e.problem, source) from None
    return cfg


def load_config(path: str | Path) -> DaemonConfig:
    """Load and validate a configuration file.  Raises :class:`ConfigError` naming the bad key."""
    p = Path(path)
    text = read_text_file(p, ConfigError.failing(str(p)))
    return loads_config(text, source=str(p), require_schema=True)


#: What :func:`reload_diff` names first: the keys whose change most plainly needs a restart.
_RESTART_FIRST = ("daemon.backend", "daemon.state_dir")
_ABSENT = object()


def reload_diff(old: DaemonConfig, new: DaemonConfig) -> list[str]:
    """Keys that differ between two configs and cannot change without a restart.

    Every key of either config counts (a key only one of them has, such as a backend's own
    table's, differs).  ``daemon.backend`` and ``daemon.state_dir`` come first, the rest sorted.
    """
    a, b = old.flat(), new.flat()
    fixed = {k for k in a.keys() | b.keys() if a.get(k, _ABSENT) != b.get(k, _ABSENT) and k not in RELOADABLE}
    return sorted(fixed, key=lambda k: (k not in _RESTART_FIRST, _RESTART_FIRST.index(k) if k in _RESTART_FIRST else 0, k))
