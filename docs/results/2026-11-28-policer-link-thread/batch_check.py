"""Sizing, not the product: a turn of 64 samples datagrams checked by one numba call (the key found by its id in a
sorted table, the keyed BLAKE2b-128 tag computed by libsodium's ``crypto_generichash``, which is the same
function as hashlib's ``blake2b(key=..., digest_size=16)``, compared, the sequence number read), against
``xtc.daemon.datagram.decode`` called per datagram in Python, both alone in this process.  A bad tag is refused
(checked).  Needs libsodium (Debian: libsodium23) and numba.  Prints JSON."""
import ctypes
import json
import os
import time

import numba
import numpy as np

from xtc.daemon import datagram as dg

sodium = ctypes.CDLL("libsodium.so.23")
assert sodium.sodium_init() >= 0
gh = sodium.crypto_generichash
gh.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_size_t]
gh.restype = ctypes.c_int

N_ROUTERS = 1000
keys = [os.urandom(32) for _ in range(N_ROUTERS)]
kids = [dg.key_id_of(k) for k in keys]
frames_of = lambda i: [b"samples", b'{"schema":"xtc-samples/3","t_unix_s":%d.5,"host":"r%d","vrs":16}' % (1700000000 + i, i), os.urandom(900)]
datagrams = [dg.encode(keys[i], kids[i], 5 + i, frames_of(i)) for i in range(N_ROUTERS)]

# the key table: ids as uint64 (big-endian bytes read as one number), sorted, keys beside
ids = np.array([int.from_bytes(k, "big") for k in kids], dtype=np.uint64)
order = np.argsort(ids)
ids_sorted = ids[order]
key_table = np.frombuffer(b"".join(keys[i] for i in order), dtype=np.uint8).reshape(-1, 32).copy()

TURN = 64
buf = np.zeros((TURN, 2048), dtype=np.uint8)
lens = np.zeros(TURN, dtype=np.int64)


@numba.njit(cache=False)
def check_turn(buf, lens, n, ids_sorted, key_table, out_key, out_seq, out_ok, tag):
    for j in range(n):
        L = lens[j]
        out_ok[j] = False
        if L < 4 + 8 + 8 + 1 + 16:
            continue
        if buf[j, 0] != 88 or buf[j, 1] != 84 or buf[j, 2] != 85 or buf[j, 3] != 49:  # XTU1
            continue
        kid = np.uint64(0)
        for b in range(8):
            kid = (kid << np.uint64(8)) | np.uint64(buf[j, 4 + b])
        k = np.searchsorted(ids_sorted, kid)
        if k >= ids_sorted.shape[0] or ids_sorted[k] != kid:
            continue
        gh(tag.ctypes.data, 16, buf[j].ctypes.data, L - 16, key_table[k].ctypes.data, 32)
        diff = 0
        for b in range(16):
            diff |= tag[b] ^ buf[j, L - 16 + b]
        if diff != 0:
            continue
        seq = np.uint64(0)
        for b in range(8):
            seq = (seq << np.uint64(8)) | np.uint64(buf[j, 12 + b])
        out_key[j] = k
        out_seq[j] = seq
        out_ok[j] = True


out_key = np.zeros(TURN, np.int64); out_seq = np.zeros(TURN, np.uint64); out_ok = np.zeros(TURN, np.bool_)
tag = np.zeros(16, np.uint8)
for j in range(TURN):
    d = datagrams[j]
    buf[j, :len(d)] = np.frombuffer(d, np.uint8); lens[j] = len(d)
check_turn(buf, lens, TURN, ids_sorted, key_table, out_key, out_seq, out_ok, tag)  # compile
assert out_ok.all()
# a bad tag is refused
buf[3, 100] ^= 1
check_turn(buf, lens, TURN, ids_sorted, key_table, out_key, out_seq, out_ok, tag)
assert not out_ok[3] and out_ok.sum() == TURN - 1
buf[3, 100] ^= 1

clock = time.thread_time_ns
REP = 2000
t = clock()
for _ in range(REP):
    check_turn(buf, lens, TURN, ids_sorted, key_table, out_key, out_seq, out_ok, tag)
batch_us = (clock() - t) / REP / TURN / 1000

keymap = dict(zip(kids, keys))
views = [memoryview(d) for d in datagrams[:TURN]]
t = clock()
for _ in range(REP // 10):
    for v in views:
        dg.decode(v, keymap)
py_us = (clock() - t) / (REP // 10) / TURN / 1000
print(json.dumps({"turn": TURN, "batch_numba_libsodium_us_per_datagram": round(batch_us, 2),
                  "python_datagram_decode_us_per_datagram": round(py_us, 2)}))
