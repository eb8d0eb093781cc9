"""Where the link pool's I/O thread goes, from the three profiles of runs.sh: the shares of the loop's callbacks
(everything the thread runs under ``Context.run``) by callee, and the unprofiled CPU per measurement of each thread.
Run from the repository's top: python docs/results/2026-11-28-policer-link-thread/breakdown.py"""

import json
import pstats
import statistics
from pathlib import Path

HERE = Path(__file__).parent
ROOT = "<method 'run' of '_contextvars.Context' objects>"


def entry(stats: pstats.Stats, name: str) -> tuple:
    (key,) = [k for k in stats.stats if (k[2] == name if name.startswith("<") else f"{k[0]}:{k[1]}({k[2]})".endswith(name))]
    return key


def callees(stats: pstats.Stats, parent: tuple) -> dict[str, float]:
    """Cumulative seconds of each function ``parent`` called, as called from it."""
    out = {}
    for key, (_, _, _, _, callers) in stats.stats.items():
        if parent in callers:
            out[f"{key[0]}:{key[1]}({key[2]})" if not key[0].startswith("~") else key[2]] = callers[parent][3]
    return out


def one(i: int) -> dict:
    s = pstats.Stats(str(HERE / f"profile{i}.prof"))
    root = entry(s, ROOT)
    total = s.stats[root][3]
    share = lambda d: {k: round(v / total, 3) for k, v in sorted(d.items(), key=lambda kv: -kv[1]) if v / total >= 0.01}
    fig = json.loads((HERE / f"profile{i}.json").read_text())
    return {
        "thread_cpu_ms_per_measurement": fig["thread_cpu_ms_per_measurement"],
        "cpu_ms_per_measurement": fig["cpu_ms_per_measurement"]["plain"],
        "loop_callbacks_profiled_s": round(total, 3),
        "of_the_loop": share(callees(s, root)),
        "of_a_turn_of_datagrams": share(callees(s, entry(s, "link.py:696(_datagrams)"))),
        "of_a_datagram_handed_on": share(callees(s, entry(s, "samples.py:364(_deliver)"))),
        "of_a_connection_read": share(callees(s, entry(s, "link.py:795(_readable)"))),
    }


runs = [one(i) for i in (1, 2, 3)]
print(json.dumps({"runs": runs, "link_thread_ms_median": statistics.median(
    r["thread_cpu_ms_per_measurement"]["policer-links"] for r in runs)}, indent=1))
