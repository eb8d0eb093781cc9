"""The base of every cap actuator: the contract, the original-setting record and the
write-on-change logic, written once.

:class:`CapActuator` is the contract (described in full in :mod:`xtc.host.actuators`, the public
face); :class:`OriginalCap` the record of a VR's setting before XTC touched it; ``ActuatorBase``
the clamp, write-on-change, read-back and original bookkeeping that every backend shares (the
backends, :mod:`xtc.host.libvirt_actuators` and :mod:`xtc.host.cgroup_actuators`, fill in the I/O);
and the pure quota-and-period arithmetic of the quota backends (:func:`quota_for`,
:func:`period_for`, :func:`check_cfs_period`).
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, runtime_checkable

from xtc.host.errors import ActuatorError

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


def quota_period_order(changes: Params, current: Params, quota_key: str, period_key: str) -> Params:
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


def quota_period_params(cap_percent: float | None, period_us: int, quota_key: str, period_key: str) -> Params:
    """A quota-and-period setting of ``cap_percent`` (None: no limit, quota -1) on ``period_us``."""
    return {quota_key: -1 if cap_percent is None else quota_for(cap_percent, period_us), period_key: period_us}


def on_cfs_period(cap_percent: float, cfs_period_us: int, current: Params, quota_key: str, period_key: str) -> Params:
    """The quota and period of ``cap_percent`` on :func:`period_for`'s period, in the order to write them."""
    return quota_period_order(quota_period_params(cap_percent, period_for(cap_percent, cfs_period_us), quota_key,
                                                    period_key), current, quota_key, period_key)


def check_quota_period_original(params: Params, quota_key: str, period_key: str, what: str) -> None:
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


class ActuatorBase:
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

