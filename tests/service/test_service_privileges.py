"""The privileges the units give are enough, on the real kernel.

* The daemon (xtc-daemon.service: uid 0, ``CapabilityBoundingSet=`` empty) run as uid 0 with an
  empty bounding set and no capability at all caps a VR through its real cgroup v1 directory
  (``cpu.cfs_quota_us``) and gives it back its original setting at SIGTERM.
* The XCo agent (xtc-xco-agent.service: user xtc, ``CAP_NET_ADMIN CAP_NET_RAW`` ambient) run as
  ``nobody`` with only those two capabilities takes a real uplink over (its HTB root), says
  READY=1, restores the uplink at SIGTERM, and its ``--cleanup`` runs too.  It has the unit's
  ``NUMBA_CACHE_DIR``: without it, a user who cannot write the product's directory cannot even
  import the agent (numba's ``cache=True`` kernels: "no locator available"), which this test
  found.

Both run with ``setpriv`` (util-linux), which sets up what systemd would: the user, the bounding
and ambient sets; /proc/PID/status proves the process had nothing more.  Needs root (to create the
cgroup and the namespace, and to drop to those privileges); the namespace ``xtcpv<pid>`` with its
veth pair (198.18.24.0/24) and the cgroup ``xtcpv<pid>`` are removed at the end, also on failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hostneeds import reachable_by_other_users
from procs import daemon_config, stop_process, wait_for

from xtc.daemon.ctl import ManagerClient

ROOT = Path(__file__).resolve().parents[2]
XCO_DATA = ROOT / "tests" / "xco" / "data"
V1_CPU = Path("/sys/fs/cgroup/cpu")
CAP_NET_ADMIN, CAP_NET_RAW = 12, 13

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.timeout(90)]


@pytest.fixture(scope="module", autouse=True)
def _checkout_reachable_by_other_users():
    """The unprivileged users these tests run the checkout's code as must reach it (for this module
    only)."""
    with reachable_by_other_users(ROOT):
        yield


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: makes a cgroup and a network namespace, then drops to the units' privileges")
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux)")


def _caps(pid: int) -> dict[str, int]:
    st = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    out = {k: int(st[k].strip(), 16) for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")}
    out["uid"] = int(st["Uid"].split()[1])  # effective
    return out


def _ready(notify: socket.socket, proc: subprocess.Popen, who: str) -> None:
    """Wait for the service's READY=1 on ``notify``; on a timeout stop it and fail with its output."""
    try:
        msg = notify.recv(4096).decode()
    except TimeoutError:
        stop_process(proc)
        raise AssertionError(f"no READY=1 from the {who}; its output:\n{proc.stdout.read() if proc.stdout else ''}")
    assert "READY=1" in msg, msg


def _loopback_traffic(stop: threading.Event, port: int) -> None:
    """About 4000 datagrams/s to 127.0.0.1 (the test VR's interface is lo): a rate far above the
    setpoint, so that the daemon lowers the cap."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        while not stop.is_set():
            for _ in range(40):
                s.sendto(b"x", ("127.0.0.1", port))
            time.sleep(0.01)


def test_daemon_caps_a_cgroup_with_no_capability(tmp_path: Path) -> None:
    _need_root()
    if not (V1_CPU / "cpu.cfs_quota_us").exists():
        pytest.skip("no cgroup v1 cpu hierarchy with CFS bandwidth control at /sys/fs/cgroup/cpu")
    cg = V1_CPU / f"xtcpv{os.getpid()}"
    cg.mkdir()
    stop = threading.Event()
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    traffic = threading.Thread(target=_loopback_traffic, args=(stop, sink.getsockname()[1]), daemon=True)
    proc = None
    try:
        original = (cg / "cpu.cfs_quota_us").read_text().strip()
        assert original == "-1"
        cfg = daemon_config(tmp_path, "cgroup", f"""[log]
format = "json"
[[cgroup.vr]]
name = "vr1"
path = "{cg}"
interfaces = ["lo"]
""", period_s=0.5)
        traffic.start()
        proc = subprocess.Popen(["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--",
                                 sys.executable, "-m", "xtc.cli", "daemon", "--config", str(cfg)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        with ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=20) as c:
            c.call("ping")
            caps = _caps(proc.pid)
            assert caps == {"CapEff": 0, "CapPrm": 0, "CapBnd": 0, "CapAmb": 0, "uid": 0}, caps
            c.call("activate", vr="vr1", setpoint_pps=100.0)
            wait_for(lambda: int((cg / "cpu.cfs_quota_us").read_text()) > 0, 15, "the daemon to cap the cgroup")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, out
        assert (cg / "cpu.cfs_quota_us").read_text().strip() == original, out
    finally:
        stop.set()
        if traffic.is_alive():
            traffic.join(5)
        sink.close()
        stop_process(proc)
        cg.rmdir()


def test_xco_agent_gates_an_uplink_as_nobody_with_two_capabilities() -> None:
    _need_root()
    ns = f"xtcpv{os.getpid()}"
    # nobody must read the configuration and reach the notification socket: a directory of its own.
    d = Path(tempfile.mkdtemp(prefix="xtc-privileges-"))
    d.chmod(0o755)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(d / "notify.sock"))
    (d / "notify.sock").chmod(0o777)
    notify.settimeout(30)
    proc = None
    sh = lambda *a: subprocess.run(list(a), check=True, capture_output=True, text=True).stdout  # noqa: E731
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        sh("ip", "-n", ns, "link", "add", "up0", "type", "veth", "peer", "name", "up1")
        sh("ip", "-n", ns, "addr", "add", "198.18.24.1/24", "dev", "up0")
        for dev in ("up0", "up1", "lo"):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        (d / "topo.toml").write_bytes((XCO_DATA / "fig1a.toml").read_bytes())
        cfg = d / "agent.toml"
        cfg.write_text('schema = "xco-agent/1"\ntopology = "topo.toml"\nhost = "s1"\nuplink = "up0"\n'
                       'controller = "127.0.0.1:7899"\nbind = "127.0.0.1:0"\n[metrics]\nenabled = false\n'
                       '[log]\nformat = "json"\n')
        for p in (cfg, d / "topo.toml"):
            p.chmod(0o644)
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                "--inh-caps=-all,+net_admin,+net_raw", "--ambient-caps=-all,+net_admin,+net_raw",
                "--bounding-set=-all,+net_admin,+net_raw", "--"]
        agent = [sys.executable, "-m", "xtc.cli", "xco", "agent", "-c", str(cfg)]
        # What the unit gives it besides: a cache directory of its own for numba (the checkout, like
        # /opt/venvs/xtc under ProtectSystem=strict, is not writable by the service's user).
        unit_env = dict(line.removeprefix("Environment=").split("=", 1) for line in
                        (ROOT / "packaging" / "xtc-xco-agent.service").read_text().splitlines()
                        if line.startswith("Environment="))
        assert unit_env == {"NUMBA_CACHE_DIR": "/var/cache/xtc-xco-agent"}
        (d / "cache").mkdir()
        os.chown(d / "cache", 65534, 65534)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1",
               "NOTIFY_SOCKET": str(d / "notify.sock"), "NUMBA_CACHE_DIR": str(d / "cache")}
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *drop, *agent], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env)
        _ready(notify, proc, "agent")
        caps = _caps(proc.pid)
        want = (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW)
        assert caps == {"CapEff": want, "CapPrm": want, "CapBnd": want, "CapAmb": want, "uid": 65534}, caps
        assert "htb 7c0: root" in sh("tc", "-n", ns, "qdisc", "show", "dev", "up0")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, out
        assert "7c0:" not in sh("tc", "-n", ns, "qdisc", "show", "dev", "up0")
        r = subprocess.run(["ip", "netns", "exec", ns, *drop, *agent, "--cleanup"], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 0 and "nothing to remove" in r.stdout, r.stdout + r.stderr
    finally:
        stop_process(proc)
        notify.close()
        subprocess.run(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(d, ignore_errors=True)


def test_policer_serves_as_an_unprivileged_user() -> None:
    """xtc-policer.service: user xtc, no capability; here ``nobody`` with none, its database in a
    directory of its own (the unit's StateDirectory): READY=1 and /health answers."""
    _need_root()
    # The policer starts its engine as a child process (sys.executable): a Python that nobody can
    # execute, as the Debian package's environment does (/usr/bin/python3), with this checkout's
    # packages (this venv's interpreter may sit under a directory only root can enter).
    python = Path(f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}")
    if not python.exists():
        pytest.skip(f"needs {python} (the venv's Python version, executable by nobody)")
    import site

    d = Path(tempfile.mkdtemp(prefix="xtc-privileges-"))
    d.chmod(0o755)
    (d / "state").mkdir(mode=0o700)
    os.chown(d / "state", 65534, 65534)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(d / "notify.sock"))
    (d / "notify.sock").chmod(0o777)
    notify.settimeout(60)
    from procs import free_port

    port = free_port()
    cfg = d / "policer.toml"
    cfg.write_text(f'schema = "xtc-policer/1"\n[server]\nhost = "127.0.0.1"\nport = {port}\n'
                   f'[database]\nurl = "sqlite:///{d}/state/policer.db"\n')
    cfg.chmod(0o644)
    proc = None
    try:
        proc = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                                 "--ambient-caps=-all", "--bounding-set=-all", "--",
                                 str(python), "-m", "xtc.cli", "policer", "serve", "-c", str(cfg)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *site.getsitepackages()]),
                                     "PYTHONDONTWRITEBYTECODE": "1",
                                     "NOTIFY_SOCKET": str(d / "notify.sock")})
        _ready(notify, proc, "policer")
        caps = _caps(proc.pid)
        assert caps == {"CapEff": 0, "CapPrm": 0, "CapBnd": 0, "CapAmb": 0, "uid": 65534}, caps
        import httpx

        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        assert (d / "state" / "policer.db").stat().st_uid == 65534
    finally:
        stop_process(proc)
        notify.close()
        shutil.rmtree(d, ignore_errors=True)
