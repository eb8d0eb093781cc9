"""The daemon's one adapter to libvirt: connection, reconnection, domain lookups.

All libvirt errors are sorted here, and nowhere else, into:

* connection lost (libvirtd restarted or died: ``VIR_ERR_NO_CONNECT``,
  ``VIR_ERR_INVALID_CONN``, any error from libvirt's RPC layer, or
  ``VIR_ERR_SYSTEM_ERROR`` on a connection that is no longer alive): the
  connection is dropped, reopened and the operation retried once; if that
  fails too, :class:`~xtc.host.errors.HypervisorUnavailable`;
* domain not found (``VIR_ERR_NO_DOMAIN``) or not running
  (``VIR_ERR_OPERATION_INVALID``, or ``isActive()`` false):
  :class:`~xtc.host.errors.VRNotRunning`, a normal result;
* anything else: :class:`~xtc.host.errors.LibvirtOperationError` with
  libvirt's message and code.

Domain handles are never cached across calls: after libvirtd restarts the old
``virDomain`` objects are dead, so every operation looks the domain up by name
(one cheap RPC; the daemon does this about once per control period per VR).

Public API
----------
LibvirtConn(uri=None, open_fn=None)
    ``call(what, fn)`` runs ``fn(virConnect)`` with the error rule above;
    ``with_domain(name, fn, what)`` runs ``fn(virDomain)`` on a running domain;
    ``domain_info(name) -> DomainInfo`` (never raises for a missing domain);
    ``running_domains() -> list[DomainInfo]``; ``cpu_time_ns(names) -> {name: ns}`` (one bulk
    stats call); ``driver_kind() -> "xen" | "lxc" | "qemu" | ...``
    (the actuator kind for :func:`xtc.host.actuators.make_actuator`); ``close()``.  ``open_fn(uri)`` defaults to ``libvirt.open`` and is
    injectable (see ``tests/fakes/libvirt.py``).
DomainInfo
    name, running, domid (``dom.ID()``; None when not running), interfaces
    (``<interface><target dev=.../>`` of the live XML), reason.
interface_targets_from_xml(xml) -> tuple[str, ...]
    Pure parse of a domain XML (xml.etree).
LibvirtErrorBase
    ``libvirt.libvirtError`` when libvirt-python is installed, else a stand-in
    with the same ``get_error_code()`` / ``get_error_domain()`` methods.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

from xtc.host.errors import HypervisorUnavailable, LibvirtOperationError, VRNotRunning

__all__ = [
    "LibvirtConn",
    "DomainInfo",
    "interface_targets_from_xml",
    "classify_libvirt_error",
    "LibvirtErrorBase",
    "VIR_ERR_INTERNAL_ERROR",
    "VIR_ERR_NO_SUPPORT",
    "VIR_DOMAIN_STATS_CPU_TOTAL",
    "VIR_ERR_NO_CONNECT",
    "VIR_ERR_INVALID_CONN",
    "VIR_ERR_INVALID_ARG",
    "VIR_ERR_SYSTEM_ERROR",
    "VIR_ERR_RPC",
    "VIR_ERR_NO_DOMAIN",
    "VIR_ERR_OPERATION_INVALID",
    "VIR_FROM_RPC",
    "VIR_DOMAIN_AFFECT_LIVE",
    "VIR_DOMAIN_AFFECT_CONFIG",
]

log = logging.getLogger(__name__)

# libvirt's stable error numbers and flags (virterror.h, libvirt-domain.h); kept here
# so that the adapter and the fakes work without libvirt-python installed.
VIR_ERR_INTERNAL_ERROR = 1
VIR_ERR_NO_SUPPORT = 3
VIR_ERR_NO_CONNECT = 5
VIR_ERR_INVALID_CONN = 6
VIR_ERR_INVALID_ARG = 8
VIR_ERR_SYSTEM_ERROR = 38
VIR_ERR_RPC = 39
VIR_ERR_NO_DOMAIN = 42
VIR_ERR_OPERATION_INVALID = 55
VIR_FROM_RPC = 7
VIR_DOMAIN_AFFECT_LIVE = 1
VIR_DOMAIN_AFFECT_CONFIG = 2
VIR_CONNECT_LIST_DOMAINS_ACTIVE = 1
VIR_DOMAIN_STATS_CPU_TOTAL = 2
# virDomainState values in which a domain has a CPU time: running, blocked, paused, being shut
# down, suspended by guest power management (not: no state 0, shut off 5, crashed 6).
_STATES_WITH_CPU_TIME = frozenset({1, 2, 3, 4, 7})

# virConnectGetType() -> actuator kind.
_DRIVER_KINDS = {"xen": "xen", "lxc": "lxc", "qemu": "qemu", "kvm": "qemu"}

try:  # pragma: no branch
    import libvirt as _libvirt

    LibvirtErrorBase: type[Exception] = _libvirt.libvirtError
except ImportError:  # libvirt-python is optional
    _libvirt = None

    class _LibvirtErrorStandIn(Exception):
        """Stand-in for ``libvirt.libvirtError`` when libvirt-python is absent."""

        err: tuple[Any, ...] | None = None

        def get_error_code(self) -> int | None:
            return self.err[0] if self.err else None

        def get_error_domain(self) -> int | None:
            return self.err[1] if self.err else None

        def get_error_message(self) -> str | None:
            return self.err[2] if self.err else None

    LibvirtErrorBase = _LibvirtErrorStandIn

T = TypeVar("T")

_CONNECTION_CODES = frozenset({VIR_ERR_NO_CONNECT, VIR_ERR_INVALID_CONN})
_NOT_RUNNING_CODES = frozenset({VIR_ERR_NO_DOMAIN, VIR_ERR_OPERATION_INVALID})


def _alive(conn: Any) -> bool:
    try:
        return bool(conn.isAlive())
    except Exception:  # noqa: BLE001 - a connection that cannot answer is not alive
        return False


def classify_libvirt_error(e: BaseException, conn: Any | None = None) -> str:
    """Sort a libvirt error: ``"connection"``, ``"not_running"`` or ``"other"``.

    ``conn`` (the connection the error came from) is asked ``isAlive()`` to tell
    a dead connection from an ordinary ``VIR_ERR_SYSTEM_ERROR`` (e.g. a cgroup
    write that failed inside libvirtd).
    """
    code = e.get_error_code() if hasattr(e, "get_error_code") else None
    domain = e.get_error_domain() if hasattr(e, "get_error_domain") else None
    if code in _CONNECTION_CODES or code == VIR_ERR_RPC or domain == VIR_FROM_RPC:
        return "connection"
    if code in _NOT_RUNNING_CODES:
        return "not_running"
    if code in (VIR_ERR_SYSTEM_ERROR, VIR_ERR_INTERNAL_ERROR) and conn is not None and not _alive(conn):
        return "connection"
    return "other"


def _message(e: BaseException) -> str:
    msg = e.get_error_message() if hasattr(e, "get_error_message") else None
    return str(msg or e)


def interface_targets_from_xml(xml: str) -> tuple[str, ...]:
    """Host-side interface names of a domain: ``<devices><interface><target dev=.../>``.

    Interfaces without a ``<target dev>`` (an inactive domain's XML) are left out.

    Raises
    ------
    ValueError
        The text is not XML or its root is not ``<domain>``.
    """
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ValueError(f"domain XML does not parse: {e}") from None
    if root.tag != "domain":
        raise ValueError(f"domain XML has root <{root.tag}>, expected <domain>")
    out: list[str] = []
    for iface in root.findall("./devices/interface"):
        target = iface.find("target")
        dev = target.get("dev") if target is not None else None
        if dev:
            out.append(dev)
    return tuple(out)


#: Every this many listings the domains' XML is read again (interfaces hot-plugged while running).
XML_REFRESH_LISTINGS = 12


@dataclass(frozen=True, slots=True)
class DomainInfo:
    """What the daemon needs to know about one domain, as of one lookup.

    ``domid`` is ``dom.ID()`` of a running domain (Xen's domid, which names
    its backend interfaces ``vif<domid>.<n>``), None otherwise.  ``interfaces``
    are the host-side interface names in the live XML.  ``reason`` says why
    ``running`` is False.
    """

    name: str
    running: bool
    domid: int | None = None
    interfaces: tuple[str, ...] = ()
    reason: str = ""


def _default_open(uri: str | None) -> Any:
    if _libvirt is None:
        raise HypervisorUnavailable("libvirt-python is not installed (pip install libvirt-python)")
    # libvirt prints every error to stderr by default; the adapter reports them itself.
    _libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return _libvirt.open(uri)


class LibvirtConn:
    """A libvirt connection that reconnects after libvirtd restarts.

    Parameters
    ----------
    uri : str, optional
        libvirt URI (``"xen:///system"``, ``"lxc:///system"``, ``"qemu:///system"``);
        None lets libvirt choose.
    open_fn : callable, optional
        ``open_fn(uri) -> virConnect``; default ``libvirt.open``.
    """

    def __init__(self, uri: str | None = None, open_fn: Callable[[str | None], Any] | None = None) -> None:
        self.uri = uri
        self._open = open_fn or _default_open
        self._conn: Any | None = None
        #: Number of successful (re)connections, for status and tests.
        self.connects = 0
        # Domain handles of this connection, by name (looked up once, refreshed by every listing
        # and when a call through a kept handle says the domain is gone).
        self._doms: dict[str, Any] = {}
        # What the last listing learnt of each running domain (its XML is read again only when
        # its id changes: a new or restarted domain).
        self._infos: dict[str, DomainInfo] = {}
        self._listings = 0
        #: Whether the driver answers bulk domain stats (None: not asked yet on any connection).
        self.bulk_stats: bool | None = None

    def _connect(self) -> Any:
        if self._conn is not None:
            return self._conn
        try:
            conn = self._open(self.uri)
        except HypervisorUnavailable:
            raise
        except LibvirtErrorBase as e:
            raise HypervisorUnavailable(f"cannot connect to libvirt at {self.uri!r}: {_message(e)}") from None
        if conn is None:
            raise HypervisorUnavailable(f"cannot connect to libvirt at {self.uri!r}")
        self._conn = conn
        self.connects += 1
        return conn

    def _drop(self) -> None:
        self._doms.clear()  # handles belong to the connection
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a dead connection may fail; nothing to do
                pass

    def close(self) -> None:
        """Close the connection (the next call opens a new one)."""
        self._drop()

    def call(self, what: str, fn: Callable[[Any], T], vr: str | None = None) -> T:
        """Run ``fn(conn)``; reconnect and retry once if the connection was lost.

        Parameters
        ----------
        what : str
            Description of the operation for error messages.
        fn : callable
            Gets the ``virConnect``; its libvirt errors are sorted by this adapter.
        vr : str, optional
            The VR (domain name) concerned, for :class:`VRNotRunning`.

        Raises
        ------
        HypervisorUnavailable, VRNotRunning, LibvirtOperationError
        """
        for attempt in (1, 2):
            conn = self._connect()
            try:
                return fn(conn)
            except LibvirtErrorBase as e:
                kind = classify_libvirt_error(e, conn)
                if kind == "connection":
                    self._drop()
                    if attempt == 1:
                        log.warning("libvirt connection lost during %s (%s); reconnecting", what, _message(e))
                        continue
                    raise HypervisorUnavailable(
                        f"libvirt at {self.uri!r} unavailable during {what}: {_message(e)}"
                    ) from None
                if kind == "not_running":
                    raise VRNotRunning(vr or "?", _message(e)) from None
                raise LibvirtOperationError(f"{what}: {_message(e)}", e.get_error_code()) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def with_domain(self, name: str, fn: Callable[[Any], T], what: str = "domain operation",
                    check_active: bool = True) -> T:
        """Run ``fn(virDomain)`` on the running domain ``name``.

        The domain's handle is looked up once (``lookupByName``) and kept for this connection;
        when a call through a kept handle says the domain does not exist or is not running, the
        handle is looked up again and the call repeated once (the domain may have been
        redefined).  ``check_active=False`` skips the ``isActive`` call, for operations that
        libvirt itself refuses on a domain that is not running (``VIR_DOMAIN_AFFECT_LIVE``).

        Raises :class:`VRNotRunning` when the domain does not exist or is not active.
        """

        def on(dom: Any) -> T:
            if check_active and not dom.isActive():
                raise VRNotRunning(name, "domain is defined but not running")
            return fn(dom)

        def run(conn: Any) -> T:
            dom = self._doms.get(name)
            if dom is not None:
                try:
                    return on(dom)
                except VRNotRunning:
                    pass
                except LibvirtErrorBase as e:
                    if classify_libvirt_error(e, conn) != "not_running":
                        raise
                self._doms.pop(name, None)
            dom = conn.lookupByName(name)
            self._doms[name] = dom
            return on(dom)

        return self.call(f"{what} on domain {name!r}", run, vr=name)

    def domain_info(self, name: str) -> DomainInfo:
        """Running state, domid and interface names of domain ``name``.

        A missing or stopped domain gives ``DomainInfo(running=False, reason=...)``.

        Raises
        ------
        HypervisorUnavailable
            libvirtd cannot be reached even after reconnecting.
        LibvirtOperationError
            Any other libvirt failure, or a live XML that does not parse.
        """

        def info(dom: Any) -> DomainInfo:
            domid = int(dom.ID())
            xml = dom.XMLDesc(0)
            try:
                ifaces = interface_targets_from_xml(xml)
            except ValueError as e:
                raise LibvirtOperationError(f"domain {name!r}: {e}") from None
            return DomainInfo(name, True, domid if domid >= 0 else None, ifaces)

        try:
            return self.with_domain(name, info, "read domain info")
        except VRNotRunning as e:
            return DomainInfo(name, False, reason=e.reason)

    def running_domains(self) -> list[DomainInfo]:
        """Every running domain with its domid and interfaces (for "every domain is a VR").

        One ``listAllDomains`` call (running domains only); a domain's XML is read when it is new
        or its id changed (it was restarted) since the last listing, and every
        :data:`XML_REFRESH_LISTINGS` listings for every domain (so that an interface hot-plugged
        into a running domain is found within that many listings).  The listed handles replace
        the kept ones (:meth:`with_domain`).
        """
        self._listings += 1
        refresh = self._listings % XML_REFRESH_LISTINGS == 0

        def listing(conn: Any) -> list[DomainInfo]:
            out = []
            doms: dict[str, Any] = {}
            for dom in conn.listAllDomains(VIR_CONNECT_LIST_DOMAINS_ACTIVE):
                name = dom.name()
                try:
                    domid = int(dom.ID())
                    known = self._infos.get(name)
                    if known is not None and domid >= 0 and known.domid == domid and not refresh:
                        info = known
                    else:
                        ifaces = interface_targets_from_xml(dom.XMLDesc(0))
                        info = DomainInfo(name, True, domid if domid >= 0 else None, ifaces)
                except LibvirtErrorBase as e:
                    if classify_libvirt_error(e, conn) == "not_running":
                        continue  # stopped while we were listing
                    raise
                except ValueError as e:
                    raise LibvirtOperationError(f"domain {name!r}: {e}") from None
                doms[name] = dom
                out.append(info)
            self._infos = {d.name: d for d in out}
            self._doms.update(doms)
            return sorted(out, key=lambda d: d.name)

        return self.call("list running domains", listing)

    def cpu_time_ns(self, names: Iterable[str]) -> dict[str, int]:
        """Cumulative CPU time (ns, all vCPUs) of the running domains among ``names``.

        One ``virDomainListGetStats(doms, VIR_DOMAIN_STATS_CPU_TOTAL)`` call (key ``cpu.time``) on
        the kept handles (:meth:`with_domain`; a name without one is looked up once).  A domain that
        does not exist, is not running or is missing from the answer is left out.  Drivers without
        bulk stats (upstream libvirt's LXC driver answers ``VIR_ERR_NO_SUPPORT``; the QEMU and libxl
        drivers have them) are then asked once per domain, ``virDomainGetInfo`` (its ``cpuTime``),
        for as long as this adapter lives (:attr:`bulk_stats` is False); a domain whose call
        fails for another reason than the connection is left out with a warning.

        Raises
        ------
        HypervisorUnavailable
            libvirtd cannot be reached even after reconnecting.
        LibvirtOperationError
            The bulk call failed for another reason (the whole answer is lost).
        """
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return {}
        if self.bulk_stats is not False:
            try:
                out = self.call("read the CPU time of domains", lambda conn: self._cpu_bulk(conn, wanted))
            except _NoBulkStats:
                self.bulk_stats = False
                log.info("libvirt at %r has no bulk domain stats: CPU time is read per domain", self.uri)
            except _StaleHandles:
                return self._cpu_each(wanted)
            else:
                self.bulk_stats = True
                return out
        return self._cpu_each(wanted)

    def _cpu_bulk(self, conn: Any, wanted: list[str], retry: bool = True) -> dict[str, int]:
        doms = []
        for name in wanted:
            dom = self._doms.get(name)
            if dom is None:
                try:
                    dom = conn.lookupByName(name)
                except LibvirtErrorBase as e:
                    if classify_libvirt_error(e, conn) == "not_running":
                        continue  # no such domain
                    raise
                self._doms[name] = dom
            doms.append(dom)
        if not doms:
            return {}  # libvirt refuses an empty list
        try:
            answer = conn.domainListGetStats(doms, VIR_DOMAIN_STATS_CPU_TOTAL)
        except LibvirtErrorBase as e:
            if getattr(e, "get_error_code", lambda: None)() == VIR_ERR_NO_SUPPORT:
                raise _NoBulkStats from None
            if classify_libvirt_error(e, conn) != "not_running":
                raise
            # A kept handle of a domain that is gone, on a driver that does not skip it: look
            # every domain up again, once; then give up on the bulk call for this time.
            for name in wanted:
                self._doms.pop(name, None)
            if retry:
                return self._cpu_bulk(conn, wanted, retry=False)
            raise _StaleHandles from None
        out: dict[str, int] = {}
        for dom, stats in answer:
            t = stats.get("cpu.time")
            if t is not None:
                out[dom.name()] = int(t)
        return out

    def _cpu_each(self, wanted: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in wanted:
            try:
                info = self.with_domain(name, lambda dom: dom.info(), "read CPU time", check_active=False)
            except VRNotRunning:
                continue
            except LibvirtOperationError as e:
                log.warning("CPU time of domain %r left out: %s", name, e)
                continue
            if info[0] in _STATES_WITH_CPU_TIME:
                out[name] = int(info[4])
        return out

    def driver_kind(self) -> str:
        """``virConnectGetType()`` as an actuator kind: "xen", "lxc", "qemu" (lower-case otherwise)."""
        t = str(self.call("get hypervisor type", lambda conn: conn.getType())).lower()
        return _DRIVER_KINDS.get(t, t)


class _NoBulkStats(Exception):
    """The driver has no bulk domain stats (``VIR_ERR_NO_SUPPORT``)."""


class _StaleHandles(Exception):
    """The bulk stats call kept saying a domain does not exist."""
