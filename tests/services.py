"""Every XTC service that exports metrics, started for real, with the URL of its ``/metrics``.

- the daemon: ``xtc daemon`` on the simulated backend (one VR active, one not), a process;
- the policer: ``xtc policer serve`` (SQLite), a process;
- the XCo controller: ``xtc xco controller``, a process;
- the XCo agent: :class:`~xtc.xco.agent_service.AgentService` in this process with an in-memory gate
  (a real agent process needs root for its ``tc`` gate: tests/root/test_xco_agent_metrics_netns.py
  checks one), registered with that controller, its real HTTP endpoint on loopback.

Used by the checks of the metrics (``promtool check metrics``) and of the Grafana dashboard.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from procs import DaemonProc, daemon_config, free_port, stop_process, wait_for

ROOT = Path(__file__).resolve().parents[1]
XCO_TOPOLOGY = ROOT / "tests" / "xco" / "data" / "fig1a.toml"


#: PromQL words that are not metric names (functions and aggregations are recognised by their "(").
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
             "summary": ("_sum", "_count", "_created"), "gauge": ("",), "info": ("_info",), "unknown": ("",),
             "stateset": ("",)}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana ``label_values(...)`` query) reads."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range selectors ([5m], [$__rate_interval])
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)  # label lists
    m = re.match(r"\s*label_values\s*\(\s*([A-Za-z_:][A-Za-z0-9_:]*)?", e)
    if m:  # label_values(metric, label) or label_values(label)
        return {m.group(1)} if m.group(1) and "," in e else set()
    names = set()
    for tok in re.finditer(r"(?<![\w$.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", e):
        word, call = tok.group(1), tok.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def sample_names(families: Iterable[Any]) -> set[str]:
    """The names of the samples a scrape's metric families (prometheus_client's parser) may carry."""
    return {f.name + s for f in families for s in _SUFFIXES[f.type]}


def scrape(url: str) -> str:
    return urllib.request.urlopen(url, timeout=10).read().decode()


def _daemon(d: Path, stack: ExitStack) -> str:
    from xtc.daemon.ctl import ManagerClient

    cfg = daemon_config(d, "sim", """[log]
format = "json"
[[sim.vr]]
name = "vr1"
offered_pps = 100000
initial_cap_percent = 80.0
[[sim.vr]]
name = "vr2"
offered_pps = 50000
initial_cap_percent = 60.0
""", period_s=0.25, metrics="port = 0")
    proc = DaemonProc(cfg)
    stack.callback(proc.kill)
    url = f"http://127.0.0.1:{proc.wait_event('started')['metrics_port']}/metrics"
    c = ManagerClient(f"ipc://{d}/mgr.sock", timeout_s=5.0)
    stack.callback(c.close)
    assert c.call("activate", vr="vr1", setpoint_pps=30000)["state"] == "active"

    def counted() -> bool:
        text = scrape(url)
        return 'xtc_vr_cap_ratio{vr="vr1"}' in text and 'xtc_vr_forwarded_packets_total{vr="vr1"} 0.0' not in text \
            and 'xtc_vr_forwarded_packets_total{vr="vr1"}' in text

    wait_for(counted, 20.0, "the daemon's per-VR series", 0.05)
    return url


def _policer(d: Path, stack: ExitStack) -> str:
    from xtc_lab.policer_bench import start_policer

    proc, base = start_policer(d, secrets.token_urlsafe(24))
    stack.callback(stop_process, proc)
    return base + "/metrics"


def _xco(d: Path, stack: ExitStack) -> tuple[str, str]:
    from xtc.xco.memory_gate import MemoryGate
    from xtc.xco.agent_config import loads_agent_config
    from xtc.xco.agent_service import AgentService

    (d / "topo.toml").write_bytes(XCO_TOPOLOGY.read_bytes())
    port = free_port(socket.SOCK_DGRAM)
    cfg = d / "xco.toml"
    cfg.write_text(f'schema = "xco-controller/1"\ntopology = "topo.toml"\nlisten = "127.0.0.1:{port}"\n'
                   f'state_file = "ctl-state.json"\n[metrics]\nport = 0\n')
    proc = subprocess.Popen([sys.executable, "-m", "xtc.cli", "xco", "controller", "-c", str(cfg)],
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    stack.callback(stop_process, proc)
    assert proc.stderr is not None
    ctl_port = None
    while ctl_port is None:
        line = proc.stderr.readline()
        assert line, f"the XCo controller exited: {proc.wait()}"
        ev = json.loads(line)
        if ev["event"] == "started":
            ctl_port = ev["metrics_port"]
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
    acfg = loads_agent_config(f'schema = "xco-agent/1"\ntopology = "topo.toml"\nhost = "s1"\nuplink = "lo"\n'
                              f'controller = "127.0.0.1:{port}"\nbind = "127.0.0.1:0"\n[metrics]\nport = 0\n',
                              base_dir=d)
    svc = AgentService(acfg, MemoryGate())
    svc.open()
    t = threading.Thread(target=svc.loop, daemon=True)
    t.start()

    def stop_agent() -> None:
        svc.stop = True
        t.join(10)
        svc.close()

    stack.callback(stop_agent)
    wait_for(lambda: svc.core.welcomed, 20.0, "the agent's welcome", 0.05)
    return f"http://127.0.0.1:{ctl_port}/metrics", f"http://127.0.0.1:{svc.metrics_port}/metrics"


@contextmanager
def running_services(tmp: Path) -> Iterator[dict[str, str]]:
    """Start every service under ``tmp``; yields service -> URL of its ``/metrics``; stops them all."""
    with ExitStack() as stack:
        urls = {}
        for name in ("daemon", "policer", "xco"):
            (tmp / name).mkdir()
        urls["daemon"] = _daemon(tmp / "daemon", stack)
        urls["policer"] = _policer(tmp / "policer", stack)
        urls["xco_controller"], urls["xco_agent"] = _xco(tmp / "xco", stack)
        yield urls
