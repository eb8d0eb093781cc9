"""The decode session's table: each round's micro-benchmark and profile, before and after (python table.py)."""
import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
THREADS = ("policer-links", "policer-worker")


def main() -> None:
    rounds = sorted({int(p.stem[len("profile"):].split("-")[0]) for p in HERE.glob("profile*-*.json")})
    rows = {side: {"micro": [], "all": [], **{t: [] for t in THREADS}} for side in ("before", "after")}
    print("| round | side | decode_v3, moving message (us) | CPU / measurement (ms) | link pool's thread | worker | measured / s | RSS (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    for k in rounds:
        for side in ("before", "after"):
            micro = json.loads((HERE / f"micro{k}-{side}.json").read_text())
            prof = json.loads((HERE / f"profile{k}-{side}.json").read_text())
            th = prof["thread_cpu_ms_per_measurement"]
            r = rows[side]
            r["micro"].append(micro["moving_us"])
            r["all"].append(prof["cpu_ms_per_measurement"]["plain"])
            for t in THREADS:
                r[t].append(th[t])
            print(f"| {k} | {side} | {micro['moving_us']} | {prof['cpu_ms_per_measurement']['plain']} | {th['policer-links']}"
                  f" | {th['policer-worker']} | {prof['measured_per_s']['plain']} | {prof['rss_mb']} |")
    print()
    print("| side | decode_v3 (us), median | CPU / measurement (ms), median | link pool's thread, median | worker, median |")
    print("|---|---|---|---|---|")
    for side, r in rows.items():
        med = {k: round(statistics.median(v), 4) for k, v in r.items()}
        print(f"| {side} | {med['micro']} | {med['all']} | {med['policer-links']} | {med['policer-worker']} |")


if __name__ == "__main__":
    main()
