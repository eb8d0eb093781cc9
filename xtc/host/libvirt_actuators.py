"""The libvirt cap actuators: Xen's credit-scheduler ``cap`` and the ``vcpu_quota`` /
``vcpu_period`` of LXC and QEMU domains (the contract: :mod:`xtc.host.actuators`)."""

from __future__ import annotations

import math
from typing import Any, Mapping

from xtc.host.actuator_base import (LIBVIRT_QUOTA_MAX, PERIOD_MAX_US, PERIOD_MIN_US, QUOTA_MIN_US, Params,
    ActuatorBase, check_quota_period_original, on_cfs_period, quota_period_order, quota_period_params,
    check_cfs_period, quota_for)
from xtc.host.errors import ActuatorError
from xtc.host.libvirt_conn import VIR_DOMAIN_AFFECT_LIVE, LibvirtConn


def _int_param(params: Mapping[str, Any], key: str, where: str) -> int:
    v = params.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ActuatorError(f"{where}: scheduler parameter {key!r} missing or not an integer (got {params})")
    return v


class XenCapActuator(ActuatorBase):
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


class LibvirtQuotaActuator(ActuatorBase):
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
            return on_cfs_period(cap_percent, self.cfs_period_us, current, self.quota_param, self.period_param)
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
        check_quota_period_original(params, self.quota_param, self.period_param, "libvirt quota")

    def _original_params_for(self, cap_percent: float | None, current: Params) -> Params:
        return quota_period_params(cap_percent, int(current[self.period_param]), self.quota_param, self.period_param)

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
        return quota_period_order(out, current, self.quota_param, self.period_param)

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

