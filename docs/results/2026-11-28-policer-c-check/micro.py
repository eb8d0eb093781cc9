"""The datagram's check in C (ccheck.c, built by build.sh) against xtc.daemon.datagram.decode, alone in this
process: the same answers (every valid datagram, and each kind of bad one with its reason and message), the CPU
per call of each (best of 5 x 20,000 calls, the same 1,000 datagrams of 16-VR messages in turn), and the RSS the
module adds when imported.  Prints JSON.  From the repository's top:
``python docs/results/2026-11-28-policer-c-check/micro.py``."""

import json
import os
import re
import struct
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))


def rss_kb() -> int:
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


from xtc.daemon import datagram as dg

rss0 = rss_kb()
import ccheck

rss1 = rss_kb()
ccheck.set_error(dg.DatagramError)

N = 1000
keys = [os.urandom(32) for _ in range(N)]
kids = [dg.key_id_of(k) for k in keys]
table = dict(zip(kids, keys))


def frames_of(i: int) -> list[bytes]:  # a samples message's three frames, of the size of a 16-VR xtc-samples/3 one
    return [b"samples", b'{"schema":"xtc-samples/3","t_unix_s":%d.5,"vrs":16}' % (1700000000 + i), os.urandom(900)]


good = [dg.encode(keys[i], kids[i], 5 + i, frames_of(i)) for i in range(N)]


def signed(body: bytes, i: int = 0) -> bytes:  # a datagram whose tag checks, whatever its body says
    return body + dg._tag(keys[i], body)


head = struct.Struct("!4s8sQB")
bad = {
    "short": good[0][:30],
    "magic": b"XTU2" + good[0][4:],
    "unknown_key": good[0][:4] + b"\x00" * 8 + good[0][12:],
    "bad_tag": good[0][:-1] + bytes([good[0][-1] ^ 1]),
    "no frames": signed(head.pack(b"XTU1", kids[0], 1, 0)),
    "nine frames": signed(head.pack(b"XTU1", kids[0], 1, 9) + b"\x00\x00\x00\x00" * 9),
    "lengths past": signed(head.pack(b"XTU1", kids[0], 1, 3) + b"\x00\x00\x00\x01"),
    "frame past": signed(head.pack(b"XTU1", kids[0], 1, 1) + struct.pack("!I", 99) + b"abc"),
    "bytes after": signed(head.pack(b"XTU1", kids[0], 1, 1) + struct.pack("!I", 1) + b"ab"),
}


def answer(f, data):
    try:
        return f(memoryview(data), table)
    except dg.DatagramError as e:
        return ("error", e.reason, str(e))


same_good = all(answer(dg.decode, d) == answer(ccheck.decode, d) for d in good)
bad_answers = {k: [answer(dg.decode, d), answer(ccheck.decode, d)] for k, d in bad.items()}
same_bad = all(a == b and a[0] == "error" for a, b in bad_answers.values())


def per_call_us(f) -> float:
    views = [memoryview(d) for d in good]
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        for _ in range(20):
            for v in views:
                f(v, table)
        best = min(best, time.process_time() - t)
    return round(best / (20 * N) * 1e6, 2)


print(json.dumps({"same_answers_valid": same_good, "same_answers_bad": same_bad, "bad": bad_answers,
                  "python_us_per_datagram": per_call_us(dg.decode), "c_us_per_datagram": per_call_us(ccheck.decode),
                  "rss_added_kb": rss1 - rss0, "datagram_bytes": len(good[0])}, indent=1))
