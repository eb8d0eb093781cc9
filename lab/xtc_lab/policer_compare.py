"""A before/after comparison of the policer's engine, as the results sessions record it: one fleet run, their table.

``python -m xtc_lab.policer_compare BEFORE_TREE before|after sqlite|pg ROUTERS DURATION OUT.json [JITTER]``

:func:`~xtc_lab.policer_bench.run_fleet_bench_on` (the path behind ``xtc policer bench --fleet``):
ROUTERS routers of 16 VRs, 10% dead, sample streams on, one engine shard, DURATION seconds measured,
then 5 s of API load at 100 requests/s; the VRs' offered rates drawn anew every period within
JITTER (default 0: steady).  *before* runs the product exported to BEFORE_TREE (``git archive REV
xtc`` unpacked there), first on the path of this process and of its children; *after* the
installed one.  Both use the installed testbed's bench and stand-in fleet, so the load is the same.
Writes OUT.json (the bench's result with ``code``, the host's ``uptime`` before and after and its
load average after: contention inflates CPU times, so only runs made close together compare) and
prints a summary line.  docs/results/2026-11-27-policer-*/run.py call it (and ``python -m
xtc_lab.alternate`` runs it before and after alternated).  :func:`fleet_table` is the sessions' table of
those runs; :func:`cpu_s_per_call` times a changed step alone, in one process.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The result's keys on the summary line.
SUMMARY = ("code", "database", "routers", "measured_per_s", "engine_cpu_ms_per_measurement",
           "database_cpu_ms_per_measurement", "policy_cycle_ms", "rss_mb", "warmup_s", "uptime")


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (6, 7) or args[1] not in ("before", "after"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    before_tree, code, database, out = args[0], args[1], args[2], Path(args[5])
    routers, duration_s = int(args[3]), float(args[4])
    jitter = float(args[6]) if len(args) > 6 else 0.0
    if code == "before":
        os.environ["PYTHONPATH"] = before_tree
        sys.path[:0] = [before_tree]
    # Only now, with the path set: the product these imports load is the one measured.
    import xtc.policer.store as used
    from xtc_lab.policer_bench import run_fleet_bench_on

    if used.__file__ is None or used.__file__.startswith(before_tree) != (code == "before"):
        print(f"{code}: the policer in use is {used.__file__}", file=sys.stderr)
        return 1
    started_s, uptime_before, load_before = time.time(), _uptime(), os.getloadavg()
    res = run_fleet_bench_on(database, routers, 16, 0.1, duration_s, 100.0, samples=True, shards=1, jitter=jitter)
    res.update(code=code, uptime_before=uptime_before, load_average_before=load_before,
               load_average_after=os.getloadavg(), started_unix_s=started_s, uptime=_uptime())
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res.get(k) for k in SUMMARY}))
    return 0



def fleet_table(folder: Path, prefix: str = "") -> list[str]:
    """The Markdown table of the fleet runs in ``folder``: PREFIX{before,after}-{sqlite,pg}-{jitter,steady}.json
    (those present, in that order: the database, then moving rates or steady, then the side), as :func:`main`
    writes them."""
    lines = ["| run | engine CPU / measurement | database CPU / measurement | engine + database | measured / s (900 healthy) | cycle p99 | engine RSS | load (1 min) before / after |",
             "|---|---|---|---|---|---|---|---|"]
    for db in ("sqlite", "pg"):
        for mode in ("jitter", "steady"):
            for code in ("before", "after"):
                f = folder / f"{prefix}{code}-{db}-{mode}.json"
                if not f.exists():
                    continue
                r = json.loads(f.read_text())
                e, d = r.get("engine_cpu_ms_per_measurement"), r.get("database_cpu_ms_per_measurement")
                tot = None if e is None else round(e + (d or 0.0), 3)
                up0 = r["uptime_before"].split("load average:")[1].split(",")[0].strip()
                up1 = round(r["load_average_after"][0], 2)
                name = f"{'SQLite' if db == 'sqlite' else 'PostgreSQL'}, {'jitter 0.05' if mode == 'jitter' else 'steady'}, {code}"
                cyc = r.get("policy_cycle_ms") or {}
                lines.append(f"| {name} | {e} ms | {'(in the engine)' if d is None else f'{d} ms'} | {tot} ms | {r.get('measured_per_s')} "
                             f"| {cyc.get('p99')} ms | {r['rss_mb']['policer_engine']} MB | {up0} / {up1} |")
    return lines


#: The engine's threads that a profile table shows, in this order.
PROFILE_THREADS = ("ZMQbg/IO/0", "policer-links", "policer-engine", "policer-worker", "policer-samples")


def profile_tables(folder: Path, pattern: str, names: tuple[str, ...]) -> list[str]:
    """The Markdown tables of a session's ``python -m xtc_lab.policer_profile`` runs in ``folder``: the files
    matching ``pattern``, named ``<prefix><round>-<name>-<name>....json`` (``names`` names the parts after the
    round, e.g. ``("side", "mode")``).  First each run (its CPU per measurement, the threads', the cycle's p50 /
    p99 and the RSS), then per value of ``names`` the CPU of each round and the medians."""
    runs = []
    for f in sorted(folder.glob(pattern)):
        rnd, *parts = f.stem.split("-")
        runs.append((re.sub(r"^\D*", "", rnd), tuple(parts), json.loads(f.read_text())))
    lines = ["| round | " + " | ".join(names) + " | CPU / measurement (ms) | " + " | ".join(PROFILE_THREADS)
             + " | cycle p50 / p99 (ms) | RSS (MB) |",
             "|---|" + "---|" * len(names) + "---|" + "---|" * len(PROFILE_THREADS) + "---|---|"]
    for rnd, parts, d in sorted(runs, key=lambda r: (r[1], r[0])):
        t, cyc = d["thread_cpu_ms_per_measurement"], d.get("cycle_ms") or {}
        lines.append(f"| {rnd} | " + " | ".join(parts) + f" | {d['cpu_ms_per_measurement']['plain']:.4f} | "
                     + " | ".join(f"{t.get(k, 0):.4f}" for k in PROFILE_THREADS)
                     + f" | {cyc.get('p50')} / {cyc.get('p99')} | {d.get('rss_mb')} |")
    lines += ["", "| " + " | ".join(names) + " | CPU / measurement, each round (ms) | median | link pool's thread, "
              "median | worker, median | libzmq I/O, median |", "|" + "---|" * (len(names) + 5)]
    for parts in sorted({r[1] for r in runs}):
        ds = [d for _, p, d in sorted(runs, key=lambda r: r[0]) if p == parts]
        cpu = [d["cpu_ms_per_measurement"]["plain"] for d in ds]
        meds = [statistics.median(d["thread_cpu_ms_per_measurement"].get(t, 0) for d in ds)
                for t in ("policer-links", "policer-worker", "ZMQbg/IO/0")]
        lines.append("| " + " | ".join(parts) + f" | {' / '.join(f'{c:.4f}' for c in cpu)} | {statistics.median(cpu):.4f} | "
                     + " | ".join(f"{m:.4f}" for m in meds) + " |")
    return lines


def cpu_s_per_call(fn: Callable[[], Any], n: int) -> float:
    """CPU seconds of this process per call of ``fn``, over ``n`` calls after one to warm up."""
    fn()
    t = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t) / n


if __name__ == "__main__":
    sys.exit(main())
