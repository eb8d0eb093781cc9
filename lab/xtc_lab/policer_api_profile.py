"""The policer API's CPU by function, under the bench's mix while the engine polices a fleet:
``python -m xtc_lab.policer_api_profile``.

    python -m xtc_lab.policer_api_profile [--routers 1000] [--rate 2000] [--duration 10] [--top 60] --out FILE

Runs :func:`~xtc_lab.policer_bench.run_fleet_bench` (the path behind ``xtc policer bench --fleet``:
the stand-in fleet, 10 % dead, 16 VRs a router, a policer on SQLite, 3 s of policing, then the API's
load at ``--rate``) with the API's process (``xtc policer serve``, found by its command line; not the
engine's, not the fleet's) under yappi, the CPU clock, every thread, builtins included: started by a
``sitecustomize`` this module puts first on the children's ``PYTHONPATH``, switched on by SIGUSR2 just
before the API's timed load and off (its statistics saved) by the next SIGUSR2 just after it.  So the
registration and the warm-up are not in the profile.  Prints, and writes as JSON, the functions by
inclusive CPU per request and their own CPU per request, with the bench's figures of the same run.

A profiler inflates every Python call several times, and more than C code such as sqlite3's or the
system calls: the shares say *where* the CPU goes, ``xtc policer bench`` and
``python -m xtc_lab.policer_api_cpu`` *how much*.  Needs yappi in the environment (``pip install yappi``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["HOOK", "main", "rows"]

#: The children's ``sitecustomize``: in the API's process only, yappi on the first SIGUSR2, off and saved
#: (pstat, to ``$XTC_LAB_YAPPI_DIR/<pid>.pstat``) on the second.
HOOK = '''
import os, signal

def _xtc_lab_yappi():
    out = os.environ.get("XTC_LAB_YAPPI_DIR")
    try:
        argv = open("/proc/self/cmdline", "rb").read().split(b"\\0")
    except OSError:
        return
    if not out or b"policer" not in argv or b"serve" not in argv:
        return
    import yappi

    def toggle(_sig, _frame):
        if not yappi.is_running():
            yappi.set_clock_type("cpu")
            yappi.start(builtins=True, profile_threads=True)
        else:
            yappi.stop()
            path = os.path.join(out, f"{os.getpid()}.pstat")
            yappi.get_func_stats().save(path + ".tmp", type="pstat")
            os.rename(path + ".tmp", path)

    signal.signal(signal.SIGUSR2, toggle)

_xtc_lab_yappi()
'''


def rows(pstat: Path, requests: int, top: int) -> list[dict[str, Any]]:
    """The ``top`` functions of a pstat file by inclusive CPU, per request (ms) and calls per request."""
    import pstats

    st = pstats.Stats(str(pstat))
    out = []
    for (file, line, name), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        out.append({"function": f"{name} ({Path(file).name}:{line})", "incl_ms_per_request": round(1000 * ct / requests, 4),
                    "self_ms_per_request": round(1000 * tt / requests, 4), "calls_per_request": round(nc / requests, 2)})
    out.sort(key=lambda r: r["incl_ms_per_request"], reverse=True)
    return out[:top]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m xtc_lab.policer_api_profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--routers", type=int, default=1000, help="the fleet's routers (default 1000)")
    ap.add_argument("--rate", type=float, default=2000.0, help="API requests/s offered (default 2000)")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of API load profiled (default 10)")
    ap.add_argument("--top", type=int, default=80, help="functions listed (default 80)")
    ap.add_argument("--out", type=Path, required=True, help="the JSON")
    args = ap.parse_args(argv)
    try:
        import yappi  # noqa: F401 - the children need it; fail here, before a fleet starts
    except ImportError:
        print("python -m xtc_lab.policer_api_profile: needs yappi (pip install yappi)", file=sys.stderr)
        return 2
    from xtc_lab.policer_bench import run_fleet_bench

    with tempfile.TemporaryDirectory(prefix="xtc-api-profile-") as tmp:
        hook_dir, out_dir = Path(tmp, "hook"), Path(tmp, "out")
        hook_dir.mkdir()
        out_dir.mkdir()
        (hook_dir / "sitecustomize.py").write_text(HOOK)
        old_path = os.environ.get("PYTHONPATH", "")
        os.environ["PYTHONPATH"] = f"{hook_dir}:{old_path}" if old_path else str(hook_dir)
        os.environ["XTC_LAB_YAPPI_DIR"] = str(out_dir)
        api_pid: list[int] = []

        def window(pid: int, start: bool, _url: str, _token: str) -> None:
            api_pid.append(pid)
            os.kill(pid, signal.SIGUSR2)
            if not start:  # wait for the statistics
                t = time.monotonic()
                while not (out_dir / f"{pid}.pstat").exists() and time.monotonic() - t < 120:
                    time.sleep(0.2)

        try:
            res = run_fleet_bench(routers=args.routers, duration_s=3.0, api_rate_per_s=args.rate,
                                  api_duration_s=args.duration, api_window=window)
        finally:
            os.environ["PYTHONPATH"] = old_path
            del os.environ["XTC_LAB_YAPPI_DIR"]
        pstat = out_dir / f"{api_pid[-1]}.pstat"
        if not pstat.exists():
            print("python -m xtc_lab.policer_api_profile: the API's process saved no profile", file=sys.stderr)
            return 1
        n = res["api"]["requests"]
        out = {"routers": args.routers, "requests": n, "api": res["api"], "api_goals": res["api_goals"],
               "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
               "functions_by_inclusive_cpu": rows(pstat, n, args.top)}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{n} requests, API process {res['api']['policer_api_cpu_ms_per_request']} ms/request (profiled)")
    for r in out["functions_by_inclusive_cpu"]:
        print(f"{r['incl_ms_per_request']:8.4f} {r['self_ms_per_request']:8.4f} {r['calls_per_request']:7.2f}  {r['function']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
