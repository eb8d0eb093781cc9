"""The CPU cost of one libvirt cap write on a real LXC domain (client and libvirtd).

Builds a one-VR lab (``xtc lab up --vrs 1``: libvirtd and one LXC domain), then writes the VR's cap
``n`` times through the product's :class:`~xtc.host.libvirt.LibvirtBackend` (``apply_cap``,
alternating between two caps so that every call is a real write), and reports per write:

- ``client_cpu_us``: this process's CPU time (user + kernel) in ``apply_cap``;
- ``libvirtd_cpu_us``: the CPU time (user + kernel, all threads) of the ``libvirtd`` processes
  over the same writes (psutil), which is where the cgroup file is written;
- ``wall_us`` and the RPCs per write.

The lab is removed afterwards (``xtc lab down``), also on failure or Ctrl-C.  Needs root.

    PYTHONPATH=. python -m xtc_lab.bench.libvirt_write_cost --writes 200 --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

__all__ = ["measure", "main"]

LAB_NAME = "xtc-wcost"


def _xtc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xtc.cli", *args], text=True, capture_output=True)


def _libvirtd_cpu_s(procs: list[Any]) -> float:
    total = 0.0
    for p in procs:
        t = p.cpu_times()
        total += t.user + t.system
    return total


def measure(uri: str, domain: str, n_writes: int) -> dict[str, Any]:
    """Time ``n_writes`` cap writes on ``domain`` (see the module docstring)."""
    import psutil

    from xtc.host.counters import ProcNetDevCounters
    from xtc.host.libvirt import LibvirtBackend
    from xtc.host.libvirt_conn import LibvirtConn

    procs = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "libvirtd"]
    if not procs:
        raise RuntimeError("no libvirtd process found")
    host = LibvirtBackend(LibvirtConn(uri), "lxc", (domain,), ProcNetDevCounters())
    try:
        original = host.snapshot(domain)
        host.list_vrs()
        host.apply_cap(domain, 50.0)  # the first write reads the original; not timed
        caps = (40.0, 60.0)
        d0 = _libvirtd_cpu_s(procs)
        w0 = time.perf_counter()
        client = 0.0
        writes0 = host.cap_writes()
        for i in range(n_writes):
            t0 = time.process_time()
            host.apply_cap(domain, caps[i % 2])
            client += time.process_time() - t0
        wall = time.perf_counter() - w0
        daemon = _libvirtd_cpu_s(procs) - d0
        writes = host.cap_writes() - writes0
        host.restore_cap(domain, None, original)
    finally:
        host.close()
    return {"uri": uri, "domain": domain, "writes": writes, "libvirtd_processes": len(procs),
            "client_cpu_us": 1e6 * client / n_writes, "libvirtd_cpu_us": 1e6 * daemon / n_writes,
            "wall_us": 1e6 * wall / n_writes,
            "rpcs_per_write": "setSchedulerParametersFlags + schedulerParametersFlags (handle kept)"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3, help="measurements on the same lab")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("libvirt_write_cost: needs root (builds an LXC lab)", file=sys.stderr)
        return 2
    try:
        up = _xtc("lab", "up", "--vrs", "1", "--name", LAB_NAME)
        if up.returncode != 0:
            print(up.stdout + up.stderr, file=sys.stderr)
            return 1
        from xtc_lab.lab.lifecycle import load_lab

        record, vrs, _ = load_lab(LAB_NAME)
        rows = [measure(record["uri"], vrs[0].name, args.writes) for _ in range(args.runs)]
    finally:
        down = _xtc("lab", "down", "--name", LAB_NAME)
        if down.returncode != 0:
            print("libvirt_write_cost: xtc lab down failed:\n" + down.stdout + down.stderr, file=sys.stderr)
    if args.json:
        print(json.dumps({"benchmark": "libvirt_write_cost", "results": rows}, indent=1))
    else:
        for r in rows:
            print(f"{r['writes']} writes on {r['domain']}: client {r['client_cpu_us']:.0f} us, "
                  f"libvirtd {r['libvirtd_cpu_us']:.0f} us, wall {r['wall_us']:.0f} us per write")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
