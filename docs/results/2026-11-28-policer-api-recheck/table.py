"""The API recheck's tables from its JSON (python table.py)."""
import json
from pathlib import Path

HERE = Path(__file__).parent
RUNS = ["bench-plain1", "bench-plain2", "bench-plain3", "bench-gc1", "bench-old1", "bench-new2", "bench-old2", "bench-new3",
        "bench-old3"]


def main() -> None:
    print("| run | product | served / s (2,000 offered) | p99 (ms) | the API's CPU / request (ms) | the policer's | "
          "the API loop's wait for a CPU (ms / s) | engine CPU / measurement (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for run in RUNS:
        d = json.loads((HERE / f"{run}.json").read_text())
        a = d["api"]
        side = "67dbf50" if "api-before" in d["product"] else "main (4939c62)"
        print(f"| {run} | {side} | {a['requests_per_s']} | {a['latency_ms']['p99']} | {a['policer_api_cpu_ms_per_request']}"
              f" | {a['policer_cpu_ms_per_request']} | {a['api_loop_runqueue_wait_ms_per_s']} | {d['engine_cpu_ms_per_measurement']} |")
    print()
    print("| process | CPU (s) | collector's CPU (s) | passes by generation (0 / 1 / 2) |")
    print("|---|---|---|---|")
    for f in sorted((HERE / "gc").glob("*.json")):
        d = json.loads(f.read_text())
        argv = " ".join(d["argv"])
        what = ("the API (xtc policer serve)" if "serve" in argv else "the engine" if "engine_proc" in argv
                else "the stand-in fleet" if "policer_fleet" in argv else "the bench (load generator)")
        g = d["gc"]
        print(f"| {what} | {d['cpu_s']:.2f} | {sum(v[1] for v in g.values()):.3f} | "
              f"{' / '.join(str(g.get(k, [0])[0]) for k in ('0', '1', '2'))} |")


if __name__ == "__main__":
    main()
