"""One 16-VR message decoded alone, /2 (decode_rows) against /3 (decode_v3, with the router's last memory): python micro.py."""

import random
import timeit

from xtc.daemon import api
from xtc.policer.rows import decode_rows, decode_v3

rng = random.Random(1)
def rows():
    return sorted([[f"vr{j:02d}", "active", True, 5e4, rng.uniform(1e4, 5e4), rng.uniform(1e4, 6e4), rng.uniform(5, 90), 100.0, None, None][:len(api.SAMPLE_FIELDS)] for j in range(16)], key=lambda r: r[0])
print(api.SAMPLE_FIELDS)
msgs2 = [api.samples_message(1.7e9 + k, 1.0, r) for k, r in enumerate(rows() for _ in range(200))]
rs = [rows() for _ in range(200)]
msgs3 = [api.samples_message_v3(1.7e9 + k, 1.0, r) for k, r in enumerate(rs)]
_, mem = decode_v3(msgs3[0], 64, 1 << 20)
def d2():
    for m in msgs2: decode_rows(m, 64, 1 << 20)
def d3():
    for m in msgs3: decode_v3(m, 64, 1 << 20, mem)
for f in (d2, d3, d2, d3):
    print(f.__name__, round(min(timeit.repeat(f, number=5, repeat=5)) / 1000 * 1e6, 1), "us a message")
