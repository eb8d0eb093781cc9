"""``xtc policer serve`` with several API workers: real processes, real HTTP on loopback (SQLite)."""

from __future__ import annotations

import http.client
import json
import os
import signal
from pathlib import Path

from conftest import TOKEN
from procs import until
from xtc_lab.policer_bench import start_policer


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _server_side_owner(client_port: int, pids: list[int]) -> int:
    """The process whose socket is the server's end of the loopback connection from ``client_port``."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[2].split(":")[1], 16) == client_port and f[9] != "0":  # remote end = the client;
            inode = f[9]  # inode 0: an earlier connection's TIME-WAIT entry on the same port, no process's
    assert inode is not None, f"no server socket for client port {client_port}"
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return pid
            except OSError:
                pass
    raise AssertionError(f"no worker holds socket {inode}")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_write_on_one_worker_read_on_another_and_sigterm_stops_all(tmp_path: Path) -> None:
    """Two API workers and two engine shards (``engine.shards``) under one supervisor."""
    proc, url = start_policer(tmp_path, TOKEN, workers=2, extra_config="shards = 2\n")
    try:
        kids = _children(proc.pid)
        workers = [p for p in kids if "xtc.policer.service" in _cmdline(p)]
        engines = [p for p in kids if "xtc.policer.engine_proc" in _cmdline(p)]
        assert len(workers) == 2 and len(engines) == 2, [_cmdline(p) for p in kids]
        host, port = url.split("//")[1].rsplit(":", 1)
        conns: dict[int, http.client.HTTPConnection] = {}
        for _ in range(200):  # new connections until both workers hold one (SO_REUSEPORT hashes them)
            c = http.client.HTTPConnection(host, int(port), timeout=10)
            c.request("GET", "/health")  # answered: the connection has been accepted by a worker
            c.getresponse().read()
            owner = _server_side_owner(c.sock.getsockname()[1], workers)
            if owner in conns:
                c.close()
            else:
                conns[owner] = c
            if len(conns) == 2:
                break
        assert len(conns) == 2, "every connection went to one worker"
        a, b = conns[workers[0]], conns[workers[1]]
        b.request("GET", "/networks/across")
        r = b.getresponse()
        r.read()
        assert r.status == 404
        a.request("POST", "/networks", body=json.dumps({"name": "across"}),
                  headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        r = a.getresponse()
        assert r.status == 201, r.read()
        r.read()
        b.request("GET", "/networks/across")
        r = b.getresponse()
        assert r.status == 200 and json.loads(r.read())["name"] == "across"
        for c in conns.values():  # each worker relays both shards' reports
            c.request("GET", "/health")
            h = json.loads(c.getresponse().read())
            assert h["leader"] is True and [(s["shard"], s["leader"]) for s in h["shards"]] == [(0, True), (1, True)], h
        for c in conns.values():
            c.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert until(lambda: not any(map(_alive, workers + engines)), 5, step_s=0.05), \
            "a worker or the engine outlived SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_in_memory_database_is_refused_with_several_workers(capsys) -> None:
    from xtc.policer.config import PolicerConfig
    from xtc.policer.service import run_server

    assert run_server(PolicerConfig(db_url="sqlite://", port=0, workers=2)) == 2
    assert "'server.workers'" in capsys.readouterr().err
    assert run_server(PolicerConfig(db_url="sqlite://", port=0, shards=2)) == 2
    assert "'engine.shards'" in capsys.readouterr().err
