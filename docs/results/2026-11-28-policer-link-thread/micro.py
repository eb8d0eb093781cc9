"""The datagram's check (``xtc.daemon.datagram.decode``) of a 1,018-byte datagram alone in a process: the best of
five runs of 20,000 calls; each call timed one by one; and one by one beside a busy Python thread.  Prints JSON."""

import json
import os
import threading
import time

from xtc.daemon import datagram as dg

key = os.urandom(32)
kid = dg.key_id_of(key)
d = dg.encode(key, kid, 5, [b"samples", b'{"schema":"xtc-samples/3","t_unix_s":1.5,"host":"r1","vrs":16}', os.urandom(900)])
keys = {kid: key, **{os.urandom(8): os.urandom(32) for _ in range(999)}}
clock = time.thread_time_ns
def best_of_five() -> float:
    """The best of five runs of 20,000 calls, us a call."""
    runs = []
    for _ in range(5):
        t = clock()
        for _ in range(20000):
            dg.decode(d, keys)
        runs.append(clock() - t)
    return min(runs) / 20000 / 1000


best = best_of_five()


def one_by_one() -> float:
    tot = 0
    for _ in range(20000):
        t = clock()
        dg.decode(d, keys)
        tot += clock() - t
    return tot / 20000 / 1000


alone = one_by_one()
stop = threading.Event()
th = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])  # spins until stop is set
th.start()
beside = one_by_one()
stop.set()
th.join()
print(json.dumps({"bytes": len(d), "us_per_call_best_of_5x20000": round(best, 2), "us_per_call_one_by_one": round(alone, 2),
                  "us_per_call_one_by_one_beside_a_busy_python_thread": round(beside, 2)}))
