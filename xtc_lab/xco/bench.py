"""Benchmark of the XCo fast scheduler on the paper's Figure 27 topology, every host backlogged.

``python -m xtc_lab.xco.bench [--hosts 800 2400 4800 48000] [--events N] [--json OUT]``

Measured, per size:

- ``full_schedule_ms``: from nothing, every host reports its backlog at one instant (one scheduling
  event), until the first schedule is out.
- ``boundary_ms``: one slot boundary at steady state (every slice ends; the next slot's schedule).
- ``event_p50_us`` / ``event_p99_us``: mid-slot events at steady state, alternately a give-up by a
  transmitting host (its slice is handed on) and the same host's new backlog a little later.
- ``events_per_s_one_core``: 1e6 / mean of those events.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

import numpy as np

from xtc.xco.scheduler import FastScheduler
from xtc.xco.topology import parse_topology

from .topologies import fig27, fig27_pairs

__all__ = ["bench_one", "main", "register"]


def bench_one(n_hosts: int, n_events: int = 4000, slice_us: int = 10_000, seed: int = 1) -> dict[str, Any]:
    rows = max(2, n_hosts // 200)
    t0 = time.perf_counter()
    topo = parse_topology(fig27(rows))
    load_s = time.perf_counter() - t0
    pairs = fig27_pairs(rows)
    sched = FastScheduler(topo, slice_us)
    groups = {x: [d] for x, d in pairs}
    t0 = time.perf_counter_ns()
    first = sched.backlog_many(0, groups)
    full_ms = (time.perf_counter_ns() - t0) / 1e6
    active0 = sum(1 for d in first if d.dest is not None)

    rng = random.Random(seed)
    t_us = 0
    boundaries: list[float] = []
    lat: list[float] = []
    gave_up: list[tuple[int, int]] = []
    perf = time.perf_counter_ns
    while len(lat) < n_events:
        # mid-slot events, 100 us apart
        t_us += 100
        nxt = sched.next_expiry_us()
        if nxt is not None and nxt <= t_us:
            a = perf()
            sched.advance(nxt)
            boundaries.append((perf() - a) / 1e6)
        if gave_up and (len(lat) % 2 == 1):
            x, d = gave_up.pop()
            a = perf()
            sched.backlog(t_us, x, [d])
            lat.append((perf() - a) / 1e3)
        else:
            x = rng.randrange(topo.n_hosts)
            d = sched.dest[x]
            if d is None:
                continue
            a = perf()
            sched.giveup(t_us, x, d)
            lat.append((perf() - a) / 1e3)
            gave_up.append((x, d))
    arr = np.array(lat)
    return {
        "hosts": topo.n_hosts,
        "mode": "timeslice",
        "event_p50_us": round(float(np.percentile(arr, 50)), 2),
        "event_p99_us": round(float(np.percentile(arr, 99)), 2),
        "events_per_s_one_core": int(1e6 / arr.mean()),
        "full_schedule_ms": round(full_ms, 3),
        "boundary_ms": round(float(np.median(boundaries)), 3) if boundaries else None,
        "transmitting_per_slot": active0,
        "events": len(lat),
        "topology_load_s": round(load_s, 2),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", type=int, nargs="+", default=[800, 2400, 4800, 48000])
    p.add_argument("--events", type=int, default=4000, help="mid-slot events measured per size")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--out", default=None, help="also write the JSON to this file")


def run(args: argparse.Namespace) -> int:
    res = {"scheduler": [bench_one(n, args.events) for n in args.hosts]}
    text = json.dumps(res, indent=2)
    if args.json:
        print(text)
    else:
        print(f"{'hosts':>7} {'mode':>10} {'p50 us':>8} {'p99 us':>8} {'events/s':>10} {'full ms':>9}")
        for r in res["scheduler"]:
            print(f"{r['hosts']:>7} {r['mode']:>10} {r['event_p50_us']:>8.1f} {r['event_p99_us']:>8.1f} "
                  f"{r['events_per_s_one_core']:>10.0f} {r['full_schedule_ms']:>9.1f}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


def add_xco(sub: Any) -> None:
    """Register ``xtc bench xco``."""
    p = sub.add_parser("xco", help="the XCo scheduler on the Figure 27 topology (800 to 48,000 hosts)")
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xtc_lab.xco.bench", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
