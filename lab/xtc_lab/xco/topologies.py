"""Topology generators for XCo experiments and benchmarks."""

from __future__ import annotations

from typing import Any

__all__ = ["fig27", "fig27_pairs"]

G = 1_000_000_000


def fig27(rows: int, hosts_per_rack: int = 20, racks_per_row: int = 10) -> dict[str, Any]:
    """The paper's Figure 27 topology as an ``xco-topology/1`` mapping.

    Racks of ``hosts_per_rack`` hosts at 1 Gb/s under a top-of-rack switch, ``racks_per_row`` racks
    per row joined to an end-of-row switch at 10 Gb/s, every end-of-row switch joined to one core
    switch at 10 Gb/s.  Host ``h<row>_<rack>_<k>``.
    """
    switches = [{"name": "core"}]
    hosts = []
    links = []
    for r in range(rows):
        eor = f"eor{r}"
        switches.append({"name": eor})
        links.append({"ends": [eor, "core"], "bps": 10 * G})
        for k in range(racks_per_row):
            tor = f"tor{r}_{k}"
            switches.append({"name": tor})
            links.append({"ends": [tor, eor], "bps": 10 * G})
            for j in range(hosts_per_rack):
                hosts.append({"name": f"h{r}_{k}_{j}", "nic_bps": G, "switch": tor})
    return {"schema": "xco-topology/1", "switch": switches, "host": hosts, "link": links,
            "spanning_tree": {"root": "core"}}


def fig27_pairs(rows: int, hosts_per_row: int = 200) -> list[tuple[int, int]]:
    """Every host sends to the host at the same place in the row ``rows // 2`` further on (host ids)."""
    n = rows * hosts_per_row
    shift = (rows // 2 or 1) * hosts_per_row
    return [(x, (x + shift) % n) for x in range(n)]
