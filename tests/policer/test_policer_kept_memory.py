"""What the engine keeps per router between its measurements, held once (issue 50's memory goal): the words
of its kept VR rows (a string the database gives anew for every row read), and its routers' VR sets (the
set of the last ``list`` and that of the newest sample, equal on a settled router)."""

from __future__ import annotations

import time
from pathlib import Path

from xtc.policer.engine import Engine
from xtc.policer.link import LinkPool
from xtc.policer.rows import SampleRows
from xtc.policer.store import Store


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
            assert one[n]["state"] == two[n]["state"] == word
            assert one[n]["state"] is two[n]["state"], "each row read holds a string of its own"
            assert one[n]["wanted_state"] is two[n]["wanted_state"]
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
