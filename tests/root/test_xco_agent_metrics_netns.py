"""A real ``xtc xco agent`` process (root: its gate is ``tc`` on an uplink in a namespace this test
makes): ``promtool check metrics`` on its ``/metrics``, and its log lines carry journald priorities
when ``JOURNAL_STREAM`` names its stderr.

Namespace ``xam<random>`` with a veth uplink ``up0`` (its peer ``up1`` in the same namespace) (198.18.23.1/24); removed at the end, also when
the test fails.  The controller and the agent talk UDP over 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from procs import compile_xco_kernels, free_port, stop_process

pytestmark = [pytest.mark.timeout(120), pytest.mark.root, pytest.mark.beside]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _xco_kernels_compiled() -> None:
    """The XCo controllers these tests start load the scheduler's kernels instead of compiling them."""
    compile_xco_kernels()


def _sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


@pytest.fixture
def netns():
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a network namespace")
    if shutil.which("ip") is None or shutil.which("tc") is None or shutil.which("promtool") is None:
        pytest.skip("needs iproute2 (ip, tc) and promtool")
    ns = f"xam{secrets.token_hex(3)}"
    try:
        _sh("ip", "netns", "add", ns)
        _sh("ip", "-n", ns, "link", "add", "up0", "type", "veth", "peer", "name", "up1")
        _sh("ip", "-n", ns, "link", "set", "up1", "up")
        _sh("ip", "-n", ns, "addr", "add", "198.18.23.1/24", "dev", "up0")
        _sh("ip", "-n", ns, "link", "set", "up0", "up")
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def _wait_line(path: Path, want: str, proc: subprocess.Popen, timeout_s: float = 30) -> str:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for ln in path.read_text().splitlines():
            if want in ln:
                return ln
        assert proc.poll() is None, path.read_text()[-2000:]
        time.sleep(0.05)
    raise AssertionError(f"no {want!r}: {path.read_text()[-2000:]}")


def test_a_real_agent_passes_promtool_and_logs_with_journal_priorities(netns: str, tmp_path: Path) -> None:
    port = free_port(socket.SOCK_DGRAM)
    (tmp_path / "topo.toml").write_text(
        'schema = "xco-topology/1"\n[[switch]]\nname = "sw1"\n'
        '[[host]]\nname = "s1"\nnic_bps = 1_000_000_000\nswitch = "sw1"\nvms = ["198.18.23.1"]\n'
        '[[host]]\nname = "r1"\nnic_bps = 1_000_000_000\nswitch = "sw1"\nvms = ["198.18.23.10"]\n')
    (tmp_path / "ctl.toml").write_text(
        f'schema = "xco-controller/1"\ntopology = "topo.toml"\nlisten = "127.0.0.1:{port}"\n'
        'state_file = "ctl-state.json"\n[metrics]\nenabled = false\n')
    (tmp_path / "agent.toml").write_text(
        f'schema = "xco-agent/1"\ntopology = "topo.toml"\nhost = "s1"\nuplink = "up0"\nnetns = "{netns}"\n'
        f'controller = "127.0.0.1:{port}"\nbind = "127.0.0.1:0"\n[metrics]\nport = 0\n')
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("JOURNAL_STREAM", None)
    ctl_err, agent_err = tmp_path / "ctl.log", tmp_path / "agent.log"
    agent_err.touch()
    st = os.stat(agent_err)
    procs: list[subprocess.Popen] = []
    try:
        with open(ctl_err, "w") as f:
            procs.append(subprocess.Popen([sys.executable, "-m", "xtc.cli", "xco", "controller", "-c",
                                           str(tmp_path / "ctl.toml")], stderr=f, env=env))
        _wait_line(ctl_err, '"event": "started"', procs[0])
        with open(agent_err, "a") as f:
            procs.append(subprocess.Popen([sys.executable, "-m", "xtc.cli", "xco", "agent", "-c",
                                           str(tmp_path / "agent.toml")], stderr=f,
                                          env=dict(env, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")))
        started = _wait_line(agent_err, '"event": "started"', procs[1])
        assert started.startswith("<6>{"), started
        metrics_port = json.loads(started[3:])["metrics_port"]
        _wait_line(agent_err, '"event": "welcomed"', procs[1])
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr
        assert 'xtc_build_info{service="xco_agent"' in text and "process_cpu_seconds_total" in text
        assert "xco_agent_welcomed 1.0" in text and "xco_agent_failed_open 0.0" in text
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(15) == 0
        for ln in agent_err.read_text().splitlines():  # every line prefixed: <N>{...}
            assert ln[:1] == "<" and json.loads(ln.split(">", 1)[1])["event"], ln
    finally:
        for p in procs:
            stop_process(p)
