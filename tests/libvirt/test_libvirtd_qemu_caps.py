"""The lab's libvirtd keeps its cached QEMU capabilities where ``/dev/kvm`` is not a stock KVM.

On a host whose ``/dev/kvm`` is e.g. a PVM device, QEMU (probed by libvirt) can use the device
while libvirt's own check (as ``libvirt-qemu``) cannot; libvirt then finds its cached capabilities
outdated on every lookup and probes QEMU again (about 5 s each, several per domain start: most of
``test_qemu_vr``'s time).  The lab hides such a device from the libvirtd it starts
(:func:`xtc_lab.lab.libvirtd.kvm_to_hide`).

The test runs the lab's real adapter and a real libvirtd in a mount and PID namespace of their
own, with tmpfs over /run and libvirt's directories, so it shares nothing with the host's
libvirtd; everything it started dies with the namespace.  It looks the domain capabilities up
three times and asserts that the cache file written by the first lookup is not rewritten by the
next two.  Skips on a host with a stock KVM or none (nothing is hidden there).
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
from xtc_lab.lab.libvirtd import Libvirtd
daemon = Libvirtd(uri="qemu:///system", start_timeout_s=90)
daemon._prepare_host()
qdir = Path("/var/lib/libvirt/qemu")
qdir.mkdir(parents=True)
subprocess.run(["chown", "libvirt-qemu:libvirt-qemu", str(qdir)], check=True)
out = {"lookups": []}
try:
    daemon.ensure_running()
    out["started_s"] = round(time.monotonic() - t0, 1)
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
    from xtc_lab.lab.libvirtd import kvm_to_hide

    for need in (QEMU, Path("/usr/sbin/libvirtd"), Path("/usr/sbin/virtlogd")):
        if not need.exists():
            pytest.skip(f"{need} is not installed")
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    if not kvm_to_hide(Path("/dev/kvm"), Path("/sys/module"), env={}):
        pytest.skip("/dev/kvm is a stock KVM or missing here: the lab hides nothing, libvirt's cache holds anyway")
    # sh is the namespace's init: it reaps what libvirt leaves to it (QEMU probes run daemonized);
    # python as PID 1 would not, and libvirt would wait 40 s for each killed probe to go.
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc",
                        "--kill-child", "--", "sh", "-c", '"$@" & wait $!', "sh", sys.executable, "-c", CHILD],
                       capture_output=True, text=True, timeout=170, check=False,
                       env={k: v for k, v in os.environ.items() if k != "XTC_QEMU_ACCEL"})
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    first, *later = out["lookups"]
    assert len(first) == 1, out  # one cache file for the binary, written by the first lookup (or at start)
    assert all(files == first for files in later), f"libvirt rewrote its QEMU capabilities cache: {out}"
