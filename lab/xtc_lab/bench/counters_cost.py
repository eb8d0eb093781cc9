"""What one reading of every interface's counters costs the reading process, in CPU time.

Run as root::

    PYTHONPATH=. python lab/xtc_lab/bench/counters_cost.py --pairs 2000 --reps 40

Creates a throw-away network namespace ``xtcct-bench-<random>`` holding
``--pairs`` veth pairs (2 x pairs interfaces, plus lo), made with one
``ip -n <ns> -batch -``, then measures per read, as process CPU time (user +
kernel, ``time.process_time``; the kernel formats ``/proc/net/dev`` and fills
the netlink dump in the reader's context, so its work is included):

* ``netlink``: :meth:`xtc.host.counters.NetlinkCounters.read` (the dump received
  into one buffer and decoded into arrays, as the daemon's loop reads it);
* ``netlink_dump_only``: the ``RTM_GETSTATS`` dump received into a buffer and
  nothing decoded (the kernel's and the socket's share);
* ``proc``: :meth:`xtc.host.counters.ProcNetDevCounters.read` (read and parse
  ``/proc/net/dev``).

Prints one JSON object: medians (and 10th/90th percentiles) in milliseconds
per read, the user/kernel split of each (``resource.getrusage`` over all
repetitions), and how long setting up the interfaces took.  The namespace is
removed at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from xtc.host import rtnl_codec
from xtc.host.counters import NetlinkCounters, ProcNetDevCounters


def make_namespace(name: str, pairs: int, up: bool = False) -> float:
    """Create ``name`` with ``pairs`` veth pairs (``xb<i>a``/``xb<i>b``, set up when ``up``); return
    the seconds it took."""
    t0 = time.monotonic()
    subprocess.run(["ip", "netns", "add", name], check=True)
    lines = "".join(f"link add xb{i}a type veth peer name xb{i}b\n" for i in range(pairs))
    if up:
        lines += "".join(f"link set xb{i}{s} up\n" for i in range(pairs) for s in "ab")
    subprocess.run(["ip", "-n", name, "-batch", "-"], input=lines, text=True, check=True)
    return time.monotonic() - t0


def not_root() -> bool:
    """True, with a line on stderr, when this process is not root (a bench makes a namespace)."""
    if os.geteuid() == 0:
        return False
    print("needs root: creates a network namespace", file=sys.stderr)
    return True


@contextmanager
def bench_namespace(prefix: str, pairs: int, up: bool = False) -> Iterator[tuple[str, float]]:
    """A namespace ``<prefix>-<random>`` made by :func:`make_namespace`: (its name, the seconds it
    took to make), removed on the way out whatever happened."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    try:
        yield name, make_namespace(name, pairs, up)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def cpu_per_call_ms(call: Callable[[], object], reps: int) -> dict[str, float]:
    """Per-call process CPU time: median and percentiles (ms), and the user/kernel split."""
    call()  # warm up (first name dump, page faults of the buffers)
    samples = []
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(reps):
        t0 = time.process_time()
        call()
        samples.append((time.process_time() - t0) * 1e3)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples), 3),
        "p10_ms": round(samples[len(samples) // 10], 3),
        "p90_ms": round(samples[(len(samples) * 9) // 10], 3),
        "user_ms_mean": round((ru1.ru_utime - ru0.ru_utime) * 1e3 / reps, 3),
        "kernel_ms_mean": round((ru1.ru_stime - ru0.ru_stime) * 1e3 / reps, 3),
    }


def dump_only(nl: NetlinkCounters) -> Callable[[], int]:
    """The RTM_GETSTATS dump on the adapter's socket, received but not decoded."""
    nl_sock = nl._sock  # the adapter's RouteSocket
    assert nl_sock is not None
    sock = nl_sock.sock
    buf = bytearray(1 << 16)
    done = rtnl_codec.NLMSG_DONE.to_bytes(2, sys.byteorder)

    def run() -> int:
        seq = nl_sock.next_seq()
        sock.send(rtnl_codec.encode_getstats_dump(seq))
        total = 0
        while True:
            n = sock.recv_into(buf)
            total += n
            # the last datagram ends with the 20-byte NLMSG_DONE
            if n >= 20 and buf[n - 20 + 4 : n - 20 + 6] == done:
                return total

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2000, help="veth pairs (interfaces = 2 x pairs + lo)")
    parser.add_argument("--reps", type=int, default=40, help="reads measured per method")
    args = parser.parse_args(argv)
    if not_root():
        return 2
    with bench_namespace("xtcct-bench", args.pairs) as (name, setup_s):
        with NetlinkCounters(name) as nl, ProcNetDevCounters(netns=name) as proc:
            n_nl, n_proc = len(nl.read()), len(proc.read())
            if n_nl != 2 * args.pairs + 1 or n_proc != n_nl:
                raise SystemExit(f"expected {2 * args.pairs + 1} interfaces, netlink saw {n_nl}, /proc {n_proc}")

            result = {
                "interfaces": n_nl,
                "reps": args.reps,
                "setup_s": round(setup_s, 2),
                "netlink": cpu_per_call_ms(nl.read, args.reps),
                "netlink_dump_only": cpu_per_call_ms(dump_only(nl), args.reps),
                "proc": cpu_per_call_ms(proc.read, args.reps),
                "kernel": os.uname().release,
                "python": sys.version.split()[0],
            }
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
