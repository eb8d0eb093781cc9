"""The live-value channel (docs/design/policer-memory.md): a real ``xtc policer serve`` (one API process,
or two workers) shows the engine's live measurements, newer than the database's snapshot, and says so
(``measured_from``); while the engine's process is frozen its values go stale and the API shows the
snapshot, and says that; thawed, live again."""

from __future__ import annotations

import os
import signal
from typing import Any

import httpx
import psutil
import pytest
from conftest import TOKEN
from procs import wait_for

from procs import stop_process
from xtc.policer.store import Store
from xtc_lab.policer_bench import start_policer

PERIOD_S = 0.5
VRS = ("a1", "a2")


@pytest.mark.parametrize("workers", [1, 2])
def test_the_api_shows_live_values_and_says_which(make_daemon: Any, tmp_path: Any, workers: int) -> None:
    d = make_daemon("ra", [{"name": n, "traffic": "tcp", "offered_pps": 60000.0} for n in VRS])
    # No snapshot during the test (the first is due an hour after the start): the database holds the
    # measurements of the VRs' first appearance only.
    proc, url = start_policer(tmp_path, TOKEN, PERIOD_S, workers=workers, extra_config="snapshot_interval_s = 3600\n")
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as c:
            assert c.post("/routers", json={"name": "ra", "endpoint": d.endpoint, "capacity_pps": 100000,
                                            "control_mode": "off"}).status_code == 201
            wait_for(lambda: len(c.get("/vrs").json()) == len(VRS), 15, "the VRs reported")
            store = Store(f"sqlite:///{tmp_path / 'policer.db'}")  # the database alone: the snapshot
            try:
                first = {v["name"]: v for v in store.list_vrs(router="ra")}
                assert all(v["measured_from"] == "snapshot" for v in first.values())

                def live_and_newer() -> bool:
                    # Several requests: with two workers each may be answered by either.
                    got = [c.get("/vrs", params={"router": "ra"}).json() for _ in range(4)]
                    got += [[c.get("/vrs/ra/a1").json()] for _ in range(2)]
                    return all(v["measured_from"] == "live"
                               and v["last_seen_unix_s"] > first[v["name"]]["last_seen_unix_s"] + 2 * PERIOD_S
                               for page in got for v in page)
                wait_for(live_and_newer, 15, "live values, newer than the database's")
                r = c.get("/routers/ra").json()
                assert r["measured_from"] == "live" and r["last_seen_unix_s"] > first["a1"]["last_seen_unix_s"]
                assert {v["name"]: v["last_seen_unix_s"] for v in store.list_vrs(router="ra")} == \
                    {n: v["last_seen_unix_s"] for n, v in first.items()}, "a snapshot was written"

                engine = [p for p in psutil.Process(proc.pid).children(recursive=True)
                          if "xtc.policer.engine_proc" in " ".join(p.cmdline())]
                assert len(engine) == 1
                os.kill(engine[0].pid, signal.SIGSTOP)  # frozen: publishes nothing, its values go stale
                try:
                    wait_for(lambda: all(c.get("/vrs/ra/a1").json()["measured_from"] == "snapshot" for _ in range(4)),
                             15, "the snapshot once the live values are stale")
                    v = c.get("/vrs/ra/a1").json()
                    assert v["last_seen_unix_s"] == first["a1"]["last_seen_unix_s"]
                    assert c.get("/routers/ra").json()["measured_from"] == "snapshot"
                finally:
                    os.kill(engine[0].pid, signal.SIGCONT)
                wait_for(live_and_newer, 15, "live values again")
            finally:
                store.close()
    finally:
        stop_process(proc)
