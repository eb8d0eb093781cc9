"""The README's tables from this folder's JSON files: python table.py [PREFIX] (r5-: round 5; none: round 2;
round1/: round 1)"""
import json, pathlib, sys
here = pathlib.Path(__file__).parent
pre = sys.argv[1] if len(sys.argv) > 1 else ""
print("| run | engine CPU / measurement | database CPU / measurement | engine + database | measured / s (900 healthy) | cycle p99 | engine RSS | load (1 min) before / after |")
print("|---|---|---|---|---|---|---|---|")
for db in ("sqlite", "pg"):
    for mode in ("jitter", "steady"):
        for code in ("before", "after"):
            f = here / f"{pre}{code}-{db}-{mode}.json"
            if not f.exists():
                continue
            r = json.loads(f.read_text())
            e, d = r.get("engine_cpu_ms_per_measurement"), r.get("database_cpu_ms_per_measurement")
            tot = None if e is None else round(e + (d or 0.0), 3)
            up0 = r["uptime_before"].split("load average:")[1].split(",")[0].strip()
            up1 = round(r["load_average_after"][0], 2)
            name = f"{'SQLite' if db == 'sqlite' else 'PostgreSQL'}, {'jitter 0.05' if mode == 'jitter' else 'steady'}, {code}"
            cyc = r.get("policy_cycle_ms") or {}
            print(f"| {name} | {e} ms | {'(in the engine)' if d is None else f'{d} ms'} | {tot} ms | {r.get('measured_per_s')} "
                  f"| {cyc.get('p99')} ms | {r['rss_mb']['policer_engine']} MB | {up0} / {up1} |")
print()
print("| profile | CPU / measurement (unprofiled) | measured / s | planned / quiet / skipped | load before | link thread | worker | cycle thread | libzmq I/O | fleet CPU s/s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for j in ("0.05", "0"):
    for code in ("before", "after", "v2", "v3"):
        f = here / f"profile{pre.rstrip('-').lstrip('r')}-{code}-jitter{j}.json"
        if f.exists():
            r = json.loads(f.read_text())
            p = r["plans"]["plain"]
            load = r.get("uptime_before", "").split("load average:")[-1].split(",")[0].strip()
            th = r.get("thread_cpu_ms_per_measurement") or {}
            print(f"| {code}, jitter {j} | {r['cpu_ms_per_measurement']['plain']} ms | {r['measured_per_s']['plain']} "
                  f"| {p['planned']} / {p['quiet']} / {p['skipped']} | {load} | {th.get('policer-links')} | "
                  f"{th.get('policer-worker')} | {th.get('policer-engine')} | {th.get('ZMQbg/IO/0')} | {r.get('fleet_cpu_s_per_s')} |")
print()
for f in sorted(here.glob("daemon-*.json")):
    try:
        r = json.loads(f.read_text())
    except ValueError:
        continue
    print(f.name, [(x["workload"], round(x["core_percent"], 1)) for x in r["results"]])
