"""The policer API's CPU per request, request kind by request kind: ``python -m xtc_lab.policer_api_cpu``.

    python -m xtc_lab.policer_api_cpu [-n 2000] [--repeat 3] [--fleet ROUTERS] [--out FILE]

Starts ``xtc policer serve`` on a temporary SQLite file (:func:`~xtc_lab.policer_bench.start_policer`,
as ``xtc policer bench`` does, seeded as the bench seeds it, :func:`~xtc_lab.policer_bench.seed_policer`: 8
networks with SLAs, 4 routers whose daemons do not exist), then sends N requests of each kind in :data:`KINDS` one after the
other on one kept-alive connection, and divides the API process's user + system CPU (its engine's
child process left out) by N; the best of ``--repeat`` runs per kind.  With ``--fleet N`` the
policer is the one :func:`~xtc_lab.policer_bench.run_fleet_bench` starts, policing N stand-in routers
of 16 VRs (10 % dead), and the requests are sent once the engine has activated them, so that a page
of routers or VRs is full (100 items) and its live values are the engine's.  Requests one at a time on one
connection are the cheapest case for the server; ``xtc policer bench`` (requests in parallel, all the
policer's processes) is the other one.  :func:`mix_ms_per_request` weighs the kinds by the bench's
mix.  Prints (and with ``--out`` writes) JSON: the product measured (its path), the load average
before each run, each run's figures and the best.  ``python -m xtc_lab.alternate`` runs it before and
after a change alternately (the product on ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import secrets
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

import xtc
from xtc_lab.policer_bench import PAGE, BenchConn, seed_policer, start_policer
from xtc_lab.procs import stop_process

__all__ = ["KINDS", "MIX", "Kind", "main", "measure", "mix_ms_per_request"]

#: (name, method, path, body: none, a dict, or a function of the request's number, with the token)
Kind = tuple[str, str, str, "dict[str, Any] | Callable[[int], dict[str, Any]] | None", bool]

KINDS: list[Kind] = [
    ("GET /routers?limit=100", "GET", f"/routers?limit={PAGE}", None, False),
    ("GET /vrs?limit=100", "GET", f"/vrs?limit={PAGE}", None, False),
    ("GET /networks/net0", "GET", "/networks/net0", None, False),
    ("GET /actions?limit=20", "GET", "/actions?limit=20", None, False),
    ("GET /health", "GET", "/health", None, False),
    ("PUT /networks/net1/sla", "PUT", "/networks/net1/sla", {"min_pps": 1000, "max_pps": 50000, "weight": 2}, True),
    ("PATCH /routers/r1", "PATCH", "/routers/r1", {"capacity_pps": 120000.0}, True),
    ("POST /networks", "POST", "/networks", lambda i: {"name": f"cpu{os.getpid()}-{i}"}, True),
    ("DELETE /networks/net7/sla", "DELETE", "/networks/net7/sla", None, True),
    ("GET /networks/nope (404)", "GET", "/networks/nope", None, False),
    ("GET /routers/nope (404)", "GET", "/routers/nope", None, False),
    ("GET /routers?limit=0 (422)", "GET", "/routers?limit=0", None, False),
    ("PUT /networks/net1/sla no token (401)", "PUT", "/networks/net1/sla", {"min_pps": 1}, False),
]

#: The share of each kind in ``xtc policer bench``'s mix (80 % reads over five paths, two of them a
#: network; 20 % writes over three kinds), by the names of :data:`KINDS`.
MIX: dict[str, float] = {
    "GET /routers?limit=100": 0.16, "GET /vrs?limit=100": 0.16, "GET /networks/net0": 0.32,
    "GET /actions?limit=20": 0.16, "PUT /networks/net1/sla": 0.2 / 3, "PATCH /routers/r1": 0.2 / 3,
    "POST /networks": 0.2 / 3,
}


def mix_ms_per_request(ms_per_kind: dict[str, float], mix: dict[str, float] = MIX) -> float:
    """The CPU per request of the bench's mix: each kind's figure by its share (ValueError naming a kind
    of the mix that was not measured)."""
    missing = sorted(set(mix) - set(ms_per_kind))
    if missing:
        raise ValueError(f"not measured: {', '.join(missing)}")
    return round(sum(ms_per_kind[k] * w for k, w in mix.items()) / sum(mix.values()), 3)


async def measure(url: str, token: str, n: int, proc: psutil.Process, kinds: Sequence[Kind] = KINDS,
                  counter: itertools.count | None = None) -> dict[str, float]:
    """CPU milliseconds of ``proc`` per request of each kind: ``n`` requests one after the other on one
    connection, after 50 to warm up."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    conn = BenchConn(host, int(port))
    auth = {"Authorization": f"Bearer {token}"}
    numbers = counter if counter is not None else itertools.count()
    out = {}
    for name, method, path, body, with_token in kinds:
        async def one() -> None:
            b = body(next(numbers)) if callable(body) else body
            await conn.request(method, path, b, auth if with_token else None)

        for _ in range(50):
            await one()
        t = proc.cpu_times()
        for _ in range(n):
            await one()
        t2 = proc.cpu_times()
        out[name] = round(1000 * (t2.user + t2.system - t.user - t.system) / n, 4)
    conn.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m xtc_lab.policer_api_cpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="requests of each kind (default 2000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs; the best of them per kind (default 3)")
    ap.add_argument("--fleet", type=int, default=0, metavar="ROUTERS",
                    help="measure while the engine polices this many stand-in routers (default 0: none)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)
    if args.n < 1 or args.repeat < 1 or args.fleet < 0:
        ap.error("-n and --repeat must be at least 1, --fleet at least 0")
    runs: list[dict[str, Any]] = []
    counter = itertools.count()

    def runs_against(pid: int, url: str, token: str) -> None:
        for _ in range(args.repeat):
            load = os.getloadavg()
            ms = asyncio.run(measure(url, token, args.n, psutil.Process(pid), counter=counter))
            runs.append({"loadavg_1_5_15": [round(x, 2) for x in load], "ms_per_request": ms})

    if args.fleet:
        from xtc_lab.policer_bench import run_fleet_bench

        def window(pid: int, start: bool, url: str, token: str) -> None:
            if start:  # called on the bench's event loop: the measurement gets a loop of its own
                t = threading.Thread(target=runs_against, args=(pid, url, token))
                t.start()
                t.join()

        fleet = run_fleet_bench(routers=args.fleet, duration_s=2.0, api_rate_per_s=50.0, api_duration_s=0.5,
                                api_window=window)
    else:
        token = secrets.token_urlsafe(24)
        with tempfile.TemporaryDirectory(prefix="xtc-policer-cpu-") as tmp:
            proc, url = start_policer(tmp, token)
            try:
                asyncio.run(seed_policer(url, token))
                runs_against(proc.pid, url, token)
            finally:
                stop_process(proc)
    if not runs:
        print("python -m xtc_lab.policer_api_cpu: nothing measured", file=sys.stderr)
        return 1
    best = {k: min(r["ms_per_request"][k] for r in runs) for k in runs[0]["ms_per_request"]}
    res: dict[str, Any] = {"product": str(Path(xtc.__file__).parent), "n_per_kind": args.n, "fleet_routers": args.fleet,
                           "runs": runs, "best_ms_per_request": best, "mix_ms_per_request": mix_ms_per_request(best)}
    if args.fleet:
        res["engine_measured_per_s"] = fleet["measured_per_s"]
    text = json.dumps(res, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
