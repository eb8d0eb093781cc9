"""Fakes of libvirt that speak the libvirt-python API the daemon uses.

They let the daemon (and its tests) run without libvirtd, without Xen and
without root.  The subset of the API is the one used by
:mod:`xtc.host.libvirt_conn`, :mod:`xtc.daemon.collector` and
:mod:`xtc.host.actuators`:

* ``virConnect``: ``lookupByName``, ``isAlive``, ``close``, ``getType``,
  ``listAllDomains``, ``domainListGetStats`` (``cpu.time``);
* ``virDomain``: ``name``, ``ID``, ``isActive``, ``XMLDesc``, ``info``,
  ``schedulerType``, ``schedulerParameters``, ``schedulerParametersFlags``,
  ``setSchedulerParametersFlags``, ``setSchedulerParameters``.

Errors are raised as :class:`FakeLibvirtError`, a subclass of
``libvirt.libvirtError`` (when libvirt-python is installed) carrying the same
error codes libvirt uses, so the adapter's error handling is exercised for
real.  Type errors in scheduler parameters are ``TypeError``, as libvirt-python
raises them when it converts a Python value to a typed parameter.

Scheduler behaviour modelled
----------------------------
``kind="xen"``: Xen's credit scheduler through libvirt's libxl driver:
schedulerType ``("credit", 2)``, parameters ``weight`` (1..65535, default 256)
and ``cap`` (unsigned int, percent of one physical CPU, 0 = UNLIMITED,
at most 100 * vcpus).

``kind="lxc"`` / ``"qemu"``: the cgroup-based posix scheduler: schedulerType
``("posix", 3)``, ``cpu_shares``, ``vcpu_period`` (1000..1000000 us, default
100000) and ``vcpu_quota`` (us per period; -1 = no limit, else
1000..17592186044415; 0 leaves the value unchanged, as libvirt does).  The
qemu kind also has ``global_period`` / ``global_quota`` with the same rules.

CPU time
--------
Each domain has a cumulative ``cpu_ns`` (``set_cpu_ns``), what libvirt reports as ``cpu.time``
of ``domainListGetStats`` and ``cpuTime`` of ``info()``, for running domains only.  As in
upstream libvirt, the xen (libxl) and qemu kinds answer the bulk call and the lxc kind refuses it
with ``VIR_ERR_NO_SUPPORT`` (``bulk_stats`` overrides that); a handle whose domain no longer
exists is skipped in the answer, as libvirt's drivers do.

Public API
----------
FakeHypervisor(kind="lxc")
    ``define(name, domid=None, interfaces=(), vcpus=1, active=True, **sched)``,
    ``set_cpu_ns(name, ns)``, ``bulk_stats`` (bool),
    ``start(name, domid)``, ``stop(name)``, ``reboot(name, new_domid)``
    (scheduler parameters go back to the domain's defined values),
    ``restart_daemon()`` (all open connections die), ``down`` (bool: opening
    fails), ``fail_next(method, code, message)``, ``writes`` (log of every
    accepted ``setSchedulerParameters*`` call), ``open(uri)`` (use as
    ``LibvirtConn(open_fn=hv.open)``), ``params(name)``.
FakeConnect, FakeDomain, FakeLibvirtError
"""

from __future__ import annotations

import collections
import copy
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import quoteattr, escape

from xtc.host.libvirt_conn import (
    VIR_DOMAIN_AFFECT_CONFIG,
    VIR_DOMAIN_AFFECT_LIVE,
    VIR_ERR_INVALID_ARG,
    VIR_ERR_NO_DOMAIN,
    VIR_ERR_NO_SUPPORT,
    VIR_ERR_OPERATION_INVALID,
    VIR_ERR_SYSTEM_ERROR,
    VIR_FROM_RPC,
    LibvirtErrorBase,
)

__all__ = ["FakeHypervisor", "FakeConnect", "FakeDomain", "FakeLibvirtError", "WriteRecord"]

VIR_FROM_DOM = 10
VIR_FROM_LIBXL = 45
_QUOTA_MIN = 1000
_QUOTA_MAX = 17592186044415
_PERIOD_MIN = 1000
_PERIOD_MAX = 1000000


class FakeLibvirtError(LibvirtErrorBase):  # type: ignore[misc, valid-type]
    """An error with libvirt's shape: ``get_error_code()``, ``get_error_domain()``..."""

    def __init__(self, message: str, code: int, domain: int = VIR_FROM_DOM) -> None:
        Exception.__init__(self, message)
        # Same tuple layout as virGetLastError(): code, domain, message, level, ...
        self.err = (code, domain, message, 2, None, None, None, 0, 0)

    def __str__(self) -> str:
        return str(self.err[2])


@dataclass
class _DomState:
    name: str
    kind: str
    domid: int
    active: bool
    interfaces: list[str]
    vcpus: int
    defined_params: dict[str, int]
    live_params: dict[str, int] = field(default_factory=dict)
    cpu_ns: int = 0


@dataclass(frozen=True)
class WriteRecord:
    """One accepted scheduler-parameter write."""

    domain: str
    params: dict[str, int]
    flags: int


def _default_params(kind: str) -> dict[str, int]:
    if kind == "xen":
        return {"weight": 256, "cap": 0}
    p = {"cpu_shares": 1024, "vcpu_period": 100000, "vcpu_quota": -1}
    if kind == "qemu":
        p.update({"global_period": 100000, "global_quota": -1})
    return p


class FakeHypervisor:
    """A set of domains and a libvirtd that can restart; see the module docstring."""

    def __init__(self, kind: str = "lxc") -> None:
        if kind not in ("xen", "lxc", "qemu"):
            raise ValueError(f"FakeHypervisor: kind must be xen, lxc or qemu, got {kind!r}")
        self.kind = kind
        self.domains: dict[str, _DomState] = {}
        self.generation = 0
        self.down = False
        self.writes: list[WriteRecord] = []
        self.opens = 0
        #: Calls that reach libvirtd (one RPC each in real libvirt), by method name.
        self.calls: collections.Counter[str] = collections.Counter()
        self._failures: list[tuple[str, int, str, int]] = []
        self._next_id = 1
        #: Whether the driver answers ``domainListGetStats`` (upstream: libxl and qemu, not lxc).
        self.bulk_stats = kind != "lxc"

    # --- set-up and events -------------------------------------------------------
    def define(
        self,
        name: str,
        domid: int | None = None,
        interfaces: tuple[str, ...] | list[str] = (),
        vcpus: int = 1,
        active: bool = True,
        **sched: int,
    ) -> None:
        params = _default_params(self.kind)
        unknown = set(sched) - set(params)
        if unknown:
            raise ValueError(f"define: unknown scheduler parameters {sorted(unknown)} for {self.kind}")
        params.update(sched)
        if domid is None:
            domid = self._next_id
        self._next_id = max(self._next_id, domid + 1)
        self.domains[name] = _DomState(
            name, self.kind, domid, active, list(interfaces), vcpus, params, dict(params)
        )

    def start(self, name: str, domid: int | None = None) -> None:
        d = self.domains[name]
        d.active = True
        d.domid = self._next_id if domid is None else domid
        self._next_id = max(self._next_id, d.domid + 1)
        d.live_params = dict(d.defined_params)

    def stop(self, name: str) -> None:
        self.domains[name].active = False

    def reboot(self, name: str, domid: int | None = None, interfaces: list[str] | None = None) -> None:
        """Stop and start again: new domid, live parameters back to the defined ones."""
        self.stop(name)
        if interfaces is not None:
            self.domains[name].interfaces = list(interfaces)
        self.start(name, domid)

    def undefine(self, name: str) -> None:
        del self.domains[name]

    def restart_daemon(self) -> None:
        """libvirtd restarts: every open connection (and its domain handles) dies."""
        self.generation += 1

    def fail_next(self, method: str, code: int, message: str = "injected failure", domain: int = VIR_FROM_DOM) -> None:
        """Make the next call of ``method`` (a FakeDomain/FakeConnect method name) fail."""
        self._failures.append((method, code, message, domain))

    def set_cpu_ns(self, name: str, ns: int) -> None:
        """Set a domain's cumulative CPU time, nanoseconds."""
        self.domains[name].cpu_ns = int(ns)

    def params(self, name: str) -> dict[str, int]:
        """The live scheduler parameters of a domain (a copy)."""
        return dict(self.domains[name].live_params)

    # --- libvirt.open ------------------------------------------------------------
    def open(self, uri: str | None = None) -> "FakeConnect":
        if self.down:
            raise FakeLibvirtError(
                "Failed to connect socket to '/var/run/libvirt/libvirt-sock': No such file or directory",
                VIR_ERR_SYSTEM_ERROR,
                VIR_FROM_RPC,
            )
        self.opens += 1
        return FakeConnect(self, self.generation, uri)

    def _maybe_fail(self, method: str) -> None:
        for i, (m, code, msg, dom) in enumerate(self._failures):
            if m == method:
                del self._failures[i]
                raise FakeLibvirtError(msg, code, dom)


class FakeConnect:
    """``virConnect`` of a :class:`FakeHypervisor`."""

    def __init__(self, hv: FakeHypervisor, generation: int, uri: str | None) -> None:
        self._hv = hv
        self._gen = generation
        self._closed = False
        self.uri = uri

    def _check(self, method: str) -> None:
        if self._closed:
            raise FakeLibvirtError("invalid connection pointer in " + method, 6, VIR_FROM_DOM)
        if self._gen != self._hv.generation or self._hv.down:
            raise FakeLibvirtError("Cannot write data: Broken pipe", VIR_ERR_SYSTEM_ERROR, VIR_FROM_RPC)
        if method != "ID":  # virDomainGetID answers from the handle, without libvirtd
            self._hv.calls[method] += 1
        self._hv._maybe_fail(method)

    def isAlive(self) -> int:
        return int(not self._closed and self._gen == self._hv.generation and not self._hv.down)

    def close(self) -> int:
        self._closed = True
        return 0

    def getType(self) -> str:
        self._check("getType")
        return {"xen": "Xen", "lxc": "LXC", "qemu": "QEMU"}[self._hv.kind]

    def lookupByName(self, name: str) -> "FakeDomain":
        self._check("lookupByName")
        if name not in self._hv.domains:
            raise FakeLibvirtError(
                f"Domain not found: no domain with matching name '{name}'", VIR_ERR_NO_DOMAIN
            )
        return FakeDomain(self, name)

    def listAllDomains(self, flags: int = 0) -> list["FakeDomain"]:
        self._check("listAllDomains")
        active_only = bool(flags & 1)  # VIR_CONNECT_LIST_DOMAINS_ACTIVE
        return [FakeDomain(self, n) for n, d in self._hv.domains.items() if d.active or not active_only]

    def domainListGetStats(self, doms: list["FakeDomain"], stats: int = 0, flags: int = 0) -> list[tuple["FakeDomain", dict[str, Any]]]:
        self._check("domainListGetStats")
        if not self._hv.bulk_stats:
            raise FakeLibvirtError(
                "this function is not supported by the connection driver: virDomainListGetStats", VIR_ERR_NO_SUPPORT
            )
        if not doms:
            raise FakeLibvirtError(
                "invalid argument: doms array in virDomainListGetStats must contain at least one domain",
                VIR_ERR_INVALID_ARG,
            )
        out = []
        for dom in doms:
            if not isinstance(dom, FakeDomain):
                raise FakeLibvirtError("domain list contains non-domain elements", VIR_ERR_INVALID_ARG)
            d = self._hv.domains.get(dom.name())
            if d is None:
                continue  # libvirt's drivers skip a domain that no longer exists
            rec: dict[str, Any] = {}
            if d.active and stats & 2:  # VIR_DOMAIN_STATS_CPU_TOTAL
                rec = {"cpu.time": d.cpu_ns, "cpu.user": d.cpu_ns // 2, "cpu.system": d.cpu_ns - d.cpu_ns // 2}
            out.append((FakeDomain(self, d.name), rec))
        return out


class FakeDomain:
    """``virDomain`` of a :class:`FakeHypervisor`."""

    def __init__(self, conn: FakeConnect, name: str) -> None:
        self._conn = conn
        self._name = name

    def _state(self, method: str) -> _DomState:
        self._conn._check(method)
        d = self._conn._hv.domains.get(self._name)
        if d is None:
            raise FakeLibvirtError(
                f"Domain not found: no domain with matching name '{self._name}'", VIR_ERR_NO_DOMAIN
            )
        return d

    def _live(self, method: str) -> _DomState:
        d = self._state(method)
        if not d.active:
            raise FakeLibvirtError("Requested operation is not valid: domain is not running", VIR_ERR_OPERATION_INVALID)
        return d

    def name(self) -> str:
        return self._name

    def ID(self) -> int:
        d = self._state("ID")
        return d.domid if d.active else -1

    def isActive(self) -> int:
        return int(self._state("isActive").active)

    def info(self) -> list[int]:
        """``[state, maxMem KiB, memory KiB, nrVirtCpu, cpuTime ns]``; state 1 running, 5 shut off."""
        d = self._state("info")
        return [1 if d.active else 5, 65536, 65536, d.vcpus, d.cpu_ns if d.active else 0]

    def XMLDesc(self, flags: int = 0) -> str:
        d = self._state("XMLDesc")
        dtype = {"xen": "xen", "lxc": "lxc", "qemu": "kvm"}[d.kind]
        idattr = f" id='{d.domid}'" if d.active else ""
        ifaces = []
        for i, dev in enumerate(d.interfaces):
            target = f"\n      <target dev={quoteattr(dev)}/>" if d.active else ""
            ifaces.append(
                "    <interface type='bridge'>\n"
                f"      <mac address='52:54:00:00:00:{i:02x}'/>\n"
                f"      <source bridge='xtcbr{i}'/>{target}\n"
                "    </interface>\n"
            )
        return (
            f"<domain type='{dtype}'{idattr}>\n  <name>{escape(d.name)}</name>\n"
            f"  <vcpu placement='static'>{d.vcpus}</vcpu>\n  <devices>\n"
            + "".join(ifaces)
            + "  </devices>\n</domain>\n"
        )

    def schedulerType(self) -> tuple[str, int]:
        d = self._state("schedulerType")
        return ("credit", 2) if d.kind == "xen" else ("posix", len(d.live_params))

    def schedulerParameters(self) -> dict[str, int]:
        d = self._state("schedulerParameters")
        return dict(d.live_params if d.active else d.defined_params)

    def schedulerParametersFlags(self, flags: int = 0) -> dict[str, int]:
        d = self._state("schedulerParametersFlags")
        if flags & VIR_DOMAIN_AFFECT_CONFIG:
            return dict(d.defined_params)
        if flags & VIR_DOMAIN_AFFECT_LIVE and not d.active:
            raise FakeLibvirtError("Requested operation is not valid: domain is not running", VIR_ERR_OPERATION_INVALID)
        return dict(d.live_params if d.active else d.defined_params)

    def setSchedulerParameters(self, params: dict[str, Any]) -> int:
        return self.setSchedulerParametersFlags(params, 0)

    def setSchedulerParametersFlags(self, params: dict[str, Any], flags: int = 0) -> int:
        if not isinstance(params, dict):
            raise TypeError("Scheduler parameters must be a dict")
        d = self._state("setSchedulerParametersFlags")
        live = bool(flags & VIR_DOMAIN_AFFECT_LIVE) or (flags & VIR_DOMAIN_AFFECT_CONFIG) == 0
        if live and not d.active:
            raise FakeLibvirtError("Requested operation is not valid: domain is not running", VIR_ERR_OPERATION_INVALID)
        new = self._validated(d, params)
        if live:
            d.live_params.update(new)
        if flags & VIR_DOMAIN_AFFECT_CONFIG:
            d.defined_params.update(new)
        self._conn._hv.writes.append(WriteRecord(d.name, copy.deepcopy(dict(params)), flags))
        return 0

    @staticmethod
    def _validated(d: _DomState, params: dict[str, Any]) -> dict[str, int]:
        new: dict[str, int] = {}
        for k, v in params.items():
            if k not in d.live_params:
                raise FakeLibvirtError(
                    f"invalid argument: parameter '{k}' not supported", VIR_ERR_INVALID_ARG
                )
            # libvirt-python converts by the parameter's type; a float is refused there.
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"an integer is required for '{k}', got {type(v).__name__}")
            if d.kind == "xen":
                if k == "cap" and not 0 <= v <= min(65535, 100 * d.vcpus):
                    raise FakeLibvirtError(
                        f"internal error: Failed to set scheduler parameters for domain '{d.name}'",
                        1,
                        VIR_FROM_LIBXL,
                    )
                if k == "weight" and not 1 <= v <= 65535:
                    raise FakeLibvirtError(
                        f"internal error: Failed to set scheduler parameters for domain '{d.name}'",
                        1,
                        VIR_FROM_LIBXL,
                    )
                new[k] = v
                continue
            if k.endswith("_quota"):
                if v == 0:
                    continue  # libvirt: 0 leaves the quota as it is
                if v < 0:
                    v = -1
                elif not _QUOTA_MIN <= v <= _QUOTA_MAX:
                    raise FakeLibvirtError(
                        f"invalid argument: value of '{k}' is out of range [{_QUOTA_MIN}, {_QUOTA_MAX}]",
                        VIR_ERR_INVALID_ARG,
                    )
            elif k.endswith("_period"):
                if v == 0:
                    continue
                if not _PERIOD_MIN <= v <= _PERIOD_MAX:
                    raise FakeLibvirtError(
                        f"invalid argument: value of '{k}' is out of range [{_PERIOD_MIN}, {_PERIOD_MAX}]",
                        VIR_ERR_INVALID_ARG,
                    )
            new[k] = v
        return new
