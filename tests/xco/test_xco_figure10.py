"""Figure 10(a) and 10(b) of the XCo paper, slice by slice, for both implementations.

How the figures are read (the text has only the captions): Figure 1(a) has five senders and one
receiver behind a 1 Gb/s cable, so one sender transmits per slice, in turn; Figure 1(b) has 13
senders at 1 Gb/s sharing a 10 Gb/s link, so ten transmit per slice and the window of ten moves
round the 13.  The expected matrices are written out in tests/xco/data/fig10a.json and
fig10b.json (one row per slice, 1 = may transmit).
"""

import json
from pathlib import Path

import pytest

from xtc.xco.scheduler import FastScheduler, ReferenceScheduler
from xtc.xco.topology import load_topology

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("impl", [ReferenceScheduler, FastScheduler])
@pytest.mark.parametrize("fig", ["fig10a.json", "fig10b.json"])
def test_figure10_slice_by_slice(impl, fig):
    spec = json.loads((DATA / fig).read_text())
    topo = load_topology(DATA / spec["topology"])
    S = spec["slice_us"]
    sched = impl(topo, S)
    senders = [topo.host_id(h) for h in spec["senders"]]
    for h in spec["senders"]:
        sched.backlog(0, topo.host_id(h), [topo.host_id(spec["dest"][h])])
    for k, row in enumerate(spec["slices"]):
        if k:
            out = sched.advance(k * S)
            # every directive of a boundary takes effect at the boundary; a sender held in the
            # previous slice is told to send, a sender that must stop is told to hold
            assert {d.t_us for d in out} == {k * S}
            prev = spec["slices"][k - 1]
            told_hold = {d.host for d in out if d.dest is None}
            assert told_hold == {senders[i] for i in range(len(row)) if prev[i] and not row[i]}
        got = [int(sched.dest[x] is not None) for x in senders]
        assert got == row, f"slice {k}"
        for x, h in zip(senders, spec["senders"]):
            if sched.dest[x] is not None:
                assert topo.hosts[sched.dest[x]] == spec["dest"][h]
                assert sched.slice_end[x] == (k + 1) * S


@pytest.mark.parametrize("impl", [ReferenceScheduler, FastScheduler])
def test_giveup_hands_the_slice_on_at_once(impl):
    """Section 3.2, work conservation: s1 gives its slice up at 900 us; s2 gets the rest of it."""
    topo = load_topology(DATA / "fig1a.toml")
    h = topo.host_id
    s = impl(topo, 10_000)
    for i in range(1, 6):
        s.backlog(0, h(f"s{i}"), [h("r1")])
    out = s.giveup(900, h("s1"), h("r1"))
    assert [(d.t_us, topo.hosts[d.host], d.dest and topo.hosts[d.dest], d.end_us) for d in out] == [
        (900, "s2", "r1", 10_000), (900, "s1", None, None)]
    assert s.backlog_group(h("s1")) == frozenset()
    # the next slice goes on round the others; s1 has nothing left and is not scheduled
    s.advance(10_000)
    assert [topo.hosts[x] for x in range(6) if s.dest[x] is not None] == ["s3"]


@pytest.mark.parametrize("impl", [ReferenceScheduler, FastScheduler])
def test_sender_with_two_destinations_rotates_and_is_preempted_from_the_old_one(impl):
    """Section 3.2, preemption: s1, backlogged to s5 and r1, alternates between them (the
    destination granted least recently first; never granted ones by host id, so s5 first); when it
    is moved to r1 it is taken off s5's path and s2 (only r1) must hold, and the other way round."""
    topo = load_topology(DATA / "fig1a.toml")
    h = topo.host_id
    s = impl(topo, 1_000)
    s.backlog(0, h("s1"), [h("r1"), h("s5")])
    s.backlog(0, h("s2"), [h("r1")])
    assert (s.dest[h("s1")], s.dest[h("s2")]) == (h("s5"), h("r1"))
    out = s.advance(1_000)
    # s1 was granted before s2, so it goes first, and r1 is its least recent destination
    assert {(d.host, d.dest) for d in out} == {(h("s1"), h("r1")), (h("s2"), None)}
    load = s.link_load_bps()
    assert load[topo.path(h("s1"), h("s5"))[-1]] == 0
    out = s.advance(2_000)
    assert {(d.host, d.dest) for d in out} == {(h("s1"), h("s5")), (h("s2"), h("r1"))}


@pytest.mark.parametrize("impl", [ReferenceScheduler, FastScheduler])
def test_unchanged_sender_keeps_its_slice(impl):
    """A new backlog mid-slice does not restart or re-send the directive of a transmitting sender."""
    topo = load_topology(DATA / "fig1b.toml")
    h = topo.host_id
    s = impl(topo, 10_000)
    s.backlog(0, h("s1"), [h("r1")])
    out = s.backlog(4_000, h("s2"), [h("r2")])
    assert [(d.host, d.dest, d.t_us, d.end_us) for d in out] == [(h("s2"), h("r2"), 4_000, 10_000)]
    assert s.slice_end[h("s1")] == 10_000
