"""The thread CPU inside a few of the link pool's I/O thread's functions, in the engine as it polices (not in a
micro-benchmark): each call timed with ``time.thread_time_ns`` (about 1 us a read on this machine, so about 2 us
of every figure is the timer's) from the end of the warm-up on, then ``python -m xtc_lab.policer_profile`` runs
as given.  Also the same datagram's check timed again at once after the first (warm), and 2,000 times in a row
once (a micro-benchmark inside the engine's process).  Usage, from the repository's top:

    python docs/results/2026-11-28-policer-link-thread/timers.py OUT.json --routers 1000 ... --no-profile

It patches the product's functions in this process only (a measurement; nothing here is the product)."""

import json
import sys
import time

from xtc_lab.policer_profile import main

import xtc.daemon.datagram as dg
from xtc.policer import link, samples

T: dict[str, list[int]] = {}
T0 = time.monotonic()
AFTER_S = 21.0  # the profile's warm-up at 1,000 routers (10 + routers / 100 s) and a second
clock = time.thread_time_ns


def count(label: str, ns: int) -> None:
    e = T.setdefault(label, [0, 0])
    e[0] += 1
    e[1] += ns


def timed(owner: object, name: str, label: str) -> None:
    f = getattr(owner, name)

    def w(*a, **k):
        if time.monotonic() - T0 < AFTER_S:
            return f(*a, **k)
        t = clock()
        try:
            return f(*a, **k)
        finally:
            count(label, clock() - t)

    setattr(owner, name, w)


check = dg.decode


def check_twice(*a, **k):
    """The datagram's check as the pool calls it, then again at once (warm), and once 2,000 times in a row."""
    if time.monotonic() - T0 < AFTER_S:
        return check(*a, **k)
    t = clock()
    r = check(*a, **k)
    t1 = clock()
    check(*a, **k)
    count("datagram.decode", t1 - t)
    count("datagram.decode, the same again at once", clock() - t1)
    if "datagram.decode, 2,000 in a row" not in T:
        t2 = clock()
        for _ in range(2000):
            check(*a, **k)
        T["datagram.decode, 2,000 in a row"] = [2000, clock() - t2]
    return r


dg.decode = check_twice
timed(samples, "decode_v3", "rows.decode_v3")
timed(samples.SampleStreams, "_deliver", "SampleStreams._deliver (decode_v3 and keeping the newest)")
timed(link.LinkPool, "_deliver", "LinkPool._deliver (a sample handed to its sinks)")
timed(link.LinkPool, "_datagrams", "LinkPool._datagrams (a turn of datagrams)")
timed(link.LinkPool, "_readable", "LinkPool._readable (a connection read)")

out = sys.argv[1]
main(sys.argv[2:])
with open(out, "w") as f:
    json.dump({k: {"calls": n, "us_per_call": round(ns / n / 1000, 2), "ms_total": round(ns / 1e6, 1)}
               for k, (n, ns) in T.items()}, f, indent=1)
