"""Hypothesis strategies shared by the scheduler tests: random switch trees with hosts, and event
sequences on them (``(kind, host, argument)`` triples)."""

from hypothesis import strategies as st

from xtc.xco.topology import parse_topology

G = 1_000_000_000
SLICE = 1_000


@st.composite
def topologies(draw, nic_gbps=(1, 1, 2, 5, 10), loops=False):
    """A tree of 1 to 4 switches with 2 to 8 hosts whose NIC rates (Gb/s) are drawn from ``nic_gbps``;
    with ``loops``, sometimes one link more closing a loop (the loader computes a spanning tree)."""
    n_sw = draw(st.integers(1, 4))
    switches = [{"name": f"w{i}"} for i in range(n_sw)]
    links = [{"ends": [f"w{i}", f"w{draw(st.integers(0, i - 1))}"], "bps": draw(st.sampled_from([1, 2, 3, 10])) * G}
             for i in range(1, n_sw)]
    if loops and n_sw >= 3 and draw(st.booleans()):
        pair = {frozenset(link["ends"]) for link in links}
        if frozenset(("w0", f"w{n_sw - 1}")) not in pair:
            links.append({"ends": ["w0", f"w{n_sw - 1}"], "bps": G})
    hosts = []
    for i in range(draw(st.integers(2, 8))):
        h = {"name": f"h{i}", "nic_bps": draw(st.sampled_from(list(nic_gbps))) * G,
             "switch": f"w{draw(st.integers(0, n_sw - 1))}"}
        if draw(st.integers(0, 4)) == 0:
            h["port_bps"] = draw(st.sampled_from([1, 2, 10])) * G
        hosts.append(h)
    return parse_topology({"schema": "xco-topology/1", "switch": switches, "host": hosts, "link": links})


@st.composite
def scenarios(draw, topology, kinds, max_events):
    """``(topology, events)``: 1 to ``max_events`` events whose kinds are drawn from ``kinds``.

    ``backlog`` carries 1 to 3 destinations other than the host, ``giveup*`` one host, ``wait`` a
    delay in microseconds shorter than a slice, every other kind None.
    """
    topo = draw(topology)
    n = topo.n_hosts
    events = []
    for _ in range(draw(st.integers(1, max_events))):
        kind = draw(st.sampled_from(kinds))
        x = draw(st.integers(0, n - 1))
        if kind == "backlog":
            events.append((kind, x, draw(st.lists(st.integers(0, n - 1).filter(lambda d, x=x: d != x), min_size=1, max_size=3))))
        elif kind.startswith("giveup"):
            events.append((kind, x, draw(st.integers(0, n - 1))))
        elif kind == "wait":
            events.append((kind, x, draw(st.integers(1, SLICE - 1))))
        else:
            events.append((kind, x, None))
    return topo, events
