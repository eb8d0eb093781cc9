"""The tables of this session's README from its JSON files: python table.py"""
import glob
import json
import os

os.chdir(os.path.dirname(os.path.abspath(__file__)))
print("| run | CPU / measurement (ms) | link thread | worker | cycle thread | libzmq I/O | measured / s | link thread ms/s | load before / after |")
print("|---|---|---|---|---|---|---|---|---|")
for f in sorted(glob.glob("profile*.json")):
    d = json.load(open(f))
    t = d.get("thread_cpu_ms_per_measurement", {})
    n = d["measured_per_s"]["plain"]
    print(f"| {f[:-5]} | {d['cpu_ms_per_measurement']['plain']:.4f} | {t.get('policer-links', 0):.4f} | "
          f"{t.get('policer-worker', 0):.4f} | {t.get('policer-engine', 0):.4f} | {t.get('ZMQbg/IO/0', 0):.4f} | {n} | "
          f"{t.get('policer-links', 0) * n:.0f} | {d['loadavg_before']} / {d['loadavg_after']} |")
print()
print("| run | engine CPU / measurement (ms) | measured / s | cycle p99 (ms) | engine RSS (MB) | load before |")
print("|---|---|---|---|---|---|")
for f in sorted(glob.glob("bench*.json")):
    d = json.load(open(f))
    print(f"| {f[:-5]} | {d['engine_cpu_ms_per_measurement']} | {d['measured_per_s']} | {d['policy_cycle_ms']['p99']} | "
          f"{d['rss_mb']['policer_engine']} | {' '.join(f'{x:.2f}' for x in d['load_average_before'])} |")
