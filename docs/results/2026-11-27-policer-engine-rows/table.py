"""The README's table from this folder's JSON files: python table.py"""
import json, pathlib
here = pathlib.Path(__file__).parent
print("| run | engine CPU / measurement | database CPU / measurement | engine + database | measured / s (900 healthy) | cycle p99 | engine RSS | load (1 min) before / after |")
print("|---|---|---|---|---|---|---|---|")
for db in ("sqlite", "pg"):
    for mode in ("jitter", "steady"):
        for code in ("before", "after"):
            f = here / f"{code}-{db}-{mode}.json"
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
for code in ("before", "after"):
    f = here / f"profile-{code}-jitter.json"
    if f.exists():
        r = json.loads(f.read_text())
        print(f"\nprofile {code}: {r['cpu_ms_per_measurement']} ms/measurement, measured/s {r['measured_per_s']}, plans {r.get('plans')}, cycle {r['cycle_ms']}, rss {r['rss_mb']} MB")
        print("\n".join(r["top_tottime"][:16]))
