"""What the engine keeps per router between its measurements, held once (issue 50's memory goal): the words
of its kept VR rows (a string the database gives anew for every row read), its routers' VR sets (the set of
the last ``list`` and that of the newest sample, equal on a settled router), and a compact sample's numbers
(in the arrays it came as, not as tuples of floats)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from xtc.policer.engine import Engine
from xtc.policer.link import LinkPool
from xtc.policer.rows import SampleRows
from xtc.policer.store import ExchangeOutcome, Store


def test_kept_rows_share_their_state_words(tmp_path: Path) -> None:
    s = Store(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        for r in ("r1", "r2"):
            s.add_router(r, "tcp://127.0.0.1:1", 100_000.0, "on", None, "test")
            s.record_poll(r, [{"vr": "a", "state": "active"}, {"vr": "b", "state": "paused"},
                              {"vr": "c", "state": "inactive"}])
        got = s.plan_states(["r1", "r2"])
        one, two = got["r1"][1], got["r2"][1]
        for n, word in (("a", "active"), ("b", "paused"), ("c", "inactive")):
            assert one[n].state == two[n].state == word
            assert one[n].state is two[n].state, "each row read holds a string of its own"
            assert one[n].wanted_state is two[n].wanted_state
    finally:
        s.close()


def test_a_vr_name_is_one_string_in_the_samples_the_kept_rows_and_the_list(tmp_path: Path) -> None:
    """A VR's name comes from three decoders (a compact sample's names, a database row, a ``list`` reply), each
    making a string of its own; they are interned, so the engine keeps one per name: here a sample's and the
    kept rows' (the engine interns its routers' VR sets from ``list`` the same way)."""
    from xtc.daemon import api
    from xtc.policer.rows import decode_v3

    names = ["".join(["vr-", "name-", str(i)]) for i in range(3)]  # made at run time: not interned already
    rows = [[n, "active", True, 1000.0, 900.0, 1200.0, 5.0, None, None, None] for n in names]
    sampled, _ = decode_v3(api.samples_message_v3(1.0, 1.0, rows), 64, 1 << 20)
    s = Store(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        s.add_router("r1", "tcp://127.0.0.1:1", 100_000.0, "on", None, "test")
        s.record_poll("r1", [{"vr": "".join(["vr-", "name-", str(i)]), "state": "active"} for i in range(3)])
        kept = s.plan_states(["r1"])["r1"][1]
        for n in sampled.names:
            (key,) = [k for k in kept if k == n]
            assert key is n and kept[n].name is n, "a name held twice"
    finally:
        s.close()


class _Samples:
    """A unit test's stand-in for the sample streams: the newest sample of every router, just arrived."""

    def __init__(self, vrs: SampleRows):
        self.vrs = vrs

    def latest(self, name: str) -> tuple[float, SampleRows]:
        return time.monotonic(), self.vrs

    def close(self) -> None:
        pass


def test_a_settled_router_keeps_one_vr_set(tmp_path: Path) -> None:
    names = tuple(f"vr{i}" for i in range(16))
    sample = SampleRows(names, ("active",) * 16, (True,) * 16, (1000.0,) * 16, (900.0,) * 16, (900.0,) * 16,
                        (50.0,) * 16, (None,) * 16)
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    pool = LinkPool(0.5)
    eng = Engine(store, pool, samples=_Samples(sample))  # type: ignore[arg-type]
    try:
        r = {"name": "r1", "pub_endpoint": "tcp://127.0.0.1:2"}
        st = eng._st("r1")
        st.vr_set = frozenset(names)  # as its last 'list' left it
        assert eng._sampled_vrs(r) is sample
        assert st.sample_names is not None and st.sample_names[1] == st.vr_set
        assert st.sample_names[1] is st.vr_set, "two equal sets of the router's VR names kept"
        assert eng._sampled_vrs(r) is sample  # and again: the same
        assert st.sample_names[1] is st.vr_set
    finally:
        eng.stop()
        pool.close()
        store.close()


def _v3(t: float, rows: list[list]) -> SampleRows:
    from xtc.daemon import api
    from xtc.policer.rows import decode_v3

    vrs, _ = decode_v3(api.samples_message_v3(t, 1.0, rows), 64, 1 << 20)
    return vrs


def test_a_compact_sample_keeps_its_numbers_in_arrays_until_a_column_is_asked_for(tmp_path: Path) -> None:
    """An ``xtc-samples/3`` message recorded over a settled router's rows, its rates moved, leaves its number
    columns as arrays (no tuple of floats made); asked for, they are what the message says."""
    rows = [[f"vr{i}", "active", True, 1000.0 + i, 900.0 + i, 1200.0, 5.0, None, None, None] for i in range(16)]
    rows[3][6] = None  # a missing value
    s = Store(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        s.add_router("r1", "tcp://127.0.0.1:1", 1e7, "on", None, "test")
        first = _v3(1.0, rows)
        s.record_outcomes([ExchangeOutcome("r1", "reachable", None, vrs=first)])  # the VRs' rows made
        s.plan_states(["r1"])
        second = _v3(2.0, rows)
        s.record_outcomes([ExchangeOutcome("r1", "reachable", None, vrs=second)])
        s.plan_states(["r1"], recorded=True)
        for r in rows:
            r[4] *= 1.05  # the rates move, nothing else
        third = _v3(3.0, rows)
        s.record_outcomes([ExchangeOutcome("r1", "reachable", None, vrs=third)])
        assert third._cols == [None] * 4, "the number columns of a compact message made as tuples of floats"
        assert s.live.vrs("r1")["vr2"] == (pytest.approx(902.0 * 1.05), 1200.0, None)
        assert third.forwarded_pps == tuple(r[4] for r in rows)
        assert third.cap_percent[3] is None and third.cap_percent[0] == 5.0
        assert third.same_numbers(second, (0, 2, 3)) and not third.same_numbers(second, (1,))
        assert second.same_numbers(_v3(9.0, [[*r[:4], r[4] / 1.05, *r[5:]] for r in rows]), (0, 1, 2, 3))
        assert not second.same_numbers(_v3(9.0, [[*r[:6], 5.0, *r[7:]] for r in rows]), (3,))  # missing != 5.0
    finally:
        s.close()
