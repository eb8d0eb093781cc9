"""The HTTP server's floor: the server's CPU per request of the policer's app served as `xtc policer serve` serves it
(xtc.policer.service._uvicorn: httptools, the bounded protocol, the event loop it picks), on a SQLite file with
one network, `GET /networks/net0` (or PATH) from a client process on 8 kept-alive connections (the lab's
BenchConn), N requests after 400 to warm up.  Prints one JSON line: the loop, the server process's user + system
CPU per request (its client is another process).  Run with uvloop unimportable to see asyncio's own loop:
``PYTHONPATH=DIR python floor.py`` where DIR/uvloop.py raises ImportError (floor.sh)."""
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

from xtc.policer import service
from xtc.policer.api import create_app
from xtc.policer.config import PolicerConfig
from xtc.policer.store import Store

path = sys.argv[1] if len(sys.argv) > 1 else "/networks/net0"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
cfg = PolicerConfig(tokens=frozenset({"t" * 24}))
store = Store(f"sqlite:///{tempfile.mkdtemp(prefix='xtc-floor-')}/floor.db")
store.add_network("net0", "", "floor")
sock = service.bind_socket("127.0.0.1", 0)
port = sock.getsockname()[1]
srv = service._uvicorn(create_app(cfg, store, None), False, cfg)
CLIENT = f"""
import asyncio, sys
from xtc_lab.policer_bench import BenchConn
async def go():
    conns = [BenchConn("127.0.0.1", {port}) for _ in range(8)]
    async def run(c, k):
        for _ in range(k):
            await c.request("GET", "{path}", None, None)
    await asyncio.gather(*(run(c, 50) for c in conns))
    print("go", flush=True)
    sys.stdin.readline()
    await asyncio.gather(*(run(c, {n} // 8) for c in conns))
    print("done", flush=True)
asyncio.run(go())
"""
got = {}


def drive() -> None:
    while not srv.started:
        time.sleep(0.05)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the client: the same on both sides
    p = subprocess.Popen([sys.executable, "-c", CLIENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    p.stdout.readline()
    got["r0"] = resource.getrusage(resource.RUSAGE_SELF)
    p.stdin.write("\n")
    p.stdin.flush()
    p.stdout.readline()
    got["r1"] = resource.getrusage(resource.RUSAGE_SELF)
    p.wait()
    srv.should_exit = True


threading.Thread(target=drive).start()
srv.run(sockets=[sock])
r0, r1 = got["r0"], got["r1"]
print(json.dumps({"loop": srv.config.loop, "path": path, "requests": n, "load_1min": round(os.getloadavg()[0], 2),
                  "server_cpu_ms_per_request": round(1000 * (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / n, 4)}))
