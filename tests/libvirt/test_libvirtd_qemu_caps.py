"""The libvirtd the lab starts keeps its cached QEMU capabilities from one lookup to the next.

libvirt probes QEMU with CAP_DAC_OVERRIDE, so QEMU opens ``/dev/kvm`` (root:kvm 0660) and reports
KVM; its cache's validity check asks whether ``libvirt-qemu`` may open ``/dev/kvm``.  A
``libvirt-qemu`` outside the group ``kvm`` (as the lab used to create it) makes every cached
probe outdated: QEMU is probed again on each lookup (about 5 s, several times per domain start:
most of ``test_qemu_vr``'s time).  The lab's adapter makes ``libvirt-qemu`` a member of ``kvm``,
as Debian's libvirt-daemon-system does (a change to the host's accounts, like the user itself).

The test runs the lab's real adapter and a real libvirtd in a mount and PID namespace of their
own, with tmpfs over /run and libvirt's directories, so it shares nothing with the host's
libvirtd; everything it started dies with the namespace.  The daemon runs under another name
(``xtccaps-libvirt``): a lab started meanwhile elsewhere on the host, which looks for a process
named ``libvirtd``, does not take it for a foreign daemon.  It looks the domain capabilities up
three times and asserts that the cache file written at the start is not rewritten.  Skips on a
host without ``/dev/kvm`` or a ``kvm`` group (no KVM: nothing to disagree about).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.beside, pytest.mark.timeout(180)]

QEMU = Path("/usr/bin/qemu-system-x86_64")
CHILD = r"""
import json, os, subprocess, sys, time
t0 = time.monotonic()
from pathlib import Path
for d in ("/run", "/var/cache/libvirt", "/var/lib/libvirt", "/var/log/libvirt", "/etc/libvirt"):
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", d], check=True)
import libvirt
from xtc_lab.lab.libvirtd import Libvirtd, LibvirtdPaths
# Under another name: a lab elsewhere on the host looks for a process named libvirtd and would
# take this one, whose socket it cannot see, for a foreign daemon.
Path("/run/xtccaps-libvirtd").symlink_to("/usr/sbin/libvirtd")
daemon = Libvirtd(uri="qemu:///system", paths=LibvirtdPaths(libvirtd=Path("/run/xtccaps-libvirtd")),
                  start_timeout_s=90)
daemon._prepare_host()
qdir = Path("/var/lib/libvirt/qemu")
qdir.mkdir(parents=True)
subprocess.run(["chown", "libvirt-qemu:libvirt-qemu", str(qdir)], check=True)
out = {"lookups": []}
try:
    daemon.ensure_running()
    out["started_s"] = round(time.monotonic() - t0, 1)
    out["comm"] = sorted(Path(f"/proc/{p}/comm").read_text().strip() for p in os.listdir("/proc") if p.isdigit()
                         and Path(f"/proc/{p}/comm").exists())
    conn = libvirt.open("qemu:///system")
    caps = Path("/var/cache/libvirt/qemu/capabilities")
    for _ in range(3):
        conn.getDomainCapabilities("/usr/bin/qemu-system-x86_64", "x86_64", None, "qemu", 0)
        files = {}
        for f in sorted(caps.glob("*.xml")):
            if "<emulator>/usr/bin/qemu-system-x86_64</emulator>" in f.read_text():
                st = f.stat()
                files[f.name] = [st.st_ino, st.st_mtime_ns]
        out["lookups"].append(files)
        out.setdefault("lookup_s", []).append(round(time.monotonic() - t0, 1))
    conn.close()
finally:
    out["stopped"] = daemon.stop()
    out["stopped_s"] = round(time.monotonic() - t0, 1)
print(json.dumps(out))
"""


def test_lab_libvirtd_does_not_probe_qemu_again_on_each_lookup() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: starts a libvirtd in namespaces of its own")
    pytest.importorskip("libvirt", reason="libvirt-python not installed")
    import grp

    for need in (QEMU, Path("/usr/sbin/libvirtd"), Path("/usr/sbin/virtlogd")):
        if not need.exists():
            pytest.skip(f"{need} is not installed")
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    try:
        grp.getgrnam("kvm")
    except KeyError:
        pytest.skip("no group kvm on this host")
    if not Path("/dev/kvm").exists():
        pytest.skip("no /dev/kvm on this host: libvirt's KVM check and its probe cannot disagree")
    # sh is the namespace's init: it reaps what libvirt leaves to it (QEMU probes run daemonized);
    # python as PID 1 would not, and libvirt would wait 40 s for each killed probe to go.
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc",
                        "--kill-child", "--", "sh", "-c", '"$@" & wait $!', "sh", sys.executable, "-c", CHILD],
                       capture_output=True, text=True, timeout=170, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    first, *later = out["lookups"]
    assert len(first) == 1, out  # one cache file for the binary, written by the first lookup (or at start)
    assert all(files == first for files in later), f"libvirt rewrote its QEMU capabilities cache: {out}"
    assert "libvirt-qemu" in grp.getgrnam("kvm").gr_mem
    assert "xtccaps-libvirt" in out["comm"] and "libvirtd" not in out["comm"], out["comm"]
