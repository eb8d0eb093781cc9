"""Measure what the XCo protocol's choices rest on: transport round trip and encoding cost.

``python -m xtc_lab.xco.transport_latency [--n 5000] [--json]``

- Round trip agent -> controller -> agent on loopback, the controller in another process that
  decodes each message and answers with an encoded directive (what the real controller does,
  minus the scheduler): UDP (one datagram each way) and ZeroMQ (DEALER agent, ROUTER controller).
- Encode + decode of a backlog report and a directive: the struct codec of
  :mod:`xtc.xco.protocol` and the same fields as JSON.

Prints p50/p99 in microseconds.  The numbers go in docs/xco-protocol.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import time
from typing import Any, Callable

from xtc.xco import protocol as P


def _answer(data: bytes) -> bytes:
    m = P.decode(data)
    h = m.header
    return P.encode(P.Directive(P.Header(h.host, 7, h.seq, h.t_us), 3, h.t_us + 500, 2000))


def _udp_server(port_q: Any, n: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port_q.put(s.getsockname()[1])
    for _ in range(n):
        data, addr = s.recvfrom(P.MAX_DATAGRAM)
        s.sendto(_answer(data), addr)
    s.close()


def _zmq_server(port_q: Any, n: int) -> None:
    import zmq

    ctx = zmq.Context()
    r = ctx.socket(zmq.ROUTER)
    port = r.bind_to_random_port("tcp://127.0.0.1")
    port_q.put(port)
    for _ in range(n):
        ident, data = r.recv_multipart()
        r.send_multipart([ident, _answer(data)])
    r.close(0)
    ctx.term()


def _pct(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50_us": round(xs[len(xs) // 2], 1), "p99_us": round(xs[int(len(xs) * 0.99)], 1),
            "mean_us": round(statistics.fmean(xs), 1)}


def _msg(i: int) -> bytes:
    return P.encode(P.Backlog(P.Header(1, 5, i + 1, time.time_ns() // 1000), (2, 3)))


def rtt_udp(n: int, warm: int = 200) -> dict[str, float]:
    """Round trips over UDP on loopback, microseconds."""
    q: Any = mp.Queue()
    p = mp.Process(target=_udp_server, args=(q, n + warm))
    p.start()
    port = q.get()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", port))
    out = []
    for i in range(n + warm):
        t0 = time.perf_counter()
        s.send(_msg(i))
        P.decode(s.recv(P.MAX_DATAGRAM))
        if i >= warm:
            out.append((time.perf_counter() - t0) * 1e6)
    s.close()
    p.join()
    return _pct(out)


def rtt_zmq(n: int, warm: int = 200) -> dict[str, float]:
    """Round trips over ZeroMQ (DEALER -> ROUTER -> DEALER, TCP on loopback), microseconds."""
    import zmq

    q: Any = mp.Queue()
    p = mp.Process(target=_zmq_server, args=(q, n + warm))
    p.start()
    port = q.get()
    ctx = zmq.Context()
    d = ctx.socket(zmq.DEALER)
    d.connect(f"tcp://127.0.0.1:{port}")
    out = []
    for i in range(n + warm):
        t0 = time.perf_counter()
        d.send(_msg(i))
        P.decode(d.recv())
        if i >= warm:
            out.append((time.perf_counter() - t0) * 1e6)
    d.close(0)
    ctx.term()
    p.join()
    return _pct(out)


def _time_each(f: Callable[[], Any], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t0) / n * 1e6


def codec_cost(n: int = 20000) -> dict[str, dict[str, float]]:
    """Encode + decode of a backlog report (8 destinations) and a directive, microseconds each."""
    h = P.Header(12, 77, 1234, 1_700_000_000_000_000)
    back = P.Backlog(h, tuple(range(20, 28)))
    dirv = P.Directive(h, 31, 1_700_000_000_010_000, 10_000)
    jb = {"v": 1, "type": "backlog", "host": 12, "session": 77, "seq": 1234, "t_us": h.t_us, "dests": list(range(20, 28))}
    jd = {"v": 1, "type": "directive", "host": 12, "session": 77, "seq": 1234, "t_us": h.t_us,
          "dest": 31, "start_us": dirv.start_us, "length_us": 10_000}
    out: dict[str, dict[str, float]] = {}
    for name, m, j in (("backlog", back, jb), ("directive", dirv, jd)):
        wire = P.encode(m)
        jwire = json.dumps(j, separators=(",", ":")).encode()
        out[name] = {
            "struct_encode_us": round(_time_each(lambda: P.encode(m), n), 2),
            "struct_decode_us": round(_time_each(lambda: P.decode(wire), n), 2),
            "struct_bytes": len(wire),
            "json_encode_us": round(_time_each(lambda: json.dumps(j, separators=(",", ":")).encode(), n), 2),
            "json_decode_us": round(_time_each(lambda: json.loads(jwire), n), 2),
            "json_bytes": len(jwire),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000, help="round trips per transport")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = {"udp": rtt_udp(a.n), "zmq": rtt_zmq(a.n), "codec": codec_cost()}
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        for k in ("udp", "zmq"):
            r = res[k]
            print(f"{k:4} round trip: p50 {r['p50_us']} us  p99 {r['p99_us']} us  mean {r['mean_us']} us")
        for name, c in res["codec"].items():
            print(f"{name}: struct {c['struct_encode_us']} + {c['struct_decode_us']} us ({c['struct_bytes']} B); "
                  f"json {c['json_encode_us']} + {c['json_decode_us']} us ({c['json_bytes']} B)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
