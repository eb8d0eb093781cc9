"""The runs' table (table.md) and figures: the daemon's CPU and its stages, before/after.

    python table.py     # from this folder, with the project's venv (matplotlib)
"""

from pathlib import Path

from xtc_lab.bench.daemon_runs import BANK, draw, group, table

HERE = Path(__file__).parent
groups = {
    "steady, before (419532a)": group(HERE, "bench-*-before.json"),
    "steady, after": group(HERE, "bench-*-after.json"),
    "steady, without the probe": group(HERE, "noprobe-*.json"),
    "steady, after, with early drop's set of VRs on": group(HERE, "idle-set-*.json"),
    "moving, before (419532a)": group(HERE, "moving-*before.json"),
    "moving, after": group(HERE, "moving-*after.json"),
}
stages = {"core": "the core", BANK: "of it, the controllers", "early drop (limiters)": "early drop",
          "counters": "the counters", "sample rows": "sample rows"}
text = table(groups, stages)
(HERE / "table.md").write_text(text)
print(text, end="")
draw(groups, BANK, "the daemon's controllers' stage, ms a period (1,000 VRs, 1 s period)", HERE / "figure.png")
text2 = table({f"1,000 VRs, 0.1 s period, {n} subscriber{'s' * (n != 1)}": group(HERE, f"period-0.1-*-subs{n}.json")
               for n in (0, 1)} | {f"10,000 VRs, 1 s period, {n} subscriber{'s' * (n != 1)}": group(HERE, f"vrs-10000-subs{n}.json")
                                   for n in (0, 1)}, stages)
(HERE / "table-other-goals.md").write_text(text2)
print(text2, end="")
draw(groups, "early drop (limiters)", "early drop's stage, ms a period (1,000 VRs, none with early drop on)",
     HERE / "early-drop.png")
