"""The session's tables from its JSON files: ``python table.py`` (in this folder)."""

from __future__ import annotations

import glob
import json
import statistics


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def cpu_table() -> None:
    print("| run | transport | measured / s | a measurement, ms | link thread, ms | worker, ms | RSS, MB | resets | load before |")
    print("|---|---|---|---|---|---|---|---|---|")
    per: dict[str, list[float]] = {}
    for path in sorted(glob.glob("cpu-*-*.json")):
        d = _load(path)
        t = d["link_transport"]
        th = d["thread_cpu_ms_per_measurement"]
        ms = d["cpu_ms_per_measurement"]["plain"]
        per.setdefault(t, []).append(ms)
        print(f"| {path[4:-5]} | {t} | {d['measured_per_s']['plain']} | {ms:.3f} | {th['policer-links']:.3f} | "
              f"{th['policer-worker']:.3f} | {d['rss_mb']} | {d['links']['resets']} | {d['loadavg_before'].split()[0]} |")
    for t, v in per.items():
        print(f"\n{t}: median {statistics.median(v):.3f} ms a measurement, {min(v):.3f}-{max(v):.3f}")


def rss_table() -> None:
    print("\n| run | transport | measured / s (of 4,500) | a measurement, ms | RSS, MB | links' objects, MB | "
          "connections | resets | load before |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in sorted(glob.glob("rss5000-*.json")):
        d = _load(path)
        links = d["links"]
        print(f"| {path[:-5]} | {d['link_transport']} | {d['measured_per_s']['plain']} | "
              f"{d['cpu_ms_per_measurement']['plain']:.3f} | {d['rss_mb']} | "
              f"{d['structure_bytes']['links._conns'] / 1e6:.1f} | {links['connections']} | {links['resets']} | "
              f"{d['loadavg_before'].split()[0]} |")


def conn_table() -> None:
    print("\n| connections, transport | libzmq DEALER: KiB a connection | ZMTP spoken here | open files (libzmq, here) "
          "| client CPU a sample, us (libzmq, here) | samples (libzmq, here) |")
    print("|---|---|---|---|---|---|")
    for path in sorted(glob.glob("conn-*.json")):
        d = _load(path)
        z, h = d["dealers"], d["zmtp"]
        name = f"{d['n']:,}, {d['transport']}{', CURVE' if d['curve'] else ''}"
        print(f"| {name} | {z['rss_kib_per_connection']} | {h['rss_kib_per_connection']} | "
              f"{z['fds_per_connection']}, {h['fds_per_connection']} | {z['client_cpu_us_per_sample']}, "
              f"{h['client_cpu_us_per_sample']} | {z['samples_received']}/{z['samples_sent']}, "
              f"{h['samples_received']}/{h['samples_sent']} |")


if __name__ == "__main__":
    cpu_table()
    rss_table()
    conn_table()
