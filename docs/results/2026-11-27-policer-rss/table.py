"""The session's tables from its JSON files: python table.py (in this folder)."""
import json
from pathlib import Path

H = Path(__file__).parent


def load(name):
    p = H / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() and p.stat().st_size else None


def rss_table(side, sizes=(100, 500, 1000, 2000, 5000)):
    print(f"\n{side}: RSS against routers (measured / s of healthy routers, load before / after)")
    print("| routers | engine RSS MB | measured / s (healthy) | load before / after |\n|---|---|---|---|")
    for n in sizes:
        d = load(f"rss-{side}-{n}")
        if d:
            print(f"| {n:,} | {d['rss_mb']} | {d['measured_per_s']['plain']} ({round(0.9 * n)}) |"
                  f" {d['loadavg_before'].split()[0]} / {d['loadavg_after'].split()[0]} |")


def slopes(side, lo=250, hi=1000):
    a, b = load(f"sizes-{side}-{lo}"), load(f"sizes-{side}-{hi}")
    if not (a and b):
        return
    k = hi - lo
    print(f"\n{side}: per router, {lo} -> {hi} routers (KB = 1,000 bytes), every router measured"
          f" ({a['measured_per_s']['plain']}, {b['measured_per_s']['plain']} / s)")
    print(f"| what | at {lo} | at {hi} | per router |\n|---|---|---|---|")
    rows = [("RSS", a["rss_mb"] * 1e6, b["rss_mb"] * 1e6)]
    for key in ("pymalloc_arenas", "pymalloc_in_use", "malloc_in_use", "malloc_free", "malloc_mmapped"):
        if key in a["heap_bytes"] and key in b["heap_bytes"]:
            rows.append((key, a["heap_bytes"][key], b["heap_bytes"][key]))
    rows.append(("Python objects reachable from the engine", sum(a["structure_bytes"].values()),
                 sum(b["structure_bytes"].values())))
    for name, x, y in rows:
        print(f"| {name} | {x / 1e6:.1f} MB | {y / 1e6:.1f} MB | {(y - x) / k / 1e3:.1f} KB |")
    if "rss_after_trim_mb" in b:
        print(f"| RSS after a malloc_trim(0) of the profile's own | {a['rss_after_trim_mb']} MB | {b['rss_after_trim_mb']} MB |"
              f" {(b['rss_after_trim_mb'] - a['rss_after_trim_mb']) * 1e3 / k:.1f} KB (trim {a['trim_ms']}, {b['trim_ms']} ms) |")
    print(f"\n{side}: the engine's structures, bytes reachable per router ({lo} -> {hi})")
    print("| structure | per router |\n|---|---|")
    sa, sb = a["structure_bytes"], b["structure_bytes"]
    for name in sorted(sb, key=lambda n: -(sb[n] - sa.get(n, 0)))[:12]:
        print(f"| `{name}` | {(sb[name] - sa.get(name, 0)) / k:,.0f} B |")


def zmq_table():
    print("\nlibzmq, the policer's side, KiB per connection (after malloc_trim in brackets)")
    print("| transport | connections | samples each | N DEALER sockets | one ROUTER socket | saved, after the trim |\n|---|---|---|---|---|---|")
    for t in ("ipc", "tcp", "curve-ipc", "small-ipc", "small-tcp"):
        for n in (1000, 5000):
            for m in (3, 300):
                d = load(f"zmq-{t}-{n}-m{m}")
                if not d:
                    continue
                de, ro = d["dealers"], d["router"]

                def f(x):
                    tr = x.get("rss_kib_per_connection_after_trim")
                    return f"{x['rss_kib_per_connection']}" + (f" ({tr})" if tr is not None else "")
                saved = de["rss_kib_per_connection_after_trim"] - ro["rss_kib_per_connection_after_trim"]
                print(f"| {t} | {n:,} | {m} | {f(de)} | {f(ro)} | {saved:.1f} |")


for side in ("before", "after", "after2", "small", "nopymalloc"):
    rss_table(side)
    slopes(side)
zmq_table()
