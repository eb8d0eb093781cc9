"""The tables of this session's README from its JSON files and runs.log: ``python table.py``.

The load averages are read by the lab's ``xtc_lab.alternate.start_loads`` (the same bytes out); the script as it
ran read them itself (git show 21cdbef:docs/results/2026-11-27-policer-api-load/table.py)."""

from __future__ import annotations

import json
from pathlib import Path

from xtc_lab.alternate import start_loads

HERE = Path(__file__).parent


def loads() -> dict[str, str]:
    """Each run's 1-minute load average at its start (runs.log, as python -m xtc_lab.alternate writes it)."""
    return start_loads(HERE / "runs.log")


def cpu_table(prefix: str) -> list[str]:
    runs = {side: [json.loads(p.read_text()) for p in sorted(HERE.glob(f"{prefix}-[0-9]-{side}.json"))]
            for side in ("before", "after")}
    if not runs["before"] or not runs["after"]:
        return []
    best = {side: {k: min(r["best_ms_per_request"][k] for r in rs if k in r["best_ms_per_request"])
                   for k in rs[0]["best_ms_per_request"]} for side, rs in runs.items()}
    lines = ["| request | before, ms | after, ms |", "|---|---|---|"]
    for k in best["after"]:
        lines.append(f"| `{k}` | {best['before'].get(k)} | {best['after'][k]} |")
    mixes = {side: [r["mix_ms_per_request"] for r in rs] for side, rs in runs.items()}
    lines.append(f"| the bench's mix, weighted (each round) | {' / '.join(map(str, mixes['before']))} "
                 f"| {' / '.join(map(str, mixes['after']))} |")
    return lines


def bench_table() -> list[str]:
    ld = loads()
    lines = ["| run | load (1 min) | served 2xx/s | p50 ms | p99 ms | API CPU ms/request | policer CPU ms/request "
             "| engine measured/s (900 healthy) | engine CPU s/s | load generator ms/request |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in sorted(HERE.glob("bench-*.json"), key=lambda p: ("w2" in p.stem, p.stem)):
        try:
            r = json.loads(p.read_text())
        except json.JSONDecodeError:
            continue
        g, a = r["api_goals"], r["api"]
        lines.append(f"| {p.stem} | {ld.get(p.stem, '?')} | {g['served_2xx_per_s']:,} | {g['p50_ms']} | {g['p99_ms']} "
                     f"| {g['policer_api_cpu_ms_per_request']} | {g['policer_cpu_ms_per_request']} "
                     f"| {g['engine_measured_per_s']:,} | {a['engine_cpu_s_per_s']} | {a['client_cpu_ms_per_request']} |")
    return lines



#: The profile's rows shown (a function's inclusive CPU per request, profiled), by label.
PROFILE_ROWS = [
    ("the whole process (profiled)", None),
    ("pages of routers and VRs (`Store._listing`)", "Store._listing"),
    ("&nbsp;&nbsp;their live values (`live_vr`, `live_router`)", ("Store.live_vr", "Store.live_router")),
    ("&nbsp;&nbsp;the query (`Store._read`, every read)", "Store._read"),
    ("JSON of the answers (`_json`)", "_json"),
    ("threadpool hand-over (`run_in_threadpool`)", "run_in_threadpool"),
    ("lean writes (`answer_write`: body, model, threadpool)", "LeanPath.answer_write"),
    ("HTTP parse (`data_received`)", "BoundedHttpToolsProtocol.data_received (httpproto"),
    ("response send (`Response.__call__`)", "Response.__call__"),
]


def profile_table() -> list[str]:
    prof = {side: json.loads((HERE / f"profile-{side}.json").read_text()) for side in ("before", "after")}

    def ms(side: str, key: object) -> float:
        if key is None:
            return prof[side]["api"]["policer_api_cpu_ms_per_request"]
        keys = key if isinstance(key, tuple) else (key,)
        return round(sum(f["incl_ms_per_request"] for f in prof[side]["functions_by_inclusive_cpu"]
                         if any(f["function"].startswith(k) for k in keys)), 3)

    lines = ["| part | before, ms/request (profiled) | after, ms/request (profiled) |", "|---|---|---|"]
    for label, key in PROFILE_ROWS:
        lines.append(f"| {label} | {ms('before', key)} | {ms('after', key)} |")
    return lines


if __name__ == "__main__":
    print("\n".join(["Without a fleet:", *cpu_table("cpu"), "", "While the engine polices 1,000 routers:",
                     *cpu_table("cpu-fleet"), "", "At 2,000 requests/s offered:", *bench_table(), "",
                     "Profile:", *profile_table()]))
