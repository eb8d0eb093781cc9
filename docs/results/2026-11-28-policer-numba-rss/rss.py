"""The resident memory numba would add to a policer engine's process (issue 50; a measurement, not the product).

In one fresh process: the RSS after the engine's own imports (numpy, pyzmq, ``xtc.policer.engine``), after
``import numba``, and after the policer-link-thread session's batch check (``batch_check.py``: one numba
function that checks a turn of datagrams with libsodium's keyed BLAKE2b) is compiled and run, then after glibc's
``malloc_trim(0)``.  The check is compiled with ``cache=False`` as that session ran it; ``CACHED=1`` runs a copy
with ``cache=True`` (numba caches no function that calls a ctypes function: it compiles it again).  Prints JSON.
Run from the repository's top: ``python docs/results/2026-11-28-policer-numba-rss/rss.py``.
"""
import contextlib
import ctypes
import io
import json
import os
import re
import runpy
import tempfile
from pathlib import Path

CHECK = Path("docs/results/2026-11-28-policer-link-thread/batch_check.py")


def rss_mb() -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


out = {"cached": os.environ.get("CACHED") == "1"}
import numpy  # noqa: F401  (the engine's own imports first)
import zmq  # noqa: F401

import xtc.policer.engine  # noqa: F401

out["engine_imports_mb"] = rss_mb()
import numba

out["numba"] = numba.__version__
out["numba_imported_mb"] = rss_mb()
src = CHECK.read_text()
with tempfile.TemporaryDirectory() as tmp:
    script = Path(tmp) / CHECK.name
    script.write_text(src.replace("cache=False", "cache=True") if out["cached"] else src)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        runpy.run_path(str(script), run_name="__main__")
out["check_us_per_datagram"] = json.loads(printed.getvalue()).get("batch_numba_libsodium_us_per_datagram")
out["check_compiled_and_run_mb"] = rss_mb()
ctypes.CDLL("libc.so.6").malloc_trim(0)
out["after_malloc_trim_mb"] = rss_mb()
print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}, indent=1))
