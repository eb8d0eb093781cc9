"""The datagrams session's tables (python table.py > tables.md), by xtc_lab.policer_compare.profile_tables."""

from pathlib import Path

from xtc_lab.policer_compare import profile_tables

print("\n".join(profile_tables(Path(__file__).parent, "udp*-*-*.json", ("samples via", "mode"))))
