"""The README's tables from this folder's JSON: ``python table.py`` (per request kind: cpu-*.json; the 2,000/s
runs: bench-*.json and tail-*.json, with the 1-minute load average runs.log recorded at each run's start).

The load averages are read by the lab's ``xtc_lab.alternate.start_loads`` (the same bytes out); the script as it
ran read them itself (git show 21cdbef:docs/results/2026-11-27-policer-api-floor/table.py)."""
import json
import sys
from pathlib import Path

from xtc_lab.alternate import start_loads

HERE = Path(__file__).parent


def loads() -> dict[str, str]:
    return start_loads(HERE / "runs.log")


def kinds(names: list[str]) -> None:
    ds = {n: json.loads((HERE / f"{n}.json").read_text()) for n in names}
    print("| request | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    first = ds[names[0]]["best_ms_per_request"]
    for k in first:
        print(f"| `{k}` | " + " | ".join(str(ds[n]["best_ms_per_request"][k]) for n in names) + " |")
    print("| **the bench's mix, weighted** | " + " | ".join(f"**{ds[n]['mix_ms_per_request']}**" for n in names) + " |")
    print("| engine measured/s meanwhile | " + " | ".join(str(ds[n].get("engine_measured_per_s")) for n in names) + " |")
    print("| load (1 min) at the runs | " + " | ".join(
        "-".join(str(r["loadavg_1_5_15"][0]) for r in ds[n]["runs"]) for n in names) + " |")


def benches(pattern: str) -> None:
    if not list(HERE.glob(pattern)):
        return
    ld = loads()
    print("| run | load (1 min) | served 2xx/s | p50 ms | p99 ms | reads p99 | writes p99 | p99 from due | API CPU ms/request"
          " | policer CPU ms/request | engine measured/s | API loop waiting for a CPU, ms/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for f in sorted(HERE.glob(pattern)):
        d = json.loads(f.read_text())
        g, a = d["api_goals"], d["api"]
        k = a.get("latency_by_kind", {})
        print(f"| {f.stem} | {ld.get(f.stem, '?')} | {g['served_2xx_per_s']} | {g['p50_ms']} | {g['p99_ms']} | "
              f"{k.get('read', {}).get('p99_ms')} | {k.get('write', {}).get('p99_ms')} | "
              f"{a.get('latency_from_due_ms', {}).get('p99')} | "
              f"{g['policer_api_cpu_ms_per_request']} | {g['policer_cpu_ms_per_request']} | {g['engine_measured_per_s']} | "
              f"{a.get('api_loop_runqueue_wait_ms_per_s')} |")


def phases(pattern: str) -> None:
    """Per run: the share of the slowest 1 % sent in each tenth of the engine's period, and each second's p99."""
    if not list(HERE.glob(pattern)):
        return
    print("| run | share of the slowest 1 % by phase of the period (0-100 ms, ..., 900-1000 ms) | p99 ms each second |")
    print("|---|---|---|")
    for f in sorted(HERE.glob(pattern)):
        a = json.loads(f.read_text())["api"]
        ph = " ".join(f"{b['share_of_slowest_1pct']:.2f}" for b in a.get("latency_by_phase", []))
        secs = " ".join(f"{s['p99_ms']:.0f}" for s in a.get("latency_p99_by_second", []))
        print(f"| {f.stem} | {ph} | {secs} |")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("kinds", "all"):
        kinds(sys.argv[2:] or sorted(p.stem for p in HERE.glob("cpu-*.json")))
    if what in ("bench", "all"):
        benches("bench-*.json")
        benches("writes-*.json")
        benches("tail-*.json")
        benches("swi-*.json")
        benches("rate1500-*.json")
    if what in ("phases", "all"):
        phases("bench-*.json")
        phases("writes-*.json")
        phases("tail-*.json")
        phases("swi-*.json")
