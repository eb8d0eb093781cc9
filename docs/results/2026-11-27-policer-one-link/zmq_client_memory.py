"""The policer's side of its daemon connections, alone: RSS of a process holding N DEALER connections
(the link; the samples over it) or N DEALER + N SUB connections (the link, and a sample stream on the
PUB socket), to N ROUTER + N PUB sockets bound by a child process, after three 2 KB samples each.

python zmq_client_memory.py [N]   (prints one JSON line)"""
import json, multiprocessing as mp, os, resource, sys, tempfile, time

import zmq


def rss() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()


def serve(d: str, n: int, ready, go, done) -> None:
    ctx = zmq.Context(); ctx.set(zmq.MAX_SOCKETS, 4 * n + 64)
    routers, pubs = [], []
    for i in range(n):
        r = ctx.socket(zmq.ROUTER); r.bind(f"ipc://{d}/{i}"); routers.append(r)
        p = ctx.socket(zmq.PUB); p.bind(f"ipc://{d}/{i}.pub"); pubs.append(p)
    ready.set()
    body = b"x" * 2000
    peers = {}
    while not done.is_set():
        go.wait(0.05)
        for i, r in enumerate(routers):  # subscribe requests: remember the peer
            while r.poll(0):
                f = r.recv_multipart(); peers[i] = f[0]; r.send_multipart([f[0], b"", b"{}"])
        if go.is_set():
            go.clear()
            for i in range(n):
                pubs[i].send_multipart([b"samples", body])
                if i in peers:
                    routers[i].send_multipart([peers[i], b"", b"samples", body])
    ctx.destroy(0)


def client(d: str, n: int, mode: str, go, q) -> None:
    """In a fresh process (memory freed by another mode's sockets would hide this one's growth)."""
    ctx = zmq.Context(); ctx.set(zmq.MAX_SOCKETS, 4 * n + 64)
    r0, f0 = rss(), len(os.listdir("/proc/self/fd"))
    socks = []
    for i in range(n):
        s = ctx.socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 0); s.connect(f"ipc://{d}/{i}")
        s.send_multipart([b"", b'{"cmd": "subscribe"}']); socks.append(s)
        if mode == "dealer+sub":
            u = ctx.socket(zmq.SUB); u.setsockopt(zmq.LINGER, 0); u.setsockopt(zmq.SUBSCRIBE, b"samples")
            u.connect(f"ipc://{d}/{i}.pub"); socks.append(u)
    time.sleep(1.5)
    for _ in range(3):
        go.set(); time.sleep(0.5)
        for s in socks:
            while s.poll(0):
                s.recv_multipart()
    q.put({"rss_kib_per_router": round((rss() - r0) / n / 1024, 1),
           "fds_per_router": round((len(os.listdir("/proc/self/fd")) - f0) / n, 2)})
    for s in socks:
        s.close(0)
    ctx.term()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    d = tempfile.mkdtemp()
    ready, go, done = mp.Event(), mp.Event(), mp.Event()
    srv = mp.Process(target=serve, args=(d, n, ready, go, done)); srv.start(); ready.wait(60)
    out = {"n": n, "zmq": zmq.zmq_version()}
    for mode in ("dealer", "dealer+sub"):
        q = mp.Queue()
        c = mp.Process(target=client, args=(d, n, mode, go, q)); c.start()
        out[mode] = q.get(timeout=120); c.join(30)
    done.set(); srv.join(30)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
