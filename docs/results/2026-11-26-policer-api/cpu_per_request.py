"""CPU of the policer's API process per request, request by request kind: ``xtc policer serve`` on a
temporary SQLite file (as ``xtc policer bench`` starts it, seeded the same way), then N requests of
each kind one after the other on one kept-alive connection; the API process's user + system CPU
(its engine's child process left out) divided by N.  Sequential requests on one connection are the
cheapest case for the server; the load test's figure (all processes, requests in parallel) is
the other one.

    .venv/bin/python docs/results/2026-11-26-policer-api/cpu_per_request.py -n 2000 --out x.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
from pathlib import Path

import psutil

from xtc_lab.policer_bench import PAGE, _Conn, _load, start_policer

KINDS = [
    ("GET /routers?limit=100", "GET", f"/routers?limit={PAGE}", None, False),
    ("GET /vrs?limit=100", "GET", f"/vrs?limit={PAGE}", None, False),
    ("GET /networks/net0", "GET", "/networks/net0", None, False),
    ("GET /actions?limit=20", "GET", "/actions?limit=20", None, False),
    ("GET /health", "GET", "/health", None, False),
    ("PUT /networks/net1/sla", "PUT", "/networks/net1/sla", {"min_pps": 1000, "max_pps": 50000, "weight": 2}, True),
    ("PATCH /routers/r1", "PATCH", "/routers/r1", {"capacity_pps": 120000.0}, True),
    ("GET /networks/nope (404)", "GET", "/networks/nope", None, False),
    ("PUT /networks/net1/sla no token (401)", "PUT", "/networks/net1/sla", {"min_pps": 1}, False),
]


async def measure(url: str, token: str, n: int, proc: psutil.Process) -> dict[str, float]:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    conn = _Conn(host, int(port))
    auth = {"Authorization": f"Bearer {token}"}
    out = {}
    for name, method, path, body, with_token in KINDS:
        for _ in range(50):  # warm up
            await conn.request(method, path, body, auth if with_token else None)
        t = proc.cpu_times()
        for _ in range(n):
            await conn.request(method, path, body, auth if with_token else None)
        t2 = proc.cpu_times()
        out[name] = round(1000 * (t2.user + t2.system - t.user - t.system) / n, 3)
    conn.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000, help="requests of each kind")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    token = secrets.token_urlsafe(24)
    runs = []
    with tempfile.TemporaryDirectory(prefix="xtc-policer-cpu-") as tmp:
        proc, url = start_policer(tmp, token)
        try:
            # The bench's seed (networks with SLAs, four routers) through one short run of its load.
            asyncio.run(_load(url, token, 50, 0.2, 4, 0.0, 1))
            for _ in range(args.repeat):
                load = os.getloadavg()[0]
                runs.append({"loadavg_1min": round(load, 2),
                             "ms_per_request": asyncio.run(measure(url, token, args.n, psutil.Process(proc.pid)))})
        finally:
            proc.terminate()
            proc.wait(10)
    best = {k: min(r["ms_per_request"][k] for r in runs) for k in runs[0]["ms_per_request"]}
    res = {"n_per_kind": args.n, "runs": runs, "best_ms_per_request": best}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
