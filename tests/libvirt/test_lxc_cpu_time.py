"""The libvirt backend's CPU time on a real LXC VR under a real libvirtd (root + libvirt).

A busy loop inside an LXC VR whose ``vcpu_quota`` is 20% of one CPU must show about 20% of one CPU
in :meth:`LibvirtBackend.read_cpu_ns` over 2 s, the same as the kernel's account of the busy
process itself, while an uncapped busy process outside the VR burns a whole CPU (a reading that
counted the whole host would show more than 1.0; one that is always 0 shows 0).

The busy loop is the lab's CPU hog at 100% (:func:`xtc_lab.lab.hog.hog_in_vr`; the VR's
forwarder idles without traffic).  It joins the domain's groups in the cpu *and* the cpuacct
hierarchies (mounted apart on this host), as a task started inside the domain is: libvirt's LXC
driver reads the CPU time from the domain's cpuacct group, so a hog in the cpu group only would
be capped but not counted.

libvirt 9.0's LXC driver has no bulk domain stats (``VIR_ERR_NO_SUPPORT`` for
``virDomainListGetStats``): the backend asks each domain (``virDomainGetInfo``), and the test
says so, so that a libvirt that gains the bulk call shows up here.

Run under the host's measurement lock: ``flock /run/xtc/lab-measure.lock pytest tests/libvirt/...``.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from xtc.host.counters import NetlinkCounters
from xtc.host.libvirt import LibvirtBackend
from xtc.host.libvirt_conn import LibvirtConn

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.timeout(120)]

QUOTA_US = 20_000  # of the default 100 ms period: 20% of one CPU
WINDOW_S = 2.0


def _busy_outside() -> subprocess.Popen[bytes]:
    """A busy loop where this process is (outside every VR): a whole CPU."""
    p = subprocess.Popen([sys.executable, "-c", "import sys\nprint('ready', flush=True)\nwhile True: pass\n"],
                         stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    return p


def test_a_busy_lxc_vr_capped_at_20_percent_shows_20_percent_of_one_cpu(vr_lab, libvirtd) -> None:
    from xtc_lab.lab.hog import hog_in_vr

    lab = vr_lab(n_vrs=1, vcpu_quota_us=QUOTA_US)
    vr = lab.vrs[0]
    host = LibvirtBackend(LibvirtConn(uri=libvirtd.uri), "lxc", (), NetlinkCounters())
    outside = None
    try:
        assert vr.name in host.list_vrs()
        with hog_in_vr(lab, vr, 100.0) as hog:
            assert hog.accounting is not None  # cpuacct apart from cpu here: the hog joined both
            outside = _busy_outside()
            time.sleep(0.5)
            r0, p0, t0 = host.read_cpu_ns([vr.name, "xtct-no-such-domain"]), hog.cpu_seconds(), time.monotonic()
            time.sleep(WINDOW_S)
            r1, p1, t1 = host.read_cpu_ns([vr.name]), hog.cpu_seconds(), time.monotonic()
            # Cost of one read (one domain), while the VR still runs.
            n = 50
            c0 = time.perf_counter()
            for _ in range(n):
                host.read_cpu_ns([vr.name])
            per_read_ms = (time.perf_counter() - c0) / n * 1e3
    finally:
        if outside is not None:
            outside.kill()
            outside.wait()
        host.close()
    assert set(r0) == {vr.name}  # a name that is no domain is left out
    share = (r1[vr.name] - r0[vr.name]) / 1e9 / (t1 - t0)
    own = (p1 - p0) / (t1 - t0)
    print(f"\nLXC VR at vcpu_quota {QUOTA_US} us / 100 ms: read_cpu_ns shows {100 * share:.1f}% of one CPU; "
          f"the hog's own CPU time {100 * own:.1f}%; bulk stats: {host.conn.bulk_stats}; "
          f"one read (1 domain) {per_read_ms:.2f} ms")
    assert 0.10 <= share <= 0.26, share  # ~ the cap; never 0, never the whole host (> 1 here)
    assert share == pytest.approx(own, abs=0.04)  # the VR's time is its hog's (10 ms ticks, idle forwarder)
    assert host.conn.bulk_stats is False  # libvirt 9.0's LXC driver: one info() per domain
