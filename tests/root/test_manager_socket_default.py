"""The manager API's default endpoints, on a real daemon: only root (and the ``xtc`` group) reach
them, so a peer that may not connect cannot grow the daemon's memory (issue 51 item 2, issue 45
item 4).

libzmq cannot bound what one connected peer makes it hold: a message is buffered until its last
frame, its pipes count whole messages (RCVHWM) and ZMQ_MAXMSGSIZE bounds one frame
(docs/guide/manager-api-security.md has the measurements).  So the bound is who may connect.  The
daemon runs as root in a mount and network namespace of its own (a tmpfs on /run, so /run/xtc is
this test's; its own loopback, so a TCP port collides with nothing), with a configuration that
names no endpoint: the defaults.  A hostile peer (:mod:`zmtp_peer`) runs as ``nobody`` in those
namespaces and sends 1,000 frames of 1 MiB, MORE set, on the request socket and 500 on the
samples socket.  Before this change (default tcp://127.0.0.1:7700) the daemon's RSS grew by
about 1 GB; the bound stated here is 64 MiB.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import zmtp_peer
from hostneeds import reachable_by_other_users
from procs import DaemonProc

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.timeout(120)]

#: What the hostile peers may make the daemon hold, at most (RSS growth), bytes.
RSS_BOUND_BYTES = 64 << 20
NOBODY = 65534
PEER_SOURCE = Path(zmtp_peer.__file__).read_text()
REPO = Path(__file__).resolve().parents[2]

CONFIG = """schema = "xtc-daemon/1"
[daemon]
backend = "sim"
control_period_s = 0.5
state_dir = "{state}"
[metrics]
enabled = false
[log]
format = "json"
[sim]
seed = 1
[[sim.vr]]
name = "vr1"
offered_pps = 30000
"""


def _need() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: runs the daemon in a mount and network namespace of its own")
    for tool in ("unshare", "nsenter", "setpriv", "ip"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


@pytest.fixture(scope="module", autouse=True)
def _checkout_reachable_by_other_users():
    """``nobody`` runs this checkout's code: it must reach it (for this module only)."""
    with reachable_by_other_users(REPO):
        yield


def _need_nobody_runs_xtc() -> None:
    """Skip unless ``nobody`` can run this checkout's python and import the daemon (a checkout or a
    python under a private home directory cannot be)."""
    r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c",
                        "import xtc.daemon.service, xtc_lab.sim.host"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, cwd="/")
    if r.returncode != 0:
        pytest.skip(f"the user nobody cannot run this checkout's python: {r.stderr.strip().splitlines()[-1:]}")


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


class NamespacedDaemon(DaemonProc):
    """``xtc daemon`` as root in new mount and network namespaces (tmpfs /run, loopback up)."""

    def __init__(self, config: Path):
        script = 'mount -t tmpfs -o mode=0755 tmpfs /run && ip link set lo up && exec "$@"'
        super().__init__(config, wrapper=["unshare", "--mount", "--net", "--", "sh", "-c", script, "sh"])

    def started(self, timeout_s: float = 20.0) -> dict:
        return self.wait_event("started", timeout_s)

    def inside(self, argv: list[str], user: int | None = None, timeout_s: float = 60) -> subprocess.CompletedProcess:
        """Run ``argv`` in the daemon's namespaces (as ``user``, no groups, when given)."""
        drop = [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
        return subprocess.run(["nsenter", "-t", str(self.proc.pid), "--mount", "--net", "--", *drop, *argv],
                              capture_output=True, text=True, timeout=timeout_s)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        rc = self.proc.wait(10)
        self._t.join(5)
        return rc


def test_a_peer_that_may_not_connect_cannot_grow_the_daemons_memory(tmp_path):
    _need()
    cfg = tmp_path / "xtcd.toml"
    cfg.write_text(CONFIG.format(state=tmp_path / "state"))
    d = NamespacedDaemon(cfg)
    try:
        started = d.started()
        endpoints = {"REQ": started["endpoint"], "SUB": started["pub_endpoint"]}
        time.sleep(0.5)
        base = _rss_bytes(d.proc.pid)
        peak, answers = base, {}
        for kind, frames in (("REQ", 1000), ("SUB", 500)):
            peer = subprocess.Popen(
                ["nsenter", "-t", str(d.proc.pid), "--mount", "--net", "--", "setpriv", f"--reuid={NOBODY}",
                 f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c", PEER_SOURCE,
                 endpoints[kind], kind, str(frames), "1.5"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            while peer.poll() is None:
                peak = max(peak, _rss_bytes(d.proc.pid))
                time.sleep(0.05)
            peak = max(peak, _rss_bytes(d.proc.pid))
            answers[kind] = peer.stdout.read().strip() if peer.stdout else ""
        grown = peak - base
        print(f"RSS growth under the peers: {grown / 2**20:.1f} MiB; peers: {answers}")
        assert grown < RSS_BOUND_BYTES, (f"the daemon's RSS grew by {grown / 2**20:.0f} MiB (bound "
                                         f"{RSS_BOUND_BYTES >> 20} MiB) under peers as nobody: {answers}, {endpoints}")
        # The defaults, and nobody was turned away by the socket's mode (not a missing file).
        assert endpoints == {"REQ": "ipc:///run/xtc/manager.sock", "SUB": "ipc:///run/xtc/samples.sock"}
        assert all("Permission denied" in a for a in answers.values()), answers
        modes = d.inside(["/usr/bin/python3", "-c", "import os, grp, json; print(json.dumps({p: [oct(os.stat(p).st_mode "
                          "& 0o777), os.stat(p).st_uid, os.stat(p).st_gid] for p in ('/run/xtc', '/run/xtc/manager.sock', "
                          "'/run/xtc/samples.sock')}))"])
        got = json.loads(modes.stdout)
        try:
            import grp

            gid = grp.getgrnam("xtc").gr_gid
            want = {"/run/xtc": ["0o750", 0, gid], "/run/xtc/manager.sock": ["0o660", 0, gid],
                    "/run/xtc/samples.sock": ["0o660", 0, gid]}
        except KeyError:  # no xtc group on this host: root only
            want = {"/run/xtc": ["0o700", 0, 0], "/run/xtc/manager.sock": ["0o600", 0, 0],
                    "/run/xtc/samples.sock": ["0o600", 0, 0]}
        assert got == want
        # Root reaches the default endpoint with `xtc ctl` and no endpoint given.
        ping = d.inside([sys.executable, "-m", "xtc.cli", "ctl", "ping"])
        assert ping.returncode == 0 and "daemon at ipc:///run/xtc/manager.sock" in ping.stdout, ping
        assert d.proc.poll() is None
    finally:
        rc = d.stop()
    assert rc == 0, "".join(d.raw[-20:])


def test_a_user_who_cannot_create_run_xtc_gets_one_line(tmp_path):
    """The defaults as a normal user: one line naming the directory and the way out, nothing bound."""
    _need()
    _need_nobody_runs_xtc()
    work = Path(tempfile.mkdtemp(prefix="xtc-mgrsock-"))
    try:
        os.chmod(work, 0o755)
        (work / "state").mkdir()
        os.chown(work / "state", NOBODY, NOBODY)
        cfg = work / "xtcd.toml"
        cfg.write_text(CONFIG.format(state=work / "state"))
        script = 'mount -t tmpfs -o mode=0755 tmpfs /run && exec "$@"'
        r = subprocess.run(["unshare", "--mount", "--", "sh", "-c", script, "sh", "setpriv", f"--reuid={NOBODY}",
                            f"--regid={NOBODY}", "--clear-groups", sys.executable, "-m", "xtc.cli", "daemon",
                            "--config", str(cfg)], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "Traceback" in ln or "xtc daemon:" in ln]
        assert r.returncode != 0
        assert lines == ["xtc daemon: cannot create directory /run/xtc for manager.endpoint ipc:///run/xtc/manager.sock: "
                         "Permission denied (run as root, or set [manager] endpoint and pub_endpoint to ipc:// paths "
                         "this user may write, as packaging/xtc-daemon-sim.toml does)"], r.stdout + r.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_quick_start_runs_as_a_normal_user():
    """README's quick start as ``nobody``: the sim example's sockets are the user's own (0600)."""
    _need()
    _need_nobody_runs_xtc()
    # The example's sockets are under /tmp: a tmpfs over /tmp in the test's own mount namespace keeps
    # them apart from the host's.  A checkout (or its venv) under /tmp, as CI's clone under mktemp -d,
    # is bound aside first and back into the tmpfs, so that the commands still find it.
    tops = sorted({Path(*Path(p).resolve().parts[:3]) for p in (REPO, sys.executable, sys.prefix)
                   if Path(p).resolve().is_relative_to("/tmp")})
    if len(tops) > 1:
        pytest.skip(f"the checkout and its python lie under two directories of /tmp: {tops}")
    keep = (f"mount --bind {tops[0]} /mnt && mount -t tmpfs -o mode=1777 tmpfs /tmp && "
            f"mkdir -p {tops[0]} && mount --bind /mnt {tops[0]} && ") if tops else \
        "mount -t tmpfs -o mode=1777 tmpfs /tmp && "
    sim = REPO / "packaging" / "xtc-daemon-sim.toml"
    # Each command as nobody (setpriv drops root only at its exec, so the venv's python is found).
    x = f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups {sys.executable} -m xtc.cli"
    script = (keep + 'ip link set lo up && '
              f'{{ {x} daemon -c {sim} >/tmp/daemon.log 2>&1 & pid=$!; }} && '
              f'for i in $(seq 100); do {x} ctl -c {sim} ping >/dev/null 2>&1 && break; sleep 0.2; done; '
              f'{x} ctl -c {sim} activate vr1 30k && {x} ctl -c {sim} status vr1 && '
              f'stat -c "%a %U" /tmp/xtc-sim/manager.sock /tmp/xtc-sim/samples.sock; '
              f'kill -TERM $pid; wait $pid; echo "rc=$?"; cat /tmp/daemon.log')
    r = subprocess.run(["unshare", "--mount", "--net", "--", "sh", "-c", script], capture_output=True, text=True,
                       timeout=90, env={**os.environ, "PYTHONPATH": str(REPO)})
    out = r.stdout
    assert "vr1" in out and "active" in out, out + r.stderr
    assert "600 nobody\n600 nobody\n" in out and "rc=0" in out, out + r.stderr
