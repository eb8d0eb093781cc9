"""The API's CPU by function (yappi, CPU clock, every thread): the app served in this process by the
policer's own uvicorn set-up on a temporary SQLite file (no engine: it runs in a process of its own
in production), the bench's request mix offered by ``xtc policer bench``'s load generator in a child
process.  Prints the functions by inclusive CPU per request and writes them as JSON.

    .venv/bin/pip install yappi
    .venv/bin/python docs/results/2026-11-26-policer-api/yappi_api.py --rate 1000 --duration 5 --out x.json
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
import yappi

from xtc.policer.config import PolicerConfig
from xtc.policer.httpproto import bounded_protocol
from xtc.policer.service import bind_socket
from xtc.policer.store import Store

try:
    from xtc.policer.api import create_app
except ImportError:  # before the split
    from xtc.policer.app import create_app  # type: ignore[no-redef]

LOAD = """
import json, sys
from xtc_lab.policer_bench import run_bench
print(json.dumps(run_bench(rate_per_s={rate}, duration_s={duration}, url=sys.argv[1], token=sys.argv[2])))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--top", type=int, default=70)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="xtc-policer-yappi-") as tmp:
        cfg = PolicerConfig(tokens=frozenset({token}), db_url=f"sqlite:///{tmp}/p.db")
        store = Store(cfg.db_url)
        app = create_app(cfg, store)
        sock = bind_socket("127.0.0.1", 0)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        # As the policer serves (xtc.policer.service): httptools with the head bounded, no access log.
        srv = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan="on",
                                            http=bounded_protocol(cfg.header_timeout_s)))
        result: dict = {}

        def load() -> None:
            time.sleep(1.0)
            out = subprocess.run([sys.executable, "-c", LOAD.format(rate=args.rate, duration=args.duration), url, token],
                                 capture_output=True, text=True, timeout=120)
            result.update(json.loads(out.stdout.strip().splitlines()[-1]))
            srv.should_exit = True

        t = threading.Thread(target=load)
        t.start()
        yappi.set_clock_type("cpu")
        yappi.start(builtins=True)
        cpu0 = time.process_time()
        srv.run(sockets=[sock])
        cpu_s = time.process_time() - cpu0
        yappi.stop()
        t.join()
        store.close()
    n = result["requests"] + 24  # the load's set-up: 8 networks, 8 SLAs, 4 routers... (approximately)
    stats = yappi.get_func_stats()
    rows = sorted(((f.ttot, f.tsub, f.ncall, f"{f.name} ({Path(f.module).name}:{f.lineno})") for f in stats),
                  reverse=True)
    res = {"requests": n, "process_cpu_ms_per_request_with_profiler": round(1000 * cpu_s / n, 3),
           "load": result,
           "functions_by_inclusive_cpu": [{"function": name, "incl_ms_per_request": round(1000 * tt / n, 4),
                                           "self_ms_per_request": round(1000 * ts / n, 4), "calls_per_request": round(nc / n, 2)}
                                          for tt, ts, nc, name in rows[:args.top]]}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"requests {n}, process CPU {res['process_cpu_ms_per_request_with_profiler']} ms/request (profiled)")
    for r in res["functions_by_inclusive_cpu"]:
        print(f"{r['incl_ms_per_request']:8.4f} {r['self_ms_per_request']:8.4f} {r['calls_per_request']:7.2f}  {r['function']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
