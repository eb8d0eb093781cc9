"""The tables of this session's profile runs (python table.py > tables.md): the freeze's rounds (profile*), the
fleets' (spread* here, count* in synced/), by xtc_lab.policer_compare.profile_tables."""

from pathlib import Path

from xtc_lab.policer_compare import profile_tables

here = Path(__file__).parent
for folder, pattern in ((here, "profile*-*-*.json"), (here, "spread*-*-*.json"), (here / "synced", "count*-*-*.json")):
    print(f"## {folder.name}/{pattern}\n")
    print("\n".join(profile_tables(folder, pattern, ("side", "mode"))) + "\n")
