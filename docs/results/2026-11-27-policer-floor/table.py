"""The tables of README.md from the runs' JSON: ``python table.py``."""

import json
from pathlib import Path

HERE = Path(__file__).parent
CONSUMERS = ("raw", "none", "streams", "engine", "udp")
THREADS = ("ZMQbg/IO/0", "raw-recv", "policer-links", "policer-samples", "policer-engine", "policer-worker")


def load(run: str) -> dict:
    return json.loads((HERE / f"{run}.json").read_text())


def main() -> None:
    print("| round | consumer | messages / s | CPU / message (ms) | " + " | ".join(THREADS) + " | fleet CPU s/s |")
    print("|---" * (5 + len(THREADS)) + "|")
    per: dict[str, list[float]] = {c: [] for c in CONSUMERS}
    for r in (1, 2, 3):
        for c in CONSUMERS:
            d = load(f"r{r}-{c}")
            if c == "udp":
                cpu, rate, th, fleet = d["cpu_ms_per_datagram"], d["per_s_received"], {"udp-recv": d["thread_cpu_ms_per_datagram"]}, None
            else:
                cpu, rate, th, fleet = d["cpu_ms_per_message"], d["per_s"], d["thread_cpu_ms_per_message"], d["fleet_cpu_s_per_s"]
            per[c].append(cpu)
            cells = [str(th.get(t, "")) for t in THREADS]
            if c == "udp":
                cells = [f"(udp-recv {th['udp-recv']})"] + [""] * (len(THREADS) - 1)
            print(f"| {r} | {c} | {rate} | {cpu} | " + " | ".join(cells) + f" | {fleet if fleet is not None else ''} |")
    print()
    print("| consumer | CPU / message, three rounds (ms) | median |")
    print("|---|---|---|")
    for c in CONSUMERS:
        xs = per[c]
        print(f"| {c} | {' / '.join(str(x) for x in xs)} | {sorted(xs)[1]} |")


if __name__ == "__main__":
    main()
