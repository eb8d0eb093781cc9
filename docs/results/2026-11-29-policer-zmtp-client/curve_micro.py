"""What opening one CurveZMQ MESSAGE box of a 1,000-byte sample costs in Python with PyNaCl (libsodium's
``crypto_box_open_afternm``, the key precomputed once per connection as CurveZMQ allows): the CPU a hand-written
client would add per message for CURVE.  PyNaCl is not a dependency of XTC: run with it on ``PYTHONPATH``
(``pip install --target DIR pynacl``).  Prints JSON: the best of 5 x 20,000 calls, microseconds a call."""

import json
import os
import time

import nacl
from nacl import bindings as b

pk1, sk1 = b.crypto_box_keypair()
pk2, sk2 = b.crypto_box_keypair()
key = b.crypto_box_beforenm(pk2, sk1)
box = b.crypto_box_afternm(os.urandom(1000 + 16), b"CurveZMQMESSAGES" + (1).to_bytes(8, "big"), key)
best = float("inf")
for _ in range(5):
    t = time.process_time()
    for _ in range(20000):
        b.crypto_box_open_afternm(box, b"CurveZMQMESSAGES" + (1).to_bytes(8, "big"), key)
    best = min(best, (time.process_time() - t) / 20000 * 1e6)
print(json.dumps({"pynacl": nacl.__version__, "open_1016_bytes_us": round(best, 2)}))
