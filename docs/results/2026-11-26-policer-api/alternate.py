"""``xtc policer bench`` (``run_bench``: SQLite, one API process, the bench's mix) at one rate, the code
before and after alternately, each in a child Python (run from /tmp) whose ``PYTHONPATH`` puts that
tree's ``xtc`` and ``xtc_lab`` first, with a ``sitecustomize`` that drops the editable installs' import
hooks (they would win over ``PYTHONPATH``); the load average is recorded before each run (the
machine is shared).  The trees: ``git archive <commit> | tar -x -C <dir>``.

    .venv/bin/python docs/results/2026-11-26-policer-api/alternate.py BEFORE_TREE AFTER_TREE --rounds 3 --out x.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SITECUSTOMIZE = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]
"""

RUN = ("import json; from xtc_lab.policer_bench import run_bench; "
       "print(json.dumps(run_bench(rate_per_s={rate}, duration_s={duration})))")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    runs = []
    shim = tempfile.mkdtemp(prefix="xtc-alternate-")
    Path(shim, "sitecustomize.py").write_text(SITECUSTOMIZE)
    for i in range(args.rounds):
        for which, tree in (("before", args.before), ("after", args.after)):
            env = {**os.environ, "PYTHONPATH": f"{shim}:{tree}:{tree}/lab"}
            load = os.getloadavg()
            out = subprocess.run([sys.executable, "-c", RUN.format(rate=args.rate, duration=args.duration)], env=env,
                                 capture_output=True, text=True, timeout=300, cwd="/tmp")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            row = {"round": i + 1, "code": which, "loadavg_1_5_15": [round(x, 2) for x in load],
                   "requests_per_s": res["requests_per_s"], "latency_ms": res["latency_ms"],
                   "server_cpu_ms_per_request": res["server_cpu_ms_per_request"],
                   "client_cpu_ms_per_request": res["client_cpu_ms_per_request"], "errors": res["errors"]}
            print(json.dumps(row), flush=True)
            runs.append(row)
    Path(args.out).write_text(json.dumps({"rate_per_s": args.rate, "duration_s": args.duration, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
