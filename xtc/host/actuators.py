"""Actuators: set a VR's CPU cap (percent of one CPU) through one small interface.

(Over 700 lines, for now: five backends share one contract and one base class, whose behaviour,
written once below, is most of the length.  The split by backend is known: the cgroup
actuators with their kept-descriptor budget (about 320 lines) to a module of their own, beside a
base module holding the contract, :class:`OriginalCap` and the shared write-on-change logic.  The
renaming of the cap floor it waited for (``cap_min`` -> ``cap_min_percent``, issue 47 item 5) is done.)

Public API
----------
CapActuator (Protocol)
    ``vr``, ``backend``, ``cap_min_percent``, ``cap_max_percent``;
    ``read_cap() -> float | None`` (current cap in percent of one CPU, None = unlimited);
    ``set_cap(cap_percent) -> float`` (clamp, write only on change, return the cap
    read back from the hypervisor/kernel);
    ``original() -> OriginalCap | None``; ``adopt_original(record)``;
    ``current_setting() -> OriginalCap`` (the setting now, as a record, without writing);
    ``restore() -> bool`` (write the original back exactly; True if anything was written);
    ``original_from_cap(cap_percent | None) -> OriginalCap`` (a record for a daemon
    that persisted only a cap in percent).
OriginalCap
    Serialisable record of a VR's setting before XTC touched it:
    ``to_dict()`` / ``OriginalCap.from_dict(d)`` (JSON-friendly).
XenCapActuator(conn, domain, cap_min_percent=1, cap_max_percent=100)
    libvirt + Xen credit scheduler, parameter ``cap``.
LibvirtQuotaActuator(conn, domain, cap_min_percent=1, cap_max_percent=100, quota_param="vcpu_quota", period_param="vcpu_period")
    libvirt LXC, ``vcpu_quota`` us per ``vcpu_period`` us; QEMU the same on the guest's one
    vCPU (:class:`QemuVcpuQuotaActuator`; the emulator thread stays outside the cap).
CgroupV1Actuator(cgroup_dir, vr=None, ...)
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` in a cgroup v1 cpu directory.
CgroupV2Actuator(cgroup_dir, vr=None, ...)
    ``cpu.max`` (``"quota period"`` or ``"max period"``) in a cgroup v2 directory.
make_actuator(kind, vr, *, conn=None, cgroup_dir=None, cap_min_percent=1, cap_max_percent=100) -> CapActuator
    kind in ``"xen"``, ``"lxc"``, ``"qemu"``, ``"cgroup1"``, ``"cgroup2"``, ``"cgroup"``
    (v1 or v2, whichever files the directory has).
clamp_cap(cap_percent, cap_min_percent, cap_max_percent) -> float
    The pure clamp with its input checks.

Common behaviour
----------------
* ``cap_percent`` must be a real finite number (NaN, inf, bools and strings are
  refused with :class:`ValueError`/:class:`TypeError`, and nothing is written);
  it is clamped to ``[cap_min_percent, cap_max_percent]`` where ``1 <= cap_min_percent <= cap_max_percent <= 100``.
* ``set_cap`` writes only if the wanted value differs from the setting in
  force, then reads back what was accepted and returns that cap.  The setting
  it compares with is the one it last read or read back, trusted for
  ``refresh_s`` seconds (default 30, the daemon's ``reassert_period_s``): a
  write then costs the write and one read-back (cgroup v1: of the quota only;
  the kernel reports the quota it accepted, the period is the one remembered).
  When the remembered setting says no write is needed, the setting is read
  again to make sure (so a VR reboot or a change behind XTC's back that the
  daemon re-asserts against is always seen).  After ``refresh_s``, after any
  failure and before the first write (the original) everything is read again,
  as before every write: a period changed behind XTC's back is therefore
  noticed at the next write after ``refresh_s``, and the daemon re-asserts
  every cap at least every ``reassert_period_s``.
* The first ``set_cap`` on a VR records the setting it found as the
  *original*.  ``original()`` returns it for the daemon to persist;
  ``adopt_original(record)`` (after a daemon restart) replaces it so that
  ``restore()`` gives back the true original, not a cap XTC set before it
  was killed.  ``restore()`` forgets the original once it is written back.
  ``current_setting()`` is the record of the setting now (what the first
  ``set_cap`` would record): a daemon takes it before its first write and
  persists it, so that not even a crash between the two can lose it.
* Xen: ``cap`` is an integer; 0 means UNLIMITED in Xen.  ``set_cap`` rounds to
  the nearest integer inside the bounds and can never produce 0 (the write
  path refuses a 0 except from ``restore()`` of an original 0).
* Quota backends write ``quota_us = round(cap/100 * period_us)``, at least
  1000 us (the kernel's and libvirt's minimum), keeping the period as found;
  with ``cfs_period_us`` (the daemon's ``[daemon] cfs_period_us``) they write
  that period with each quota instead, doubled where the quota would be under
  1 ms (:func:`period_for`), and restore the original period with the quota.
  An unlimited quota (-1 / ``max``, 0, absent, or libvirt's huge "no limit"
  numbers) reads as ``None``.

Errors: :class:`~xtc.host.errors.VRNotRunning` (domain or cgroup gone),
:class:`~xtc.host.errors.ActuatorError` (refused write, nonsense read-back),
:class:`~xtc.host.errors.HypervisorUnavailable`,
:class:`~xtc.host.errors.LibvirtOperationError`.
"""

from __future__ import annotations

import errno
import math
import numbers
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, runtime_checkable

from xtc.host.errors import ActuatorError, VRNotRunning
from xtc.host.libvirt_conn import VIR_DOMAIN_AFFECT_LIVE, LibvirtConn

__all__ = [
    "CapActuator",
    "OriginalCap",
    "XenCapActuator",
    "LibvirtQuotaActuator",
    "CgroupV1Actuator",
    "CgroupV2Actuator",
    "make_actuator",
    "clamp_cap",
    "quota_for",
    "CAP_FLOOR_PERCENT",
    "CAP_CEILING_PERCENT",
    "QUOTA_MIN_US",
    "PERIOD_MIN_US",
    "PERIOD_MAX_US",
    "period_for",
    "check_cfs_period",
    "DEFAULT_REFRESH_S",
    "refresh_of",
]

#: Lowest and highest cap XTC ever sets, percent of one CPU.
CAP_FLOOR_PERCENT = 1.0
CAP_CEILING_PERCENT = 100.0
#: Smallest CFS quota the kernel (and libvirt) accept, microseconds.
QUOTA_MIN_US = 1000
#: Shortest and longest CFS period the kernel accepts, microseconds.
PERIOD_MIN_US = 1000
PERIOD_MAX_US = 1_000_000
#: Seconds :meth:`CapActuator.set_cap` trusts the setting it last read (the daemon's default
#: ``reassert_period_s``).
DEFAULT_REFRESH_S = 30.0
#: libvirt's largest vcpu_quota (VIR_CGROUP_CPU_QUOTA_MAX); anything at or above means "no limit".
LIBVIRT_QUOTA_MAX = 17592186044415

Params = dict[str, "int | str"]


def refresh_of(reassert_period_s: float) -> float:
    """The actuators' ``refresh_s`` for a daemon re-asserting caps every ``reassert_period_s``.

    The same period, or :data:`DEFAULT_REFRESH_S` when the daemon never re-asserts (0).
    """
    return reassert_period_s if reassert_period_s > 0 else DEFAULT_REFRESH_S


def quota_for(cap_percent: float, period_us: int) -> int:
    """The CFS quota that caps at ``cap_percent`` of one CPU, microseconds per ``period_us``.

    Rounded to the microsecond and at least :data:`QUOTA_MIN_US`.
    """
    return max(QUOTA_MIN_US, int(round(cap_percent / 100.0 * period_us)))


def check_cfs_period(cfs_period_us: object) -> int:
    """``cfs_period_us`` if it is 0 (keep the period found) or a whole period the kernel accepts
    (:data:`PERIOD_MIN_US` .. :data:`PERIOD_MAX_US` microseconds); ValueError otherwise."""
    if isinstance(cfs_period_us, bool) or not isinstance(cfs_period_us, int) or not (
            cfs_period_us == 0 or PERIOD_MIN_US <= cfs_period_us <= PERIOD_MAX_US):
        raise ValueError(f"cfs_period_us must be 0 (keep the period found) or an integer "
                         f"{PERIOD_MIN_US}..{PERIOD_MAX_US} microseconds, got {cfs_period_us!r}")
    return cfs_period_us


def period_for(cap_percent: float, cfs_period_us: int) -> int:
    """The CFS period written with a cap of ``cap_percent`` on a short period ``cfs_period_us``.

    ``cfs_period_us`` doubled until the cap's quota is at least :data:`QUOTA_MIN_US` (the kernel's
    smallest), and never beyond :data:`PERIOD_MAX_US`: on 25000 us, caps of 4% and more get 25 ms,
    2-4% 50 ms, 1-2% 100 ms.  Why short: a capped VR that has work runs its whole quota at the start
    of each period and then waits, so its CPU comes in bursts of quota; a period of 100 ms gives
    bursts of up to 100 ms and a packet that arrives after its VR's burst waits the rest of the
    period.  A window of one control period cuts a burst at each edge: on the lab's forwarder at a
    cap of 4% the CPU per 1 s scattered by 4.3-4.4% (coefficient of variation) with 100 ms and
    0.75-1.8% with 25 ms (docs/results/2026-11-26-lab/README.md, "The CFS period", with what a short period costs).
    """
    p = cfs_period_us
    while p * 2 <= PERIOD_MAX_US and round(cap_percent / 100.0 * p) < QUOTA_MIN_US:
        p *= 2
    return p


def _quota_period_order(changes: Params, current: Params, quota_key: str, period_key: str) -> Params:
    """``changes`` (a quota and a period) in the order to write them: the one whose setting in
    between (the new value with the old other one) is the lower cap first; an unlimited quota
    (restoring no limit) first, before the period it would be judged against."""
    if quota_key not in changes or period_key not in changes:
        return changes
    q1, p1 = int(changes[quota_key]), int(changes[period_key])
    q0, p0 = int(current.get(quota_key, q1)), int(current.get(period_key, p1))
    quota_first = q1 < 0 or q0 <= 0 or q1 / p0 <= q0 / p1
    order = (quota_key, period_key) if quota_first else (period_key, quota_key)
    return {k: changes[k] for k in order}


def _quota_period_params(cap_percent: float | None, period_us: int, quota_key: str, period_key: str) -> Params:
    """A quota-and-period setting of ``cap_percent`` (None: no limit, quota -1) on ``period_us``."""
    return {quota_key: -1 if cap_percent is None else quota_for(cap_percent, period_us), period_key: period_us}


def _on_cfs_period(cap_percent: float, cfs_period_us: int, current: Params, quota_key: str, period_key: str) -> Params:
    """The quota and period of ``cap_percent`` on :func:`period_for`'s period, in the order to write them."""
    return _quota_period_order(_quota_period_params(cap_percent, period_for(cap_percent, cfs_period_us), quota_key,
                                                    period_key), current, quota_key, period_key)


def _check_quota_period_original(params: Params, quota_key: str, period_key: str, what: str) -> None:
    """Refuse an original quota-and-period setting that is not exactly two integers with a period > 0.

    Raises
    ------
    ValueError
        Naming ``what`` (``"libvirt quota"``, ``"cgroup v1"``) and the setting.
    """
    if set(params) != {quota_key, period_key}:
        raise ValueError(f"{what} original must have exactly {quota_key!r} and {period_key!r}, got {params}")
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{what} original: {k}={v!r} is not an integer")
    if int(params[period_key]) <= 0:
        raise ValueError(f"{what} original: {period_key} must be > 0, got {params}")


def clamp_cap(cap_percent: float, cap_min_percent: float, cap_max_percent: float) -> float:
    """Clamp a cap to ``[cap_min_percent, cap_max_percent]`` after checking it is a real finite number.

    Parameters
    ----------
    cap_percent : float
        Wanted cap, percent of one CPU.
    cap_min_percent, cap_max_percent : float
        Bounds, percent of one CPU.

    Raises
    ------
    TypeError
        ``cap_percent`` is not a real number (bools are refused too).
    ValueError
        ``cap_percent`` is NaN or infinite.
    """
    if isinstance(cap_percent, bool) or not isinstance(cap_percent, numbers.Real):
        raise TypeError(f"cap_percent must be a real number, got {type(cap_percent).__name__} {cap_percent!r}")
    c = float(cap_percent)
    if not math.isfinite(c):
        raise ValueError(f"cap_percent must be finite, got {cap_percent!r}; nothing written")
    return min(max(c, cap_min_percent), cap_max_percent)


def _check_bounds(cap_min_percent: float, cap_max_percent: float) -> tuple[float, float]:
    for name, v in (("cap_min_percent", cap_min_percent), ("cap_max_percent", cap_max_percent)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    lo, hi = float(cap_min_percent), float(cap_max_percent)
    if not CAP_FLOOR_PERCENT <= lo <= hi <= CAP_CEILING_PERCENT:
        raise ValueError(
            f"cap bounds must satisfy {CAP_FLOOR_PERCENT:g} <= cap_min_percent <= cap_max_percent <= "
            f"{CAP_CEILING_PERCENT:g} (percent of one CPU), got cap_min_percent={lo:g}, cap_max_percent={hi:g}"
        )
    return lo, hi


@dataclass(frozen=True)
class OriginalCap:
    """A VR's CPU-limit setting before XTC touched it.

    ``backend`` is the actuator kind (``"xen"``, ``"libvirt-quota"``,
    ``"cgroup1"``, ``"cgroup2"``), ``target`` the domain name or cgroup
    directory, ``params`` the raw values as the hypervisor/kernel reported them
    (e.g. ``{"cap": 0}``, ``{"vcpu_quota": -1, "vcpu_period": 100000}``,
    ``{"cpu.max": "max 100000"}``).
    """

    backend: str
    target: str
    params: tuple[tuple[str, int | str], ...]

    @property
    def values(self) -> dict[str, int | str]:
        return dict(self.params)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form: ``{"backend": ..., "target": ..., "params": {...}}``."""
        return {"backend": self.backend, "target": self.target, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OriginalCap":
        """Inverse of :meth:`to_dict`; raises ValueError naming what is wrong."""
        if not isinstance(d, Mapping):
            raise ValueError(f"original cap record must be a mapping, got {type(d).__name__}")
        extra = set(d) - {"backend", "target", "params"}
        if extra:
            raise ValueError(f"original cap record has unknown keys {sorted(extra)}")
        backend, target, params = d.get("backend"), d.get("target"), d.get("params")
        if not isinstance(backend, str) or not backend:
            raise ValueError(f"original cap record: 'backend' must be a non-empty string, got {backend!r}")
        if not isinstance(target, str) or not target:
            raise ValueError(f"original cap record: 'target' must be a non-empty string, got {target!r}")
        if not isinstance(params, Mapping) or not params:
            raise ValueError(f"original cap record: 'params' must be a non-empty mapping, got {params!r}")
        for k, v in params.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, str)):
                raise ValueError(f"original cap record: parameter {k!r}={v!r} must be str -> int|str")
        return cls(backend, target, tuple(sorted(params.items())))


@runtime_checkable
class CapActuator(Protocol):
    """Sets one VR's CPU cap; see the module docstring for the contract."""

    vr: str
    backend: str
    cap_min_percent: float
    cap_max_percent: float
    refresh_s: float

    def read_cap(self) -> float | None: ...

    def set_cap(self, cap_percent: float) -> float: ...

    def original(self) -> OriginalCap | None: ...

    def current_setting(self) -> OriginalCap: ...

    def adopt_original(self, record: OriginalCap) -> None: ...

    def restore(self) -> bool: ...

    def original_from_cap(self, cap_percent: float | None) -> OriginalCap: ...


class _ActuatorBase:
    """Clamping, write-on-change, read-back and original bookkeeping; backends fill in the I/O."""

    backend = "?"

    def __init__(self, vr: str, target: str, cap_min_percent: float, cap_max_percent: float) -> None:
        if not isinstance(vr, str) or not vr:
            raise ValueError(f"VR name must be a non-empty string, got {vr!r}")
        self.vr = vr
        self.target = target
        self.cap_min_percent, self.cap_max_percent = _check_bounds(cap_min_percent, cap_max_percent)
        self._original: OriginalCap | None = None
        #: Number of writes made (for status and tests).
        self.write_count = 0
        #: Seconds a setting read (or read back) is trusted by :meth:`set_cap` instead of reading it again.
        self.refresh_s = DEFAULT_REFRESH_S
        #: Monotonic clock of ``refresh_s``, seconds (injectable for tests).
        self.clock = time.monotonic
        # The setting as last read or read back by set_cap, and when it was last read in full.
        self._known: Params | None = None
        self._known_s = -math.inf

    # --- backend hooks ---------------------------------------------------------
    def _read(self) -> Params:
        raise NotImplementedError

    def _write(self, changes: Params, restoring: bool) -> None:
        raise NotImplementedError

    def _wanted(self, cap_percent: float, current: Params) -> Params:
        raise NotImplementedError

    def _cap_of(self, params: Params) -> float | None:
        raise NotImplementedError

    def _read_back(self, known: Params) -> Params:
        """The setting after a write of ``known``'s quota (default: a full :meth:`_read`)."""
        return self._read()

    def _restore_params(self, original: Params, current: Params) -> Params:
        return {k: v for k, v in original.items() if current.get(k) != v}

    def _check_original(self, params: Params) -> None:
        pass

    def _original_params_for(self, cap_percent: float | None, current: Params) -> Params:
        raise NotImplementedError

    # --- the contract --------------------------------------------------------------
    def read_cap(self) -> float | None:
        """Current cap, percent of one CPU; None when unlimited."""
        return self._cap_of(self._read())

    def set_cap(self, cap_percent: float) -> float:
        """Clamp, write if different from the current setting, return the cap read back.

        Returns
        -------
        float
            The cap now in force, percent of one CPU, as the hypervisor/kernel
            reports it after the write (or without a write when unchanged).
        """
        c = clamp_cap(cap_percent, self.cap_min_percent, self.cap_max_percent)
        known, self._known = self._known, None  # trusted again only once this call has succeeded
        now = self.clock()
        if known is None or self._original is None or now - self._known_s >= self.refresh_s:
            current = self._read()
            self._known_s = now
            if self._original is None:
                self._check_original(current)
                self._original = OriginalCap(self.backend, self.target, tuple(sorted(current.items())))
            wanted = self._wanted(c, current)
            changes = {k: v for k, v in wanted.items() if current.get(k) != v}
        else:
            current = known
            wanted = self._wanted(c, current)
            changes = {k: v for k, v in wanted.items() if current.get(k) != v}
            if not changes:
                # Nothing to write by the remembered setting: check it is still the one in force.
                current = self._read_back(known)
                changes = {k: v for k, v in wanted.items() if current.get(k) != v}
        if changes:
            self._write(changes, restoring=False)
            self.write_count += 1
            current = self._read_back(current)
        got = self._cap_of(current)
        if got is None or not math.isfinite(got) or got <= 0:
            raise ActuatorError(
                f"{self.backend} {self.target!r}: after setting {wanted} the setting reads back as "
                f"{current} (no limit); the cap was not applied"
            )
        self._known = current
        return got

    def original(self) -> OriginalCap | None:
        """The setting found before XTC's first write (None if XTC has not touched this VR)."""
        return self._original

    def current_setting(self) -> OriginalCap:
        """The VR's setting now as a record (one read, nothing written).

        The record the first :meth:`set_cap` would take as the original; raises
        ValueError if the setting found cannot serve as one (e.g. a malformed period).
        """
        current = self._read()
        self._check_original(current)
        return OriginalCap(self.backend, self.target, tuple(sorted(current.items())))

    def adopt_original(self, record: OriginalCap) -> None:
        """Take ``record`` (persisted by an earlier daemon run) as this VR's original.

        Raises ValueError, and changes nothing, if the record belongs to another
        backend or target or its values are not valid for this backend.
        """
        self.check_original(record)
        self._original = record

    def check_original(self, record: OriginalCap) -> None:
        """Raise ValueError if ``record`` is not an original of this VR (nothing read or written).

        The record must be of this backend and target, with values valid for this backend.
        """
        if not isinstance(record, OriginalCap):
            raise TypeError(f"adopt_original needs an OriginalCap, got {type(record).__name__}")
        if record.backend != self.backend or record.target != self.target:
            raise ValueError(
                f"original cap record is for {record.backend} {record.target!r}, "
                f"this actuator is {self.backend} {self.target!r}"
            )
        self._check_original(record.values)

    def original_from_cap(self, cap_percent: float | None) -> OriginalCap:
        """An original record meaning "cap_percent" (None = unlimited) for this VR.

        For a daemon that persisted only a cap in percent: ``adopt_original(
        original_from_cap(c))`` then ``restore()`` gives the VR that cap back
        (quota backends keep the period they find now).  Prefer persisting
        :meth:`original` itself, which restores the exact raw setting.
        """
        if cap_percent is not None:
            if isinstance(cap_percent, bool) or not isinstance(cap_percent, numbers.Real):
                raise TypeError(f"original cap must be a real number or None, got {cap_percent!r}")
            if not math.isfinite(float(cap_percent)) or cap_percent <= 0:
                raise ValueError(f"original cap must be finite and > 0 percent (None = unlimited), got {cap_percent!r}")
        params = self._original_params_for(None if cap_percent is None else float(cap_percent), self._read())
        self._check_original(params)
        return OriginalCap(self.backend, self.target, tuple(sorted(params.items())))

    def restore(self) -> bool:
        """Write the original setting back exactly; forget it afterwards.

        Returns True if something was written, False if the VR was never touched
        or already has its original setting.  Raises VRNotRunning when the VR is
        gone (the original is kept, in case it comes back).
        """
        if self._original is None:
            return False
        orig = self._original.values
        self._known = None
        current = self._read()
        changes = self._restore_params(orig, current)
        if changes:
            self._write(changes, restoring=True)
            self.write_count += 1
            after = self._read()
            wrong = {k: after.get(k) for k in changes if not self._restored_ok(k, orig, after)}
            if wrong:
                raise ActuatorError(
                    f"{self.backend} {self.target!r}: restoring {orig} left {wrong}"
                )
        self._original = None
        return bool(changes)

    def _restored_ok(self, key: str, orig: Params, after: Params) -> bool:
        return after.get(key) == orig.get(key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vr={self.vr!r}, target={self.target!r}, cap=[{self.cap_min_percent:g}, {self.cap_max_percent:g}])"


def _int_param(params: Mapping[str, Any], key: str, where: str) -> int:
    v = params.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ActuatorError(f"{where}: scheduler parameter {key!r} missing or not an integer (got {params})")
    return v


class XenCapActuator(_ActuatorBase):
    """Xen credit scheduler ``cap`` through libvirt.

    ``cap`` is an integer percent of one physical CPU; 0 means UNLIMITED, so
    this actuator writes 0 only when restoring an original 0.  Wanted caps are
    rounded to the nearest integer within the bounds (at least 1).  Writes use
    ``setSchedulerParametersFlags({"cap": n}, VIR_DOMAIN_AFFECT_LIVE)`` and read
    back through ``schedulerParameters()``.

    Parameters
    ----------
    conn : LibvirtConn
    domain : str
        libvirt domain name of the VR.
    cap_min_percent, cap_max_percent : float
        Bounds in percent of one CPU; there must be an integer between them.
    """

    backend = "xen"

    def __init__(self, conn: LibvirtConn, domain: str, cap_min_percent: float = 1.0, cap_max_percent: float = 100.0) -> None:
        super().__init__(domain, domain, cap_min_percent, cap_max_percent)
        self.conn = conn
        self._int_min = max(1, math.ceil(self.cap_min_percent - 1e-9))
        self._int_max = math.floor(self.cap_max_percent + 1e-9)
        if self._int_min > self._int_max:
            raise ValueError(
                f"Xen caps are integers: no integer cap in [{self.cap_min_percent:g}, {self.cap_max_percent:g}]"
            )

    def _read(self) -> Params:
        params = self.conn.with_domain(self.vr, lambda d: d.schedulerParameters(), "read scheduler parameters")
        if "cap" not in params:
            raise ActuatorError(
                f"domain {self.vr!r} has no 'cap' scheduler parameter (has {sorted(params)}): "
                "not a Xen credit-scheduler domain"
            )
        return {"cap": _int_param(params, "cap", f"domain {self.vr!r}")}

    def _wanted(self, cap_percent: float, current: Params) -> Params:
        n = min(max(int(round(cap_percent)), self._int_min), self._int_max)
        return {"cap": n}

    def _cap_of(self, params: Params) -> float | None:
        cap = int(params["cap"])
        return None if cap == 0 else float(cap)

    def _check_original(self, params: Params) -> None:
        cap = params.get("cap")
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0 or set(params) != {"cap"}:
            raise ValueError(f"Xen original must be {{'cap': int >= 0}}, got {params}")

    def _original_params_for(self, cap_percent: float | None, current: Params) -> Params:
        return {"cap": 0 if cap_percent is None else max(1, int(round(cap_percent)))}

    def _write(self, changes: Params, restoring: bool) -> None:
        cap = changes["cap"]
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
            raise ActuatorError(f"refusing to write Xen cap {cap!r} to {self.vr!r}")
        if cap == 0 and not restoring:
            # Defence in depth: 0 would lift every limit.
            raise ActuatorError(f"refusing to write Xen cap 0 (UNLIMITED) to {self.vr!r} outside restore")
        # libvirt refuses a live write on a domain that is not running: no isActive call first.
        self.conn.with_domain(
            self.vr,
            lambda d: d.setSchedulerParametersFlags({"cap": cap}, VIR_DOMAIN_AFFECT_LIVE),
            f"set cap={cap}",
            check_active=False,
        )


def _quota_unlimited(quota: int) -> bool:
    return quota <= 0 or quota >= LIBVIRT_QUOTA_MAX


class LibvirtQuotaActuator(_ActuatorBase):
    """libvirt LXC/QEMU: ``vcpu_quota`` microseconds per ``vcpu_period`` microseconds.

    cap_percent = quota / period * 100.  For LXC the quota limits the whole
    container; for QEMU see :class:`QemuVcpuQuotaActuator`.  Writes use ``setSchedulerParametersFlags``
    with ``VIR_DOMAIN_AFFECT_LIVE``.

    An unlimited original (-1, 0, absent, or a value at or above libvirt's
    maximum 17592186044415, as libvirt reports cgroup v2 ``max``) is restored by
    writing -1, libvirt's "no limit"; any other original is written back as it was.
    """

    backend = "libvirt-quota"

    def __init__(
        self,
        conn: LibvirtConn,
        domain: str,
        cap_min_percent: float = 1.0,
        cap_max_percent: float = 100.0,
        quota_param: str = "vcpu_quota",
        period_param: str = "vcpu_period",
        cfs_period_us: int = 0,
    ) -> None:
        super().__init__(domain, domain, cap_min_percent, cap_max_percent)
        self.conn = conn
        self.quota_param = quota_param
        self.period_param = period_param
        self.cfs_period_us = check_cfs_period(cfs_period_us)

    def _read(self) -> Params:
        return self._params(self.conn.with_domain(self.vr, lambda d: d.schedulerParameters(),
                                                  "read scheduler parameters"))

    def _read_back(self, known: Params) -> Params:
        # One call: the live parameters (libvirt refuses AFFECT_LIVE on a domain not running).
        return self._params(self.conn.with_domain(
            self.vr, lambda d: d.schedulerParametersFlags(VIR_DOMAIN_AFFECT_LIVE), "read live scheduler parameters",
            check_active=False))

    def _params(self, params: Mapping[str, Any]) -> Params:
        where = f"domain {self.vr!r}"
        if self.period_param not in params:
            raise ActuatorError(
                f"{where} has no {self.period_param!r} scheduler parameter (has {sorted(params)})"
            )
        out: Params = {self.period_param: _int_param(params, self.period_param, where)}
        # An absent quota means no limit.
        out[self.quota_param] = _int_param(params, self.quota_param, where) if self.quota_param in params else -1
        return out

    def _wanted(self, cap_percent: float, current: Params) -> Params:
        if self.cfs_period_us:
            return _on_cfs_period(cap_percent, self.cfs_period_us, current, self.quota_param, self.period_param)
        period = int(current[self.period_param])
        if period <= 0:
            raise ActuatorError(f"domain {self.vr!r}: {self.period_param}={period} is not a period")
        return {self.quota_param: quota_for(cap_percent, period)}

    def _cap_of(self, params: Params) -> float | None:
        quota, period = int(params[self.quota_param]), int(params[self.period_param])
        if _quota_unlimited(quota):
            return None
        return quota / period * 100.0

    def _check_original(self, params: Params) -> None:
        _check_quota_period_original(params, self.quota_param, self.period_param, "libvirt quota")

    def _original_params_for(self, cap_percent: float | None, current: Params) -> Params:
        return _quota_period_params(cap_percent, int(current[self.period_param]), self.quota_param, self.period_param)

    def _restore_params(self, original: Params, current: Params) -> Params:
        out: Params = {}
        if current.get(self.period_param) != original[self.period_param]:
            out[self.period_param] = original[self.period_param]
        oq, cq = int(original[self.quota_param]), int(current[self.quota_param])
        if _quota_unlimited(oq):
            if not _quota_unlimited(cq):
                out[self.quota_param] = -1
        elif oq != cq:
            out[self.quota_param] = oq
        return _quota_period_order(out, current, self.quota_param, self.period_param)

    def _restored_ok(self, key: str, orig: Params, after: Params) -> bool:
        if key == self.quota_param and _quota_unlimited(int(orig[key])):
            return _quota_unlimited(int(after[key]))
        return after.get(key) == orig.get(key)

    def _write(self, changes: Params, restoring: bool) -> None:
        for k, v in changes.items():
            if isinstance(v, bool) or not isinstance(v, int):
                raise ActuatorError(f"refusing to write {k}={v!r} to {self.vr!r}")
        if not restoring and self.quota_param in changes:
            q = int(changes[self.quota_param])
            if not QUOTA_MIN_US <= q < LIBVIRT_QUOTA_MAX:
                raise ActuatorError(f"refusing to write {self.quota_param}={q} to {self.vr!r} outside restore")
        if not restoring and self.period_param in changes:
            p = int(changes[self.period_param])
            if not PERIOD_MIN_US <= p <= PERIOD_MAX_US:
                raise ActuatorError(f"refusing to write {self.period_param}={p} to {self.vr!r} outside restore")
        # libvirt refuses a live write on a domain that is not running: no isActive call first.
        self.conn.with_domain(
            self.vr,
            lambda d: d.setSchedulerParametersFlags(dict(changes), VIR_DOMAIN_AFFECT_LIVE),
            f"set {changes}",
            check_active=False,
        )


class QemuVcpuQuotaActuator(LibvirtQuotaActuator):
    """libvirt QEMU/KVM: ``vcpu_quota`` per ``vcpu_period`` on the guest's one vCPU.

    Measured on a real QEMU domain (docs/results/2026-11-26-qemu-cap): ``vcpu_quota`` bounds
    the guest's forwarding by its own CPU, while the emulator thread that moves its packets
    through the taps (the host's share, Dom0's in the paper) runs outside the cap;
    ``global_quota`` would hold the sum of both, so the same cap would leave the VR about half
    the CPU.  ``vcpu_quota`` holds *each* vCPU, so a guest with N vCPUs could use N times the
    cap: such a guest is refused (:class:`ActuatorError`, nothing written).
    """

    def __init__(self, conn: LibvirtConn, domain: str, cap_min_percent: float = 1.0, cap_max_percent: float = 100.0,
                 cfs_period_us: int = 0) -> None:
        super().__init__(conn, domain, cap_min_percent, cap_max_percent, "vcpu_quota", "vcpu_period", cfs_period_us)

    def _read(self) -> Params:
        vcpus = int(self.conn.with_domain(self.vr, lambda d: d.info()[3], "read the vCPU count"))
        if vcpus != 1:
            raise ActuatorError(
                f"domain {self.vr!r} has {vcpus} vCPUs: vcpu_quota holds each vCPU, so a cap would let it "
                f"use {vcpus} times as much; XTC caps QEMU VRs with one vCPU"
            )
        return super()._read()


#: errno values that say a kept file descriptor no longer reaches the file (the cgroup was removed,
#: and perhaps made again): the file is opened again, once.
_STALE_FD = frozenset({errno.ENODEV, errno.EBADF, errno.ENOENT, errno.ESTALE})
#: File descriptors the process keeps below its limit (``RLIMIT_NOFILE``) for everything else.
FD_RESERVE = 512


def _fd_budget() -> int:
    """How many cgroup files the actuators may keep open together (the soft fd limit less a reserve)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):  # pragma: no cover - not Unix
        return 0
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, soft - FD_RESERVE)


class CgroupFileStale(OSError):
    """A kept cgroup file descriptor failed twice in a row with a 'stale' errno (opened again in between)."""


class _CgroupBase(_ActuatorBase):
    #: The file each cap write writes and reads back: kept open (see :meth:`_fd`).
    HOT: str = ""
    #: Cgroup files kept open by all actuators of the process, and the most there may be.
    open_fds = 0
    fd_budget = _fd_budget()

    def __init__(self, cgroup_dir: str | os.PathLike[str], vr: str | None, cap_min_percent: float, cap_max_percent: float) -> None:
        self.dir = Path(cgroup_dir)
        super().__init__(vr or str(self.dir), str(self.dir), cap_min_percent, cap_max_percent)
        # File name -> path string, built once: set_cap reads two files and writes one every time
        # the cap changes, for every VR and period.
        self._paths: dict[str, str] = {}
        # The hot file's descriptor, kept open: a write and its read-back are then a pwrite and a
        # pread (about 2 us) instead of two open/close pairs (about 15 us on the cgroup file system).
        self._fd_hot: int | None = None

    def _file(self, name: str) -> Path:
        return self.dir / name

    def _path(self, name: str) -> str:
        p = self._paths.get(name)
        if p is None:
            p = self._paths[name] = str(self.dir / name)
        return p

    def _fd(self) -> int | None:
        """The hot file's kept descriptor, opened now if needed; None: use open/close (over budget,
        or the file cannot be opened for reading and writing, which the plain path will report)."""
        fd = self._fd_hot
        if fd is not None:
            return fd
        if _CgroupBase.open_fds >= _CgroupBase.fd_budget:
            return None
        try:
            fd = os.open(self._path(self.HOT), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return None
        self._fd_hot = fd
        _CgroupBase.open_fds += 1
        return fd

    def close(self) -> None:
        """Close the kept file descriptor (the next read or write opens it again)."""
        fd, self._fd_hot = self._fd_hot, None
        if fd is not None:
            _CgroupBase.open_fds -= 1
            try:
                os.close(fd)
            except OSError:
                pass

    def _on_kept_fd(self, op: Any) -> Any:
        """``op(fd)`` on the hot file's kept descriptor; raises :class:`LookupError` when there is
        none (the caller opens and closes).  A stale descriptor is closed and the file opened again,
        once; a second stale failure raises :class:`CgroupFileStale`."""
        for attempt in (0, 1):
            fd = self._fd()
            if fd is None:
                raise LookupError
            try:
                if os.fstat(fd).st_nlink == 0:
                    # Removed (a plain file; the cgroup file system answers ENODEV instead).
                    raise OSError(errno.ENOENT, "No such file or directory (removed while kept open)")
                return op(fd)
            except OSError as e:
                if e.errno not in _STALE_FD:
                    raise
                self.close()
                if attempt:
                    raise CgroupFileStale(e.errno, f"{e.strerror} (twice, opened again in between)") from None
        raise AssertionError  # pragma: no cover

    def _read_file(self, name: str) -> str:
        p = self._path(name)
        try:
            if name == self.HOT:
                try:
                    return self._on_kept_fd(lambda fd: os.pread(fd, 4096, 0)).decode().strip()
                except LookupError:
                    pass
            # Plain os calls: a cgroup file is a few bytes, and io.open's buffered text layer cost
            # more than the kernel's read.
            fd = os.open(p, os.O_RDONLY)
            try:
                chunks = []
                while True:
                    b = os.read(fd, 4096)
                    if not b:
                        break
                    chunks.append(b)
            finally:
                os.close(fd)
            return b"".join(chunks).decode().strip()
        except FileNotFoundError:
            if not self.dir.is_dir():
                raise VRNotRunning(self.vr, f"cgroup {self.dir} does not exist") from None
            raise ActuatorError(f"{p} does not exist: no cpu controller in cgroup {self.dir}") from None
        except OSError as e:
            raise ActuatorError(f"cannot read {p}: {e.strerror or e}") from None

    def _write_file(self, name: str, value: str) -> None:
        p = self._path(name)
        data = value.encode()
        try:
            if name == self.HOT:
                try:
                    # The whole value in one write at offset 0, then the length set (what O_TRUNC
                    # did; the cgroup file system ignores it, a plain file needs it).
                    self._on_kept_fd(lambda fd: (os.pwrite(fd, data, 0), os.ftruncate(fd, len(data))))
                    return
                except LookupError:
                    pass
            # One write() call: cgroup files take the whole value at once (O_TRUNC as a shell does).
            fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except FileNotFoundError:
            if not self.dir.is_dir():
                raise VRNotRunning(self.vr, f"cgroup {self.dir} does not exist") from None
            raise ActuatorError(f"{p} does not exist: no cpu controller in cgroup {self.dir}") from None
        except OSError as e:
            hint = " (kernel refused the value)" if e.errno == errno.EINVAL else ""
            raise ActuatorError(f"cannot write {value!r} to {p}: {e.strerror or e}{hint}") from None


def reserve_kept_fd() -> bool:
    """Count one more cgroup file descriptor kept open against the process's budget.

    The budget (:data:`FD_RESERVE` below the soft fd limit) is shared by the actuators' hot files
    and the cgroup backend's CPU-time files (:mod:`xtc.host.cgroup`).  False: the budget is spent,
    open and close the file instead.
    """
    if _CgroupBase.open_fds >= _CgroupBase.fd_budget:
        return False
    _CgroupBase.open_fds += 1
    return True


def release_kept_fd() -> None:
    """Give back a slot taken by :func:`reserve_kept_fd` (the descriptor was closed)."""
    _CgroupBase.open_fds -= 1


#: errno values after which a kept cgroup file descriptor is opened again (see ``_STALE_FD``).
STALE_FD_ERRNOS = _STALE_FD


def _parse_int(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ActuatorError(f"{where}: expected an integer, got {text!r}") from None


class CgroupV1Actuator(_CgroupBase):
    """cgroup v1 cpu controller: ``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``.

    cap_percent = quota / period * 100; quota -1 = no limit.  The period is left
    as found; the original (quota and period) is restored exactly.

    Parameters
    ----------
    cgroup_dir : path
        The VR's cgroup directory, e.g. ``/sys/fs/cgroup/cpu/machine/vr1``.
    vr : str, optional
        VR name for messages (default: the directory).
    """

    backend = "cgroup1"
    QUOTA = "cpu.cfs_quota_us"
    HOT = QUOTA
    PERIOD = "cpu.cfs_period_us"

    def __init__(self, cgroup_dir: str | os.PathLike[str], vr: str | None = None, cap_min_percent: float = 1.0, cap_max_percent: float = 100.0,
                 cfs_period_us: int = 0) -> None:
        super().__init__(cgroup_dir, vr, cap_min_percent, cap_max_percent)
        self.cfs_period_us = check_cfs_period(cfs_period_us)

    def _read(self) -> Params:
        q = _parse_int(self._read_file(self.QUOTA), self._path(self.QUOTA))
        p = _parse_int(self._read_file(self.PERIOD), self._path(self.PERIOD))
        if p <= 0:
            raise ActuatorError(f"{self._file(self.PERIOD)}: period {p} is not > 0")
        return {self.QUOTA: q, self.PERIOD: p}

    def _read_back(self, known: Params) -> Params:
        if self.cfs_period_us:
            return self._read()  # XTC writes the period too
        # The quota only: the kernel reports the quota it accepted; the period is the one read
        # last (XTC never writes it outside restore).
        return {self.QUOTA: _parse_int(self._read_file(self.QUOTA), self._path(self.QUOTA)),
                self.PERIOD: known[self.PERIOD]}

    def _wanted(self, cap_percent: float, current: Params) -> Params:
        if self.cfs_period_us:
            return _on_cfs_period(cap_percent, self.cfs_period_us, current, self.QUOTA, self.PERIOD)
        period = int(current[self.PERIOD])
        return {self.QUOTA: quota_for(cap_percent, period)}

    def _cap_of(self, params: Params) -> float | None:
        q, p = int(params[self.QUOTA]), int(params[self.PERIOD])
        return None if q < 0 else q / p * 100.0

    def _check_original(self, params: Params) -> None:
        _check_quota_period_original(params, self.QUOTA, self.PERIOD, "cgroup v1")

    def _original_params_for(self, cap_percent: float | None, current: Params) -> Params:
        return _quota_period_params(cap_percent, int(current[self.PERIOD]), self.QUOTA, self.PERIOD)

    def _restore_params(self, original: Params, current: Params) -> Params:
        return _quota_period_order(super()._restore_params(original, current), current, self.QUOTA, self.PERIOD)

    def _write(self, changes: Params, restoring: bool) -> None:
        if not restoring and (int(changes.get(self.QUOTA, QUOTA_MIN_US)) < QUOTA_MIN_US
                              or not PERIOD_MIN_US <= int(changes.get(self.PERIOD, PERIOD_MIN_US)) <= PERIOD_MAX_US):
            raise ActuatorError(f"refusing to write {changes} to {self.dir} outside restore")
        # In the order given (_quota_period_order: the lower cap in between first; restoring
        # "no limit", the quota before the period).
        for k, v in changes.items():
            self._write_file(k, str(int(v)))


class CgroupV2Actuator(_CgroupBase):
    """cgroup v2 cpu controller: ``cpu.max`` = ``"<quota_us> <period_us>"`` or ``"max <period_us>"``.

    cap_percent = quota / period * 100.  XTC writes ``"<quota> <period>"`` with
    the period as found; ``restore()`` writes the original line back verbatim.
    """

    backend = "cgroup2"
    FILE = "cpu.max"
    HOT = FILE

    def __init__(self, cgroup_dir: str | os.PathLike[str], vr: str | None = None, cap_min_percent: float = 1.0, cap_max_percent: float = 100.0,
                 cfs_period_us: int = 0) -> None:
        super().__init__(cgroup_dir, vr, cap_min_percent, cap_max_percent)
        self.cfs_period_us = check_cfs_period(cfs_period_us)

    @staticmethod
    def parse_cpu_max(text: str) -> tuple[int | None, int]:
        """``"max 100000"`` -> (None, 100000); ``"20000 100000"`` -> (20000, 100000)."""
        parts = text.split()
        if len(parts) == 1:
            parts.append("100000")  # the kernel accepts a lone quota; period defaults to 100 ms
        if len(parts) != 2:
            raise ValueError(f"cpu.max must be '<quota|max> <period>', got {text!r}")
        q, p = parts
        try:
            period = int(p)
            quota = None if q == "max" else int(q)
        except ValueError:
            raise ValueError(f"cpu.max must be '<quota|max> <period>', got {text!r}") from None
        if period <= 0 or (quota is not None and quota <= 0):
            raise ValueError(f"cpu.max values must be > 0, got {text!r}")
        return quota, period

    def _read(self) -> Params:
        text = self._read_file(self.FILE)
        try:
            self.parse_cpu_max(text)
        except ValueError as e:
            raise ActuatorError(f"{self._file(self.FILE)}: {e}") from None
        return {self.FILE: " ".join(text.split())}

    def _wanted(self, cap_percent: float, current: Params) -> Params:
        if self.cfs_period_us:
            period = period_for(cap_percent, self.cfs_period_us)  # one write sets both
        else:
            _, period = self.parse_cpu_max(str(current[self.FILE]))
        return {self.FILE: f"{quota_for(cap_percent, period)} {period}"}

    def _cap_of(self, params: Params) -> float | None:
        quota, period = self.parse_cpu_max(str(params[self.FILE]))
        return None if quota is None else quota / period * 100.0

    def _check_original(self, params: Params) -> None:
        v = params.get(self.FILE)
        if set(params) != {self.FILE} or not isinstance(v, str):
            raise ValueError(f"cgroup v2 original must be {{'cpu.max': str}}, got {params}")
        self.parse_cpu_max(v)

    def _original_params_for(self, cap_percent: float | None, current: Params) -> Params:
        _, period = self.parse_cpu_max(str(current[self.FILE]))
        if cap_percent is None:
            return {self.FILE: f"max {period}"}
        return {self.FILE: f"{quota_for(cap_percent, period)} {period}"}

    def _write(self, changes: Params, restoring: bool) -> None:
        line = str(changes[self.FILE])
        quota, _ = self.parse_cpu_max(line)
        if not restoring and (quota is None or quota < QUOTA_MIN_US):
            raise ActuatorError(f"refusing to write cpu.max {line!r} to {self.dir} outside restore")
        self._write_file(self.FILE, line)


def make_actuator(
    kind: str,
    vr: str,
    *,
    conn: LibvirtConn | None = None,
    cgroup_dir: str | os.PathLike[str] | None = None,
    cap_min_percent: float = 1.0,
    cap_max_percent: float = 100.0,
    cfs_period_us: int = 0,
) -> CapActuator:
    """Build the actuator for a VR of the given kind.

    Parameters
    ----------
    kind : str
        ``"xen"``, ``"lxc"``, ``"qemu"`` (need ``conn``; ``vr`` is the domain
        name; qemu uses ``vcpu_quota``/``vcpu_period``, the guest's own vCPU, see
        :class:`QemuVcpuQuotaActuator`), ``"cgroup1"``, ``"cgroup2"`` or ``"cgroup"`` (need ``cgroup_dir``;
        ``"cgroup"`` picks v2 if the directory has ``cpu.max``, else v1).
    cfs_period_us : int
        Quota actuators (all but Xen): 0 keeps the CFS period found (the default); otherwise the
        period written with each quota, doubled where the quota would be under 1 ms
        (:func:`period_for`).  Xen has no such period: anything but 0 is refused there.
    """
    if kind in ("xen", "lxc", "qemu"):
        if conn is None:
            raise ValueError(f"actuator kind {kind!r} needs a libvirt connection")
        if kind == "xen":
            if cfs_period_us:
                raise ValueError("Xen's credit scheduler has no CFS period: cfs_period_us must be 0 with Xen")
            return XenCapActuator(conn, vr, cap_min_percent, cap_max_percent)
        if kind == "lxc":
            return LibvirtQuotaActuator(conn, vr, cap_min_percent, cap_max_percent, cfs_period_us=cfs_period_us)
        return QemuVcpuQuotaActuator(conn, vr, cap_min_percent, cap_max_percent, cfs_period_us=cfs_period_us)
    if kind in ("cgroup", "cgroup1", "cgroup2"):
        if cgroup_dir is None:
            raise ValueError(f"actuator kind {kind!r} needs cgroup_dir")
        if kind == "cgroup":
            kind = "cgroup2" if (Path(cgroup_dir) / CgroupV2Actuator.FILE).exists() else "cgroup1"
        cls = CgroupV2Actuator if kind == "cgroup2" else CgroupV1Actuator
        return cls(cgroup_dir, vr, cap_min_percent, cap_max_percent, cfs_period_us)
    raise ValueError(
        f"unknown actuator kind {kind!r}; expected xen, lxc, qemu, cgroup, cgroup1 or cgroup2"
    )
