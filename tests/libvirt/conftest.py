"""Fixtures for tests against a real libvirtd with real LXC VRs forwarding real packets.

* ``libvirtd`` (session): makes sure a libvirtd serving ``lxc:///`` runs (reuses a running
  one, or starts one the way the host lab needs, see ``xtc_lab.lab.libvirtd``) and holds a shared
  lease on it.  At the end of the session it stops the daemon only if the lab started it, no
  other process holds a lease and no domain runs; set ``XTC_LAB_KEEP_LIBVIRTD=1`` to keep it.
* ``daemons`` (function): a list the test adds the ``xtc daemon`` processes it starts to
  (``procs.started_daemon(cfg, daemons)``); every one is killed after the test, also when it fails.
* ``vr_lab`` (function): a factory ``vr_lab(n_vrs=1, work_iters=0, vcpu_quota_us=-1)`` that
  returns a :class:`xtc_lab.lab.netlab.NetLab` with ``n_vrs`` LXC VRs (``lab.vrs``), each between
  its own generator and receiver namespaces.  Every lab made is torn down after the test,
  also when it fails; labs left behind by a crashed run are removed when the session starts.

Both skip, with the reason, when not run as root or when libvirt is not installed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from procs import DaemonProc


def require_lab_host() -> None:
    """Skip the calling test unless this host can run the LXC lab (the reason is the lab's own)."""
    from xtc_lab.lab.harness import lab_host_problem

    problem = lab_host_problem("lxc")
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def libvirtd() -> Iterator[object]:
    """A running libvirtd accepting ``lxc:///`` (an ``xtc_lab.lab.libvirtd.Libvirtd``)."""
    require_lab_host()
    from xtc_lab.lab.libvirtd import Libvirtd
    from xtc_lab.lab.netlab import teardown_orphans

    teardown_orphans()  # labs left by runs that crashed (never those of live processes)
    daemon = Libvirtd()
    with daemon.lease():
        yield daemon
    if os.environ.get("XTC_LAB_KEEP_LIBVIRTD") != "1":
        daemon.stop_if_unused()


@pytest.fixture
def daemons() -> Iterator[list[DaemonProc]]:
    """The daemon processes started by the test: all killed at the end."""
    procs: list[DaemonProc] = []
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()


@pytest.fixture
def vr_lab(libvirtd: object) -> Iterator[Callable[..., object]]:
    """Factory of labs with LXC VRs; everything it made is removed after the test."""
    from xtc_lab.lab.netlab import NetLab

    labs: list[NetLab] = []

    def make(n_vrs: int = 1, work_iters: int = 0, vcpu_quota_us: int = -1, prefix: str | None = None) -> NetLab:
        lab = NetLab(prefix=prefix, uri=libvirtd.uri)  # type: ignore[attr-defined]
        labs.append(lab)  # before building: a half-built lab is removed too
        for _ in range(n_vrs):
            lab.add_vr(work_iters=work_iters, vcpu_quota_us=vcpu_quota_us)
        return lab

    try:
        yield make
    finally:
        errors = []
        for lab in labs:
            try:
                lab.teardown()
            except Exception as e:  # noqa: BLE001 - tear down the others, then report
                errors.append(f"{lab.prefix}: {e}")
        if errors:
            raise RuntimeError("lab teardown failed: " + "; ".join(errors))
